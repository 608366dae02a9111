"""`compile --remote`: the Neuron compile (or an LLM container's own export) as a SageMaker job, unless the S3
compile cache already holds its result under its content key.

The job is deployment ``<name>-compile``: its staged source goes to S3 content-addressed, then the execution role
and the job through the executor and state (:func:`~neurondeploy.ops.sagemaker_job.start_or_attach`: a job still
running is attached to, never doubled). Waiting for it is the training job's waiter; the compiler owns the key and
the cache.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from neurondeploy.archive import artifact_digest
from neurondeploy.aws.transport import AwsTransport
from neurondeploy.compiler.cache import CompileCache
from neurondeploy.compiler.llm_export import (
    JOB_MODULE,
    find_precompiled,
    job_arguments,
    llm_artifact_key,
    precompiled_prefix,
)
from neurondeploy.compiler.remote import fetch_remote_artifact, remote_artifact_key, stage_job_source
from neurondeploy.compiler.vllm_neuron_compile import JOB_MODULE as VLLM_JOB_MODULE
from neurondeploy.compiler.vllm_neuron_compile import job_arguments as vllm_job_arguments
from neurondeploy.compiler.vllm_neuron_compile import vllm_compiled_key
from neurondeploy.engine.preflight import needs_of, preflight
from neurondeploy.engine.state import StateStore
from neurondeploy.engine.state_s3 import open_state
from neurondeploy.engine.uploads import ensure_bucket, upload_artifact
from neurondeploy.errors import NeurondeployError
from neurondeploy.ops.sagemaker_job import JobToStart, Review, exit_code_of, new_run_id, start_or_attach, wait_for_job
from neurondeploy.planner.artifact_target import artifact_sdk
from neurondeploy.planner.checks import model_architecture, refuse_errors
from neurondeploy.planner.context import plan_context
from neurondeploy.planner.llm_compile import llm_compile_host
from neurondeploy.resources.naming import bucket_name
from neurondeploy.resources.precompiled import MODEL_DIR
from neurondeploy.resources.sagemaker_compile import (
    COMPILE_MAX_RUNTIME_S,
    DEFAULT_COMPILE_INSTANCE,
    JOB_RESOURCE,
    CompileJob,
    compile_cache_uri,
    compile_deployment,
    compile_job_resources,
    compile_source_uri,
)
from neurondeploy.resources.sagemaker_endpoint import container_image, precompiled_model_environment
from neurondeploy.serving import sm_vllm
from neurondeploy.specs import LoadedSpec, load_spec


@dataclass
class RemoteCompileJob:
    deployment: str
    job_name: str
    attached: bool
    cache_uri: str
    artifact_key: str
    label: str  # "compile job", or "export job" for an LLM
    destination: str  # where the job writes its result: the artifact's S3 key, or the exported model's prefix


@dataclass(frozen=True)
class Export:
    """An LLM's compile job: the module the image runs, its arguments and the environment it adds."""

    module: str
    arguments: tuple[str, ...]
    environment: tuple[tuple[str, str], ...] = ()
    key: str = ""  # the cache entry it builds


@dataclass
class RemoteCompile:
    """How `compile --remote` ended."""

    summary: dict  # what `compile --remote --json` prints: key, cache, job, status, where the result is
    exit_code: int  # 0, or the job's (Failed, Stopped)
    artifact: Path | None = None  # the compiled artifact, fetched into the local cache (None for an LLM export)


