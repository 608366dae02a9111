"""`apply SPEC`: checks, then the shared bucket and the compiled artifact in S3 (only when they changed), then
the deployment's resources through the executor.

Everything idempotent: a second apply of an unchanged spec sends no mutating call — the bucket is found
(HeadBucket), the artifact's sha256 matches the object's metadata (HeadObject), and every resource is in state.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from neurondeploy.aws.transport import AwsTransport
from neurondeploy.engine.destroy import delete_orphans
from neurondeploy.engine.executor import ApplyResult, Executor
from neurondeploy.engine.state import StateStore
from neurondeploy.engine.uploads import ApplyError, check_serving_image, ensure_bucket, upload_artifact
from neurondeploy.planner.checks import errors_of, run_checks
from neurondeploy.planner.context import plan_context
from neurondeploy.planner.plan import PlanRefused
from neurondeploy.resources.deployment import deployment_resources
from neurondeploy.resources.naming import artifact_uri
from neurondeploy.specs import InferenceSpec, LoadedSpec


def needs_artifact(loaded: LoadedSpec) -> bool:
    spec = loaded.spec
    return isinstance(spec, InferenceSpec) and spec.deployment.container.kind == "neurondeploy"


def apply_spec(
    loaded: LoadedSpec,
    *,
    transport: AwsTransport,
    state: StateStore,
    artifact_dir: Path | None = None,
    compile_artifact: Callable[[LoadedSpec], Path] | None = None,
    rollback: bool = False,
    parallel: bool = True,
    on_event: Callable[[str], None] | None = None,
    context: dict | None = None,
) -> ApplyResult:
    spec = loaded.spec
    if spec.kind == "training":
        raise ApplyError(
            "apply creates endpoints; training jobs run with `neurondeploy train SPEC`", "use neurondeploy train"
        )
    findings = errors_of(run_checks(loaded))
    if findings:
        raise PlanRefused(findings)
    on_event = on_event or (lambda message: None)
    account = transport.call("sts", "GetCallerIdentity", {})["Account"]
    ctx = plan_context(loaded, account_id=account, **(context or {}))
    check_serving_image(transport, spec, ctx)  # before any upload: a refused apply leaves nothing behind
    if needs_artifact(loaded):
        if artifact_dir is None:
            if compile_artifact is None:
                raise ApplyError(
                    "this deployment serves a compiled artifact and none was given",
                    "pass --artifact DIR, or let apply compile it",
                )
            artifact_dir = compile_artifact(loaded)
        ensure_bucket(transport, spec.region, ctx)
        uri = artifact_uri(spec, ctx)
        if upload_artifact(transport, Path(artifact_dir), uri):
            on_event(f"uploaded the artifact to {uri}")
        ctx = dataclasses.replace(ctx, artifact_s3_uri=uri)
    resources = deployment_resources(spec, ctx)
    executor = Executor(transport, state, parallel=parallel, on_event=on_event)
    existed = state.get(spec.name) is not None
    with state.lock(spec.name, spec.region, spec.kind):  # re-entered by the executor
        before = state.get(spec.name)
        if (
            existed
            and before is not None
            and (before.spec_digest != loaded.digest or any(not r.complete for r in before.resources.values()))
        ):
            # The last apply did not finish (or the spec changed): anything it created without hearing back goes first.
            delete_orphans(
                transport, before, hosted_zone_ids=[spec.dns.hosted_zone_id] if spec.dns else [], on_event=on_event
            )
        return executor.apply(
            spec.name,
            spec.region,
            spec.kind,
            resources,
            spec_digest=loaded.digest,
            spec_json=spec.model_dump_json(),
            rollback=rollback,
        )
