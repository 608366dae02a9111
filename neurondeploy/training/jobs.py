"""SageMaker training jobs: `train SPEC` (start or attach, then wait with live status and every host's logs),
`stop NAME`, `logs NAME [--follow]` and the job line of `status NAME`.

Each `train` is a new run: the job is ``<name>-<UTC YYYYMMDD-HHMMSS>``. State records the deployment's latest job as
its ``training-job`` resource (and the execution role, kept across runs). A recorded job still running is attached
to, never doubled; a finished one is forgotten before the next run, because SageMaker can neither stop nor delete a
finished job and the executor would otherwise try to remove it.

The source directory is uploaded content-addressed (``source/sourcedir-<sha256>.tar.gz``): an unchanged source is
not uploaded again, and the execution role's read prefix (``<name>/source/``) stays the same from run to run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from neurondeploy import catalog
from neurondeploy.archive import artifact_digest
from neurondeploy.aws.errors import is_gone, is_transient
from neurondeploy.aws.transport import AwsCallError, AwsTransport
from neurondeploy.engine.executor import Executor
from neurondeploy.engine.quotas import check_quotas
from neurondeploy.engine.uploads import ensure_bucket, upload_artifact
from neurondeploy.errors import NeurondeployError
from neurondeploy.planner.checks import refuse_errors
from neurondeploy.planner.context import plan_context
from neurondeploy.resources.naming import source_uri
from neurondeploy.resources.sagemaker_training import training_job_name, training_job_resources
from neurondeploy.training.entry import source_directory, with_overrides
from neurondeploy.training.logs import LOG_GROUP, LogTailer

EXIT_JOB_FAILED = 9  # the job ended Failed (its FailureReason is printed); as a failed script in train --local
EXIT_JOB_STOPPED = 10  # the job ended Stopped (by `neurondeploy stop`, the console, or MaxRuntime/MaxWait)
EXIT_DETACHED = 130  # Ctrl-C while waiting: the job keeps running
RUNNING = ("InProgress", "Stopping")
MAX_MISSES = 20  # consecutive polls without an answer before giving up the wait (the job is not touched)
FINISHED = ("Completed", "Failed", "Stopped")
JOB_RESOURCE = "training-job"  # the resource name sagemaker.resources.training_job_resources gives the job


class TrainingJobError(NeurondeployError):
    """No such deployment or job, or a job in a state that does not allow what was asked."""


# --- pure helpers ------------------------------------------------------------------------------------------


def new_run_id(now: datetime | None = None) -> str:
    return (now or datetime.now(timezone.utc)).strftime("%Y%m%d-%H%M%S")


def recorded_job_name(deployment) -> str | None:
    """The job a deployment's state records (as sent: ARNs lowercase the name), or None."""
    if deployment is None:
        return None
    resource = deployment.resources.get(JOB_RESOURCE)
    for request in resource.create_requests if resource else []:
        if request.get("operation") == "CreateTrainingJob":
            return request["params"]["TrainingJobName"]
    return None


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def _elapsed(job: dict) -> float | None:
    start = job.get("TrainingStartTime") or job.get("CreationTime")
    if not isinstance(start, datetime):
        return None
    end = job.get("TrainingEndTime") if job.get("TrainingJobStatus") in FINISHED else None
    return ((end if isinstance(end, datetime) else datetime.now(timezone.utc)) - start).total_seconds()


# --- AWS reads -----------------------------------------------------------------------------------------------


def describe_job(transport: AwsTransport, job_name: str) -> dict | None:
    """DescribeTrainingJob, or None if SageMaker has no such job."""
    try:
        return transport.call("sagemaker", "DescribeTrainingJob", {"TrainingJobName": job_name})
    except AwsCallError as exc:
        # SageMaker says ValidationException "Requested resource not found" (moto: "Could not find ...");
        # its service model lists ResourceNotFound. The sweep's rule knows both.
        if is_gone(exc):
            return None
        raise