def default_cache_uri(transport: AwsTransport, loaded: LoadedSpec) -> str:
    account = transport.call("sts", "GetCallerIdentity", {})["Account"]
    return compile_cache_uri(loaded.spec.region, plan_context(loaded, account_id=account))


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
    export: Export | None = None,
    review: Review | None = None,
) -> RemoteCompileJob:
    """Upload the job's source (``stage_source(dir)`` writes it) and create the compile job; returns at once.
    An LLM export (``export``: the job's module, arguments and environment) runs code its image carries: no source
    is sent.
    ``review`` sees what a new job creates and costs before anything is sent, and may raise to stop it."""
    on_event = on_event or (lambda message: None)
    spec = compile_deployment(loaded.spec)
    account = transport.call("sts", "GetCallerIdentity", {})["Account"]
    ctx = plan_context(loaded, account_id=account)
    cache_uri = cache_uri or compile_cache_uri(spec.region, ctx)
    module, arguments, environment = (export.module, export.arguments, export.environment) if export else (None, (), ())
    job = CompileJob(artifact_key, cache_uri, artifact_sdk(spec), instance_type, module, arguments, environment)
    # read-only, before state, the review or any upload: what the job names outside itself (its image, secrets, a
    # given role) is there; the shared bucket holds only what this run writes
    planned = compile_job_resources(spec, dataclasses.replace(ctx, run_id=new_run_id()), job)
    preflight(transport, needs_of(spec, planned, account, shared_bucket=bucket_name(spec.region, ctx)), on_event)
    with tempfile.TemporaryDirectory(prefix="neurondeploy-compile-") as scratch:

        def launch(run_id: str):
            source = Path(scratch) / "source"
            digest = None
            if stage_source is not None:
                stage_source(source)
                digest = artifact_digest(source)
            run = dataclasses.replace(ctx, run_id=run_id, source_digest=digest[:16] if digest else None)
            resources = compile_job_resources(spec, run, job)  # pure: a refused request stops before any send
            if review is not None:
                uploads = [f"the compile job's source, to {compile_source_uri(spec, run)}"] if digest else []
                review(JobToStart(resources, instance_type, 1, COMPILE_MAX_RUNTIME_S, uploads, spec.region))
            ensure_bucket(transport, spec.region, run)
            if digest is not None:
                uri = compile_source_uri(spec, run)
                sent = upload_artifact(transport, source, uri, digest)
                on_event(
                    f"{'uploaded' if sent else 'unchanged, not uploaded again:'} the compile job's source -> {uri}"
                )
            return resources

        job_name, attached = start_or_attach(
            state,
            transport,
            deployment=spec.name,
            region=spec.region,
            job_resource=JOB_RESOURCE,
            what="compile job",
            launch=launch,
            spec_digest=loaded.digest,
            spec_json=spec.model_dump_json(),
            on_event=on_event,
        )
    if export:
        label, destination = "export job", precompiled_prefix(cache_uri, artifact_key)
    else:
        label, destination = "compile job", f"{cache_uri}/{artifact_key}"
    return RemoteCompileJob(spec.name, job_name, attached, cache_uri, artifact_key, label, destination)


def compile_remote(
    spec: str | Path | LoadedSpec,
    *,
    transport: AwsTransport | None = None,
    state: StateStore | None = None,
    cache_s3: str | None = None,
    cache_dir: Path | None = None,
    instance_type: str | None = None,
    wait: bool = True,
    wait_delay_s: float = 15,
    on_event: Callable[[str], None] | None = None,
    on_log: Callable[[str], None] | None = None,
    on_status: Callable[[str], None] | None = None,
    on_started: Callable[[RemoteCompileJob, str], None] | None = None,
    on_finished: Callable[[dict], None] | None = None,
    review: Review | None = None,
) -> RemoteCompile:
    """Compile ``spec`` for Neuron on SageMaker (an LLM container: export it with the container's own code on the
    smallest Neuron host that fits it), unless the S3 compile cache has it. ``on_started`` hears the job and the
    instance type it runs on, ``on_finished`` its final description; ``on_log`` and ``on_status`` as in `train`.
    ``review`` sees what a new job creates and its price before anything is sent (raising stops it, nothing made);
    without it the job starts, as `compile --remote --yes` does."""
    loaded = spec if isinstance(spec, LoadedSpec) else load_spec(spec)
    refuse_errors(loaded)
    transport = transport or AwsTransport(loaded.spec.region, wait_delay_s=wait_delay_s)
    state = state if state is not None else open_state(None)
    on_event = on_event or (lambda message: None)
    llm = loaded.spec.kind == "inference" and loaded.spec.container.llm
    # offline first: a spec compile --remote cannot take is refused before any AWS call (credentials or not)
    key = None if llm else remote_artifact_key(loaded, CompileCache(root=cache_dir).root)
    cache_uri = cache_s3 or default_cache_uri(transport, loaded)

    def follow(job: RemoteCompileJob, instance: str, summary: dict) -> int | None:
        """The exit code to return now (started, or not completed), else None: the job completed."""
        if on_started is not None:
            on_started(job, instance)
        if not wait:
            summary["status"] = "started"
            return 0
        finished = wait_for_job(
            transport, job.job_name, delay_s=wait_delay_s, on_event=on_log or on_event, on_status=on_status
        )
        if on_finished is not None:
            on_finished(finished)
        summary["status"] = finished["TrainingJobStatus"]
        return exit_code_of(finished["TrainingJobStatus"]) or None

    if llm:
        return _export_llm(loaded, transport, state, cache_uri, instance_type, on_event, follow, review)
    cache = CompileCache(root=cache_dir, s3_uri=cache_uri)
    summary = {"artifact_key": key, "cache_uri": cache_uri, "job_name": None, "status": None, "artifact": None}
    found = fetch_remote_artifact(key, cache)
    if found is None:
        instance = instance_type or DEFAULT_COMPILE_INSTANCE
        job = start_remote_compile(
            loaded,
            transport=transport,
            state=state,
            artifact_key=key,
            stage_source=lambda directory: stage_job_source(loaded, directory),
            cache_uri=cache_uri,
            instance_type=instance,
            on_event=on_event,
            review=review,
        )
        summary["job_name"] = job.job_name
        code = follow(job, instance, summary)
        if code is not None:
            return RemoteCompile(summary, code)
        found = fetch_remote_artifact(key, cache)
        if found is None:
            raise NeurondeployError(
                f"compile job {job.job_name} completed but {cache_uri} has no artifact {key[:16]}",
                f"read its logs: neurondeploy logs {job.deployment}",
            )
    else:
        summary["status"] = "cached"
    summary["artifact"] = str(found)
    return RemoteCompile(summary, 0, artifact=found)


