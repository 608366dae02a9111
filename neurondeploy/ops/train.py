"""`train SPEC`: a training spec's run, as a SageMaker job on Trn1 (start or attach, then follow it) or with
torchrun on this machine (``local=True``); `stop NAME`; the job line of `status NAME`.

Each SageMaker run is a new job, ``<name>-<UTC YYYYMMDD-HHMMSS>``, recorded as the deployment's ``training-job``
resource (the execution role is kept across runs). The source directory is uploaded content-addressed
(``source/sourcedir-<sha256>.tar.gz``): an unchanged source is not uploaded again, and the execution role's read
prefix (``<name>/source/``) stays the same from run to run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from neurondeploy.archive import artifact_digest
from neurondeploy.aws.transport import AwsCallError, AwsTransport
from neurondeploy.engine.preflight import needs_of, preflight
from neurondeploy.engine.quotas import check_quotas
from neurondeploy.engine.state import StateStore
from neurondeploy.engine.state_s3 import open_state
from neurondeploy.engine.uploads import ensure_bucket, upload_artifact
from neurondeploy.errors import NeurondeployError
from neurondeploy.ops.sagemaker_job import (
    FINISHED,
    RUNNING,
    TRAINING_JOB_RESOURCE,
    JobToStart,
    Review,
    TrainingJobError,
    describe_job,
    exit_code_of,
    job_summary,
    new_run_id,
    recorded_job,
    recorded_job_name,
    start_or_attach,
    status_line,
    wait_for_job,
)
from neurondeploy.planner.checks import refuse_errors
from neurondeploy.planner.context import plan_context
from neurondeploy.resources.naming import bucket_name, source_uri
from neurondeploy.resources.sagemaker_compile import JOB_RESOURCE as COMPILE_JOB_RESOURCE
from neurondeploy.resources.sagemaker_training import job_files, training_job_resources
from neurondeploy.resources.validation import check_requests
from neurondeploy.specs import LoadedSpec, load_spec
from neurondeploy.training.entry import source_directory, with_overrides
from neurondeploy.training.local import LocalTrainingResult, run_local_training
from neurondeploy.training.nxd_stand_in import reference_stand_in


@dataclass
class StartedJob:
    deployment: str
    job_name: str
    attached: bool  # an already running job of the deployment, not a new one
    source_uri: str | None = None
    source_uploaded: bool = False


def start_training_job(
    loaded: LoadedSpec,
    *,
    transport: AwsTransport,
    state: StateStore,
    hyperparameters: dict[str, Any] | None = None,
    on_event: Callable[[str], None] | None = None,
    review: Review | None = None,
) -> StartedJob:
    """Checks, then (unless a job of this deployment still runs) the shared bucket, the source archive and a
    new training job through the executor. Returns at once; :func:`wait_for_job` follows it. ``review`` sees
    what a new job creates and costs before anything is sent, and may raise to stop it."""
    loaded = with_overrides(loaded, hyperparameters or {})
    spec = loaded.spec
    if spec.kind != "training":
        raise TrainingJobError(
            f"{spec.name} is an {spec.kind} spec; train runs training specs", "use neurondeploy apply"
        )
    refuse_errors(loaded)
    source = source_directory(loaded)
    generated = job_files(spec)  # NxD Training's config and config.json, packed beside source_dir
    on_event = on_event or (lambda message: None)
    account = transport.call("sts", "GetCallerIdentity", {})["Account"]
    for line in check_quotas(transport, spec):  # read-only; a quota below the need refuses before any upload
        on_event(line)
    digest = artifact_digest(source, generated)  # once: it names the archive and decides whether to upload it
    uploads: dict[str, Any] = {}

    def build(run_id: str):
        ctx = plan_context(loaded, account_id=account, run_id=run_id, source_digest=digest[:16])
        resources = training_job_resources(spec, ctx)
        check_requests(resources, spec.region)  # refused here, before the source is uploaded
        return ctx, resources

    def launch(run_id: str):
        ctx, resources = build(run_id)
        if review is not None:
            where = [f"{source}, to {source_uri(spec, ctx)}"]
            instance = f"ml.{spec.instance_type}"
            review(
                JobToStart(
                    resources, instance, spec.instance_count, spec.max_runtime_s, where, spec.region, spec.spot.enabled
                )
            )
        ensure_bucket(transport, spec.region, ctx)
        uploads["uri"] = uri = source_uri(spec, ctx)
        uploads["sent"] = upload_artifact(transport, source, uri, digest, generated)
        on_event(f"{'uploaded' if uploads['sent'] else 'unchanged, not uploaded again:'} {source} -> {uri}")
        return resources

    ctx, resources = build(new_run_id())  # pure: a spec the builders refuse stops here, before state or S3 is touched
    # read-only: what the job names outside itself is there, before state, the review or any upload
    preflight(transport, needs_of(spec, resources, account, shared_bucket=bucket_name(spec.region, ctx)), on_event)

    def attach_note(recorded) -> str:
        changed = hyperparameters or recorded.spec_digest != loaded.digest
        return " (it keeps its own settings: this spec and --hp apply to the next run)" if changed else ""

    job_name, attached = start_or_attach(
        state,
        transport,
        deployment=spec.name,
        region=spec.region,
        job_resource=TRAINING_JOB_RESOURCE,
        what="job",
        launch=launch,
        spec_digest=loaded.digest,
        spec_json=spec.model_dump_json(),
        on_event=on_event,
        attach_note=attach_note,
    )
    if attached:
        return StartedJob(spec.name, job_name, attached=True)
    return StartedJob(spec.name, job_name, attached=False, source_uri=uploads["uri"], source_uploaded=uploads["sent"])


@dataclass
class TrainRun:
    """How a `train` ended: the job started (or attached to) and, once waited for, its final description; or the
    local run."""

    exit_code: int
    started: StartedJob | None = None
    job: dict | None = None  # the final DescribeTrainingJob; None when not waited for
    local: LocalTrainingResult | None = None

    def as_dict(self) -> dict:
        """What `train --json` prints."""
        if self.local is not None:
            return self.local.as_dict()
        if self.job is None:
            return dataclasses.asdict(self.started)
        extra = {"attached": self.started.attached, "source_uri": self.started.source_uri}
        return {**job_summary(self.job), **extra, "exit_code": self.exit_code}


def train(
    spec: str | Path | LoadedSpec,
    *,
    local: bool = False,
    hyperparameters: dict[str, Any] | None = None,
    processes: int | None = None,
    work_dir: Path | None = None,
    state: StateStore | None = None,
    transport: AwsTransport | None = None,
    wait: bool = True,
    wait_delay_s: float = 15,
    on_event: Callable[[str], None] | None = None,
    on_log: Callable[[str], None] | None = None,
    on_status: Callable[[str], None] | None = None,
    on_started: Callable[[StartedJob], None] | None = None,
    review: Review | None = None,
) -> TrainRun:
    """Run a training spec: with torchrun on this machine (``local``), or as a SageMaker job on Trn1, started (or
    attached to) and, with ``wait``, followed until it ends. ``on_event`` hears what neurondeploy does,
    ``on_log`` the job's own lines (status transitions, every host's log), ``on_status`` the live status line,
    ``on_started`` the job once it runs, ``review`` what a new job creates and its price before anything is sent
    (raising stops it; without it the job starts, as `train --yes` does). State defaults to ``$NEURONDEPLOY_STATE``
    (else ``.neurondeploy/state.db``)."""
    loaded = spec if isinstance(spec, LoadedSpec) else load_spec(spec)
    if loaded.spec.kind != "training":
        raise NeurondeployError(
            f"{loaded.path or loaded.spec.name} is an inference spec; train runs training specs",
            "use neurondeploy apply for endpoints",
        )
    notes: list[str] = []
    if local and loaded.spec.engine == "nxd-training":  # NxD Training needs torch-xla and Neuron devices
        processes = loaded.spec.local_processes if processes is None else processes
        loaded, notes = reference_stand_in(loaded, processes=processes, overrides=hyperparameters or {})
        hyperparameters = None  # checked as NxD Training's and merged into the stand-in
    if local:
        result = run_local_training(
            loaded,
            processes=processes,
            work_dir=work_dir,
            hyperparameters=hyperparameters,
            on_event=on_event,
            notes=tuple(notes),
        )
        return TrainRun(result.exit_code, local=result)
    transport = transport or AwsTransport(loaded.spec.region, wait_delay_s=wait_delay_s)
    started = start_training_job(
        loaded,
        transport=transport,
        state=state if state is not None else open_state(None),
        hyperparameters=hyperparameters,
        on_event=on_event,
        review=review,
    )
    if on_started is not None:
        on_started(started)
    if not wait:
        return TrainRun(0, started=started)
    job = wait_for_job(
        transport,
        started.job_name,
        delay_s=wait_delay_s,
        on_event=on_log or (lambda line: None),
        on_status=on_status,
    )
    return TrainRun(exit_code_of(job["TrainingJobStatus"]), started=started, job=job)


@dataclass
class StoppedJob:
    job: dict  # the final DescribeTrainingJob
    ended_before_stop: bool  # it finished on its own between the describe and StopTrainingJob


def stop_training_job(state, name: str, *, wait_delay_s: float, on_event: Callable[[str], None]) -> StoppedJob:
    """StopTrainingJob on deployment ``name``'s job, then wait until it has stopped."""
    deployment, job_name = recorded_job(state, name)
    transport = AwsTransport(deployment.region, wait_delay_s=wait_delay_s)
    job = describe_job(transport, job_name)
    if job is None:
        raise TrainingJobError(f"training job {job_name} no longer exists in {deployment.region}", "nothing to stop")
    if job["TrainingJobStatus"] not in RUNNING:
        raise TrainingJobError(
            f"training job {job_name} already finished ({job['TrainingJobStatus']}); there is nothing to stop",
            f"neurondeploy status {name} shows it",
        )
    if job["TrainingJobStatus"] == "InProgress":
        try:
            transport.call("sagemaker", "StopTrainingJob", {"TrainingJobName": job_name})
        except AwsCallError as exc:  # it ended between the describe and the stop
            finished = describe_job(transport, job_name)
            if not finished or finished["TrainingJobStatus"] not in FINISHED:
                raise
            on_event(f"{job_name} ended ({finished['TrainingJobStatus']}) before the stop: {exc.message}")
            return StoppedJob(finished, ended_before_stop=True)
    on_event(f"stopping {job_name}: SageMaker signals the script, then uploads checkpoints and output")
    try:
        transport.wait("sagemaker", "TrainingJobCompletedOrStopped", {"TrainingJobName": job_name})
    except AwsCallError:
        pass  # Failed is a waiter failure: the describe below says what happened
    job = describe_job(transport, job_name) or job
    if job["TrainingJobStatus"] in RUNNING:
        raise TrainingJobError(
            f"training job {job_name} is still {job['TrainingJobStatus']} after waiting",
            f"neurondeploy status {name} shows when it has stopped",
        )
    return StoppedJob(job, ended_before_stop=False)


def stop_exit_code(stopped: StoppedJob) -> int:
    status = stopped.job["TrainingJobStatus"]
    if stopped.ended_before_stop:
        return exit_code_of(status)
    return 0 if status in ("Stopped", "Completed") else exit_code_of(status)


def training_job_status(deployment, wait_delay_s: int = 15) -> dict | None:
    """The `status` view of a training deployment's recorded job: a job summary, ``{"error": ...}`` if AWS
    cannot be read, or None when no job is recorded."""
    # a training deployment's job, or compile --remote's (its own deployment, <name>-compile)
    job_name = recorded_job_name(deployment) or recorded_job_name(deployment, COMPILE_JOB_RESOURCE)
    if job_name is None:
        return None
    try:
        job = describe_job(AwsTransport(deployment.region, wait_delay_s=wait_delay_s, max_attempts=2), job_name)
    except AwsCallError as exc:
        return {"job_name": job_name, "error": exc.message}
    if job is None:
        return {"job_name": job_name, "error": f"SageMaker has no job {job_name} in {deployment.region}"}
    return {**job_summary(job), "line": status_line(job)}