def job_summary(job: dict) -> dict:
    """What `status` and `train --json` report about a job."""
    training, billable = job.get("TrainingTimeInSeconds"), job.get("BillableTimeInSeconds")
    savings = None
    if job.get("EnableManagedSpotTraining") and training and billable is not None:
        savings = round((1 - billable / training) * 100, 1)
    return {
        "job_name": job["TrainingJobName"],
        "status": job["TrainingJobStatus"],
        "secondary_status": job.get("SecondaryStatus"),
        "created": job.get("CreationTime"),
        "training_start": job.get("TrainingStartTime"),
        "training_end": job.get("TrainingEndTime"),
        "elapsed_s": _elapsed(job),
        "training_time_s": training,
        "billable_time_s": billable,
        "spot_savings_pct": savings,
        **run_cost(job),
        "model_artifacts": job.get("ModelArtifacts", {}).get("S3ModelArtifacts"),
        "checkpoint_s3_uri": job.get("CheckpointConfig", {}).get("S3Uri"),
        "failure_reason": job.get("FailureReason"),
    }


def run_cost(job: dict) -> dict:
    """What the job cost: billable seconds (SageMaker's, which already net out managed spot) × instances × the
    catalogue's ml.* on-demand price; None where either is unknown."""
    resources = job.get("ResourceConfig") or {}
    billable, kind = job.get("BillableTimeInSeconds"), resources.get("InstanceType")
    try:
        instance = catalog.get_instance(kind) if kind else None
    except NeurondeployError:
        instance = None
    hourly = (
        catalog.price_per_hour(instance, resources.get("InstanceCount") or 1, platform="sagemaker")
        if instance
        else None
    )
    if hourly is None or billable is None:
        return {
            "cost_usd": None,
            "price_usd_per_hour": hourly,
            "price_source": instance.sagemaker_price_source if instance else None,
        }
    return {
        "cost_usd": round(billable / 3600 * hourly, 2),
        "price_usd_per_hour": hourly,
        "price_source": instance.sagemaker_price_source,
    }


def exit_code_of(status: str) -> int:
    return {"Completed": 0, "Failed": EXIT_JOB_FAILED, "Stopped": EXIT_JOB_STOPPED}.get(status, 0)


def status_line(job: dict) -> str:
    text = (
        f"{job['TrainingJobName']}: {job['TrainingJobStatus']} / {job.get('SecondaryStatus', '-')}, "
        f"{_duration(_elapsed(job))} elapsed"
    )
    return text + (f" ({job['FailureReason']})" if job.get("FailureReason") else "")


# --- start -----------------------------------------------------------------------------------------------


@dataclass
class StartedJob:
    deployment: str
    job_name: str
    attached: bool  # an already running job of the deployment, not a new one
    source_uri: str | None = None
    source_uploaded: bool = False


def start_training_job(
    loaded,
    *,
    transport: AwsTransport,
    state,
    hyperparameters: dict[str, Any] | None = None,
    on_event: Callable[[str], None] | None = None,
) -> StartedJob:
    """Checks, then (unless a job of this deployment still runs) the shared bucket, the source archive and a
    new training job through the executor. Returns at once; :func:`wait_for_job` follows it."""
    loaded = with_overrides(loaded, hyperparameters or {})
    spec = loaded.spec
    if spec.kind != "training":
        raise TrainingJobError(
            f"{spec.name} is an {spec.kind} spec; train runs training specs", "use neurondeploy apply"
        )
    refuse_errors(loaded)
    source = source_directory(loaded)
    on_event = on_event or (lambda message: None)
    account = transport.call("sts", "GetCallerIdentity", {})["Account"]
    for line in check_quotas(transport, spec):  # read-only; a quota below the need refuses before any upload
        on_event(line)
    digest = artifact_digest(source)  # once: it names the archive and decides whether to upload it

    def build(run_id: str):
        ctx = plan_context(loaded, account_id=account, run_id=run_id, source_digest=digest[:16])
        return ctx, training_job_name(spec, ctx), training_job_resources(spec, ctx)

    build(new_run_id())  # pure: a spec the builders refuse stops here, before state or S3 is touched
    with state.lock(spec.name, spec.region, "training"):  # the executor re-enters it: no second run can slip in
        deployment = state.get(spec.name)
        if deployment is not None and deployment.kind != "training":
            raise TrainingJobError(
                f"{spec.name} is recorded as an {deployment.kind} deployment",
                "give the training spec another name, or destroy that deployment first",
            )
        previous = recorded_job_name(deployment)
        if previous:
            job = describe_job(transport, previous)
            status = job["TrainingJobStatus"] if job else "gone"
            if status in RUNNING:
                on_event(
                    f"job {previous} of {spec.name} is still {status}: attaching to it instead of starting another"
                    + (
                        " (it keeps its own settings: this spec and --hp apply to the next run)"
                        if hyperparameters or deployment.spec_digest != loaded.digest
                        else ""
                    )
                )
                return StartedJob(spec.name, previous, attached=True)
            # A finished job can be neither stopped nor deleted: forget it so the executor does not try.
            state.remove_resource(spec.name, JOB_RESOURCE)
            on_event(f"previous job {previous}: {status}")
        run_id = new_run_id()
        while previous and previous.endswith(run_id):  # two runs within one second
            time.sleep(0.2)
            run_id = new_run_id()
        ctx, job_name, resources = build(run_id)
        ensure_bucket(transport, spec.region, ctx)
        uri = source_uri(spec, ctx)
        uploaded = upload_artifact(transport, source, uri, digest)
        on_event(f"{'uploaded' if uploaded else 'unchanged, not uploaded again:'} {source} -> {uri}")
        Executor(transport, state, on_event=on_event).apply(
            spec.name, spec.region, "training", resources, spec_digest=loaded.digest, spec_json=spec.model_dump_json()
        )
    return StartedJob(spec.name, job_name, attached=False, source_uri=uri, source_uploaded=uploaded)