def llm_export(loaded: LoadedSpec, cache_uri: str) -> Export:
    """What compile --remote runs for an LLM container, and the cache key apply looks its result up by: the Hugging
    Face containers' optimum-neuron export, or for a container that compiles when it starts (vllm-neuron) its own
    start with the endpoint's environment over the compiled model (compiler.vllm_neuron_compile)."""
    spec = loaded.spec
    ctx = plan_context(loaded)
    image = container_image(spec, ctx)
    if not spec.container.compiles_at_start:
        key = llm_artifact_key(spec, image)
        return Export(JOB_MODULE, tuple(job_arguments(spec, key, cache_uri)), key=key)
    environment = precompiled_model_environment(spec, ctx)
    key = vllm_compiled_key(spec, image, environment)
    arguments = vllm_job_arguments(
        spec,
        key,
        cache_uri,
        model_dir=MODEL_DIR,
        health_url=f"http://127.0.0.1:{sm_vllm.PORT}/ping",
        launcher=spec.container.wrapper_entrypoint,
    )
    return Export(VLLM_JOB_MODULE, tuple(arguments), tuple(sorted(environment.items())), key)


def _export_llm(loaded, transport, state, cache_uri, instance_type, on_event, follow, review) -> RemoteCompile:
    """An LLM: the container's own export or compile, unless the cache holds the model."""
    spec = loaded.spec
    export = llm_export(loaded, cache_uri)
    key = export.key
    prefix = precompiled_prefix(cache_uri, key)
    summary = {"artifact_key": key, "cache_uri": cache_uri, "job_name": None, "status": None, "model_uri": prefix}
    size = find_precompiled(cache_uri, key)
    if size is not None:
        summary.update(status="cached", size_bytes=size)
        return RemoteCompile(summary, 0)
    if instance_type:  # the user's choice: not sized (nor refused) here
        instance, reasons = instance_type, (f"{instance_type}, as --instance-type says",)
    else:
        host = llm_compile_host(spec, model_architecture(loaded))
        instance, reasons = host.instance_type, host.reasons
    for line in reasons:
        on_event(f"export host: {line}")
    job = start_remote_compile(
        loaded,
        transport=transport,
        state=state,
        artifact_key=key,
        stage_source=None,
        cache_uri=cache_uri,
        instance_type=instance,
        on_event=on_event,
        export=export,
        review=review,
    )
    summary.update(job_name=job.job_name, instance_type=instance)
    code = follow(job, instance, summary)
    if code is not None:
        return RemoteCompile(summary, code)
    if find_precompiled(cache_uri, key) is None:
        raise NeurondeployError(
            f"export job {job.job_name} completed but {cache_uri} has no model {key[:16]}",
            f"read its logs: neurondeploy logs {job.deployment}",
        )
    return RemoteCompile(summary, 0)
