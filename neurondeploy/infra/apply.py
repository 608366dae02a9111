"""`apply SPEC`: checks, then the shared bucket and the compiled artifact in S3 (only when they changed), then
the deployment's resources through the executor.

Everything idempotent: a second apply of an unchanged spec sends no mutating call — the bucket is found
(HeadBucket), the artifact's sha256 matches the object's metadata (HeadObject), and every resource is in state.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable

from neurondeploy.errors import NeurondeployError
from neurondeploy.infra.archive import artifact_digest, pack_artifact
from neurondeploy.infra.destroy import delete_orphans
from neurondeploy.infra.deployment import deployment_resources, plan_context, shared_bucket_resource
from neurondeploy.infra.executor import ApplyResult, Executor
from neurondeploy.infra.resources import PlanContext, artifact_uri, split_s3
from neurondeploy.infra.state import StateStore
from neurondeploy.infra.transport import AwsCallError, AwsTransport
from neurondeploy.planner.checks import errors_of, run_checks
from neurondeploy.planner.plan import PlanRefused
from neurondeploy.specs import InferenceSpec, LoadedSpec

SHA256_METADATA = "neurondeploy-sha256"


class ApplyError(NeurondeployError):
    exit_code = 6


def needs_artifact(loaded: LoadedSpec) -> bool:
    spec = loaded.spec
    return isinstance(spec, InferenceSpec) and spec.deployment.container.kind == "neurondeploy"


def ensure_bucket(transport: AwsTransport, region: str, ctx: PlanContext) -> str:
    bucket = shared_bucket_resource(region, ctx)
    name = bucket.create[0].params["Bucket"]
    try:
        transport.call("s3", "HeadBucket", {"Bucket": name})
        return name
    except AwsCallError as exc:
        if exc.code not in ("404", "NoSuchBucket", "NotFound"):
            raise ApplyError(f"shared bucket {name}: {exc.message}", "check the bucket's owner and your permissions") from exc
    for request in bucket.create:
        transport.call(request.service, request.operation, request.params)
    return name


def upload_artifact(transport: AwsTransport, directory: Path, uri: str, digest: str | None = None) -> bool:
    """Put the packed artifact at ``uri`` unless the object there already has the same sha256 (``digest``, when
    the caller has it already: :func:`artifact_digest` of ``directory``). True if sent."""
    digest = digest or artifact_digest(directory)
    bucket, key = split_s3(uri)
    try:
        head = transport.call("s3", "HeadObject", {"Bucket": bucket, "Key": key})
        if head.get("Metadata", {}).get(SHA256_METADATA) == digest:
            return False
    except AwsCallError as exc:
        if exc.code not in ("404", "NoSuchKey", "NotFound"):
            raise
    transport.call("s3", "PutObject", {"Bucket": bucket, "Key": key, "Body": pack_artifact(directory), "Metadata": {SHA256_METADATA: digest},
                                       "ContentType": "application/gzip", "ServerSideEncryption": "AES256"})
    return True


def check_serving_image(transport: AwsTransport, spec, ctx: PlanContext) -> None:
    """An endpoint of our container needs our image in the account's ECR. SageMaker would only find out after
    creating the endpoint (and failing it minutes later), so look first and say how to push it."""
    from neurondeploy.sagemaker.requests import SERVING_REPOSITORY, default_serving_image

    if not (isinstance(spec, InferenceSpec) and spec.deployment.platform == "sagemaker"
            and spec.deployment.container.kind == "neurondeploy" and not spec.deployment.container.image_uri
            and ctx.serving_image_uri is None):
        return
    image = default_serving_image(spec.region, ctx)  # what the model will use: no image_uri given, none in ctx
    tag = image.rsplit(":", 1)[1]
    try:
        transport.call("ecr", "DescribeImages", {"repositoryName": SERVING_REPOSITORY, "imageIds": [{"imageTag": tag}]})
    except AwsCallError as exc:
        if exc.code not in ("RepositoryNotFoundException", "ImageNotFoundException"):
            raise
        registry = image.split("/", 1)[0]
        raise ApplyError(f"the serving image {image} is not in ECR ({exc.code}); the endpoint would fail to start",
                         f"docker build -f infra/serving/Dockerfile -t {image} . && aws ecr get-login-password --region "
                         f"{spec.region} | docker login --username AWS --password-stdin {registry} && docker push {image} "
                         "(create the repository first), or set deployment.container.image_uri") from None


def apply_spec(loaded: LoadedSpec, *, transport: AwsTransport, state: StateStore, artifact_dir: Path | None = None,
               compile_artifact: Callable[[LoadedSpec], Path] | None = None, rollback: bool = False,
               parallel: bool = True, on_event: Callable[[str], None] | None = None,
               context: dict | None = None) -> ApplyResult:
    spec = loaded.spec
    if spec.kind == "training":
        raise ApplyError("apply creates endpoints; training jobs run with `neurondeploy train SPEC`", "use neurondeploy train")
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
                raise ApplyError("this deployment serves a compiled artifact and none was given",
                                 "pass --artifact DIR, or let apply compile it")
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
        if existed and before is not None and (before.spec_digest != loaded.digest
                                               or any(not r.complete for r in before.resources.values())):
            # The last apply did not finish (or the spec changed): anything it created without hearing back goes first.
            delete_orphans(transport, before, hosted_zone_ids=[spec.dns.hosted_zone_id] if spec.dns else [],
                           on_event=on_event)
        return executor.apply(spec.name, spec.region, spec.kind, resources, spec_digest=loaded.digest,
                              spec_json=spec.model_dump_json(), rollback=rollback)