# --- wait ------------------------------------------------------------------------------------------------


def _transition_line(transition: dict) -> str:
    start = transition.get("StartTime")
    when = start.strftime("%H:%M:%S") if isinstance(start, datetime) else "--:--:--"
    return f"{when} {transition.get('Status')}: {transition.get('StatusMessage', '')}".rstrip(": ")


def spot_interruption_message(job: dict) -> str:
    checkpoints = job.get("CheckpointConfig", {}).get("S3Uri", "the checkpoint S3 URI")
    return (
        "spot capacity interrupted the job; SageMaker restarts it and the script resumes from the last "
        f"checkpoint in {checkpoints}"
    )


def wait_for_job(
    transport: AwsTransport,
    job_name: str,
    *,
    delay_s: float,
    on_event: Callable[[str], None],
    on_status: Callable[[str], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> dict:
    """Poll DescribeTrainingJob until the job ends: ``on_status`` hears the live status line, ``on_event`` each
    secondary-status transition once, spot interruptions explained and every host's new log lines. Returns the
    final DescribeTrainingJob."""
    on_status = on_status or (lambda line: None)
    tailer = LogTailer(transport, job_name)
    seen: set[tuple] = set()
    interrupted = False
    misses = 0
    while True:
        try:
            job = describe_job(transport, job_name)
            events = tailer.poll()  # after the describe: once it says finished, this read gets the last lines
        except AwsCallError as exc:
            # A job runs for hours; a network blip or throttling outlasting botocore's retries must not end the wait.
            if not is_transient(exc) or misses >= MAX_MISSES:
                raise
            misses += 1
            on_event(
                f"lost contact with SageMaker ({exc.message}); the job runs on; retrying in "
                f"{delay_s:g} s ({misses}/{MAX_MISSES})"
            )
            sleep(delay_s)
            continue
        misses = 0
        if job is None:
            raise TrainingJobError(
                f"training job {job_name} does not exist in {transport.region}",
                "check the region and the name (neurondeploy status)",
            )
        newly_interrupted = False
        for transition in job.get("SecondaryStatusTransitions", []):
            key = (transition.get("Status"), str(transition.get("StartTime")), transition.get("StatusMessage"))
            if key not in seen:
                seen.add(key)
                on_event(_transition_line(transition))
                newly_interrupted |= transition.get("Status") == "Interrupted"
        now_interrupted = job.get("SecondaryStatus") == "Interrupted"
        if newly_interrupted or (now_interrupted and not interrupted):
            on_event(spot_interruption_message(job))
        interrupted = now_interrupted
        for event in events:
            on_event(event.line())
        on_status(status_line(job))
        if job["TrainingJobStatus"] in FINISHED:
            return job
        sleep(delay_s)


def outcome_lines(job: dict) -> list[str]:
    """How a finished job ended: status, times and spot saving, the failure reason, where the model or checkpoints are."""
    summary = job_summary(job)
    status = summary["status"]
    lines = [f"{summary['job_name']}: {status} ({summary['secondary_status']})"]
    if summary["training_time_s"] is not None:
        billable = f", billable {summary['billable_time_s']} s" if summary["billable_time_s"] is not None else ""
        savings = (
            f" (managed spot saved {summary['spot_savings_pct']:.1f} %)"
            if summary["spot_savings_pct"] is not None
            else ""
        )
        lines.append(f"training time {summary['training_time_s']} s{billable}{savings}")
    if summary["cost_usd"] is not None:
        lines.append(
            f"cost about ${summary['cost_usd']:,.2f} (billable time at ${summary['price_usd_per_hour']:,.2f}/hour; "
            f"price: {summary['price_source']})"
        )
    if status == "Failed":
        lines.append(f"failure reason: {summary['failure_reason'] or 'none given'}")
    if summary["model_artifacts"] and status == "Completed":
        lines.append(f"model artifacts: {summary['model_artifacts']}")
    if status == "Stopped" and summary["checkpoint_s3_uri"]:
        lines.append(f"checkpoints stay in {summary['checkpoint_s3_uri']}; the next train resumes from them")
    return lines


# --- stop, logs, status --------------------------------------------------------------------------------------


def _recorded(state, name: str):
    deployment = state.get(name)
    if deployment is None:
        raise TrainingJobError(f"no state for deployment {name}", f"known: {', '.join(state.names()) or 'none'}")
    if deployment.kind != "training":
        raise TrainingJobError(
            f"{name} is an {deployment.kind} deployment, not a training one",
            f"neurondeploy destroy {name} removes endpoints",
        )
    job_name = recorded_job_name(deployment)
    if job_name is None:
        raise TrainingJobError(
            f"deployment {name} has no training job recorded", "start one with neurondeploy train SPEC"
        )
    return deployment, job_name


@dataclass
class StoppedJob:
    job: dict  # the final DescribeTrainingJob
    ended_before_stop: bool  # it finished on its own between the describe and StopTrainingJob


def stop_training_job(state, name: str, *, wait_delay_s: float, on_event: Callable[[str], None]) -> StoppedJob:
    """StopTrainingJob on deployment ``name``'s job, then wait until it has stopped."""
    deployment, job_name = _recorded(state, name)
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


@dataclass
class LogsRead:
    job_name: str
    job: dict  # the last DescribeTrainingJob
    printed: int  # log events handed to on_line


def read_training_logs(
    state, name: str, *, region: str | None, follow: bool, wait_delay_s: float, on_line: Callable[[str], None]
) -> LogsRead:
    """Every event of every host of deployment ``name``'s latest job (or of the job ``name`` in ``region`` when
    state does not know it), each to ``on_line``; ``follow`` keeps polling until the job ends."""
    if state.get(name) is not None:
        deployment, job_name = _recorded(state, name)
        region = deployment.region
    elif region:
        job_name = name
    else:
        raise TrainingJobError(
            f"no state for deployment {name}", "pass --region to read the logs of the training job of that name"
        )
    transport = AwsTransport(region, wait_delay_s=wait_delay_s)
    job = describe_job(transport, job_name)
    if job is None:
        raise TrainingJobError(f"no training job {job_name} in {region}", "check the name and --region")
    tailer = LogTailer(transport, job_name)
    printed = 0
    while True:
        events = tailer.poll()
        for event in events:
            on_line(event.line())
        printed += len(events)
        if not follow or job["TrainingJobStatus"] in FINISHED:
            break
        time.sleep(wait_delay_s)
        job = describe_job(transport, job_name) or job  # describe first: a finished job's last poll gets every line
    return LogsRead(job_name, job, printed)


def no_logs_line(read: LogsRead) -> str:
    return (
        f"no log events for {read.job_name} in {LOG_GROUP} ({read.job['TrainingJobStatus']} / "
        f"{read.job.get('SecondaryStatus')})"
    )


def training_job_status(deployment, wait_delay_s: int = 15) -> dict | None:
    """The `status` view of a training deployment's recorded job: a job summary, ``{"error": ...}`` if AWS
    cannot be read, or None when no job is recorded."""
    job_name = recorded_job_name(deployment)
    if job_name is None:
        return None
    try:
        job = describe_job(AwsTransport(deployment.region, wait_delay_s=wait_delay_s, max_attempts=2), job_name)
    except AwsCallError as exc:
        return {"job_name": job_name, "error": exc.message}
    if job is None:
        return {"job_name": job_name, "error": f"SageMaker has no job {job_name} in {deployment.region}"}
    return {**job_summary(job), "line": status_line(job)}
