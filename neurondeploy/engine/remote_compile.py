"""Start `compile --remote`'s SageMaker job: the staged source in S3 (content-addressed), then the execution role
and the job through the executor and state, as deployment ``<name>-compile``.

A job of that deployment still running is attached to, never doubled; a finished one is forgotten first
(SageMaker can neither stop nor delete a finished job). Whether the artifact is already in the cache, and waiting
for the job, are the caller's (the compiler owns the key and the cache; the CLI waits with the training job
runner's waiter).
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from neurondeploy.archive import artifact_digest
from neurondeploy.aws.errors import is_gone
from neurondeploy.aws.transport import AwsCallError, AwsTransport
from neurondeploy.engine.executor import Executor
from neurondeploy.engine.state import StateStore
from neurondeploy.engine.uploads import ensure_bucket, upload_artifact
from neurondeploy.planner.artifact_target import artifact_sdk
from neurondeploy.planner.context import plan_context
from neurondeploy.resources.sagemaker_compile import (
    DEFAULT_COMPILE_INSTANCE,
    JOB_RESOURCE,
    CompileJob,
    compile_cache_uri,
    compile_deployment,
    compile_job_resources,
    compile_source_uri,
)
from neurondeploy.specs import LoadedSpec

RUNNING = ("InProgress", "Stopping")


@dataclass
class RemoteCompileJob:
    deployment: str
    job_name: str
    attached: bool
    cache_uri: str
    artifact_key: str


def default_cache_uri(transport: AwsTransport, loaded: LoadedSpec) -> str:
    account = transport.call("sts", "GetCallerIdentity", {})["Account"]
    return compile_cache_uri(loaded.spec.region, plan_context(loaded, account_id=account))


def _recorded_job(state: StateStore, deployment: str) -> str | None:
    recorded = state.get(deployment)
    resource = recorded.resources.get(JOB_RESOURCE) if recorded else None
    for request in resource.create_requests if resource else []:
        if request.get("operation") == "CreateTrainingJob":
            return request["params"]["TrainingJobName"]
    return None


def _job_status(transport: AwsTransport, name: str) -> str:
    try:
        return transport.call("sagemaker", "DescribeTrainingJob", {"TrainingJobName": name})["TrainingJobStatus"]
    except AwsCallError as exc:
        if is_gone(exc):
            return "gone"
        raise


def start_remote_compile(
    loaded: LoadedSpec,
    *,
    transport: AwsTransport,
    state: StateStore,
    artifact_key: str,
    stage_source: Callable[[Path], None] | None,
    cache_uri: str | None = None,
    instance_type: str = DEFAULT_COMPILE_INSTANCE,
    on_event: Callable[[str], None] | None = None,
    export: tuple[str, tuple[str, ...]] | None = None,
) -> RemoteCompileJob:
    """Upload the job's source (``stage_source(dir)`` writes it) and create the compile job; returns at once.
    An LLM export (``export``: the job's module and arguments) runs code its image carries: no source is sent."""
    on_event = on_event or (lambda message: None)
    spec = compile_deployment(loaded.spec)
    account = transport.call("sts", "GetCallerIdentity", {})["Account"]
    ctx = plan_context(loaded, account_id=account)
    cache_uri = cache_uri or compile_cache_uri(spec.region, ctx)
    with state.lock(spec.name, spec.region, "training"):
        previous = _recorded_job(state, spec.name)
        if previous:
            status = _job_status(transport, previous)
            if status in RUNNING:
                on_event(f"compile job {previous} is still {status}: attaching to it instead of starting another")
                return RemoteCompileJob(spec.name, previous, True, cache_uri, artifact_key)
            state.remove_resource(spec.name, JOB_RESOURCE)  # finished: it can be neither stopped nor deleted
        run_id = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
        module, arguments = export or (None, ())
        job = CompileJob(artifact_key, cache_uri, artifact_sdk(spec), instance_type, module, tuple(arguments))
        with tempfile.TemporaryDirectory(prefix="neurondeploy-compile-") as scratch:
            source = Path(scratch) / "source"
            digest = None
            if stage_source is not None:
                stage_source(source)
                digest = artifact_digest(source)
            ctx = dataclasses.replace(ctx, run_id=run_id, source_digest=digest[:16] if digest else None)
            resources = compile_job_resources(
                spec, ctx, job
            )  # pure: a request the builders refuse stops here, before anything is sent
            ensure_bucket(transport, spec.region, ctx)
            if digest is not None:
                uri = compile_source_uri(spec, ctx)
                sent = upload_artifact(transport, source, uri, digest)
                on_event(
                    f"{'uploaded' if sent else 'unchanged, not uploaded again:'} the compile job's source -> {uri}"
                )
        Executor(transport, state, on_event=on_event).apply(
            spec.name, spec.region, "training", resources, spec_digest=loaded.digest, spec_json=spec.model_dump_json()
        )
    job_name = next(r for r in resources if r.name == JOB_RESOURCE).create[0].params["TrainingJobName"]
    return RemoteCompileJob(spec.name, job_name, False, cache_uri, artifact_key)
