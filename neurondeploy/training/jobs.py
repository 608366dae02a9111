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

import dataclasses
import json
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable

from neurondeploy.errors import NeurondeployError
from neurondeploy.aws.transport import AwsCallError, AwsTransport
from neurondeploy.engine.sweep import is_gone
from neurondeploy.training.logs import LOG_GROUP, LogTailer
from neurondeploy.training.entry import source_directory, with_overrides

EXIT_JOB_FAILED = 9  # the job ended Failed (its FailureReason is printed); as a failed script in train --local
EXIT_JOB_STOPPED = 10  # the job ended Stopped (by `neurondeploy stop`, the console, or MaxRuntime/MaxWait)
EXIT_DETACHED = 130  # Ctrl-C while waiting: the job keeps running
RUNNING = ("InProgress", "Stopping")
# Worth waiting out while a job runs: no answer at all (code None: connection errors), throttling, server trouble.
TRANSIENT_CODES = (None, "ThrottlingException", "Throttling", "RequestTimeout", "ServiceUnavailable", "InternalFailure",
                   "InternalServerError", "InternalError")
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
    return {"job_name": job["TrainingJobName"], "status": job["TrainingJobStatus"],
            "secondary_status": job.get("SecondaryStatus"), "created": job.get("CreationTime"),
            "training_start": job.get("TrainingStartTime"), "training_end": job.get("TrainingEndTime"),
            "elapsed_s": _elapsed(job), "training_time_s": training, "billable_time_s": billable,
            "spot_savings_pct": savings, "model_artifacts": job.get("ModelArtifacts", {}).get("S3ModelArtifacts"),
            "checkpoint_s3_uri": job.get("CheckpointConfig", {}).get("S3Uri"), "failure_reason": job.get("FailureReason")}


def exit_code_of(status: str) -> int:
    return {"Completed": 0, "Failed": EXIT_JOB_FAILED, "Stopped": EXIT_JOB_STOPPED}.get(status, 0)


def status_line(job: dict) -> str:
    text = f"{job['TrainingJobName']}: {job['TrainingJobStatus']} / {job.get('SecondaryStatus', '-')}, " \
           f"{_duration(_elapsed(job))} elapsed"
    return text + (f" ({job['FailureReason']})" if job.get("FailureReason") else "")


# --- start -----------------------------------------------------------------------------------------------


@dataclass
class StartedJob:
    deployment: str
    job_name: str
    attached: bool  # an already running job of the deployment, not a new one
    source_uri: str | None = None
    source_uploaded: bool = False


def start_training_job(loaded, *, transport: AwsTransport, state, hyperparameters: dict[str, Any] | None = None,
                       on_event: Callable[[str], None] | None = None) -> StartedJob:
    """Checks, then (unless a job of this deployment still runs) the shared bucket, the source archive and a
    new training job through the executor. Returns at once; :func:`wait_for_job` follows it."""
    from neurondeploy.engine.uploads import ensure_bucket, upload_artifact
    from neurondeploy.archive import artifact_digest
    from neurondeploy.planner.context import plan_context
    from neurondeploy.engine.executor import Executor
    from neurondeploy.resources.naming import source_uri
    from neurondeploy.planner.checks import errors_of, run_checks
    from neurondeploy.planner.plan import PlanRefused
    from neurondeploy.resources.sagemaker_training import training_job_name
    from neurondeploy.resources.sagemaker_training import training_job_resources

    loaded = with_overrides(loaded, hyperparameters or {})
    spec = loaded.spec
    if spec.kind != "training":
        raise TrainingJobError(f"{spec.name} is an {spec.kind} spec; train runs training specs", "use neurondeploy apply")
    findings = errors_of(run_checks(loaded))
    if findings:
        raise PlanRefused(findings)
    source = source_directory(loaded)
    on_event = on_event or (lambda message: None)
    account = transport.call("sts", "GetCallerIdentity", {})["Account"]
    digest = artifact_digest(source)  # once: it names the archive and decides whether to upload it

    def build(run_id: str):
        ctx = plan_context(loaded, account_id=account, run_id=run_id, source_digest=digest[:16])
        return ctx, training_job_name(spec, ctx), training_job_resources(spec, ctx)

    build(new_run_id())  # pure: a spec the builders refuse stops here, before state or S3 is touched
    with state.lock(spec.name, spec.region, "training"):  # the executor re-enters it: no second run can slip in
        deployment = state.get(spec.name)
        if deployment is not None and deployment.kind != "training":
            raise TrainingJobError(f"{spec.name} is recorded as an {deployment.kind} deployment",
                                   "give the training spec another name, or destroy that deployment first")
        previous = recorded_job_name(deployment)
        if previous:
            job = describe_job(transport, previous)
            status = job["TrainingJobStatus"] if job else "gone"
            if status in RUNNING:
                on_event(f"job {previous} of {spec.name} is still {status}: attaching to it instead of starting another"
                         + (" (it keeps its own settings: this spec and --hp apply to the next run)"
                            if hyperparameters or deployment.spec_digest != loaded.digest else ""))
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
        Executor(transport, state, on_event=on_event).apply(spec.name, spec.region, "training", resources,
                                                            spec_digest=loaded.digest, spec_json=spec.model_dump_json())
    return StartedJob(spec.name, job_name, attached=False, source_uri=uri, source_uploaded=uploaded)


# --- wait ------------------------------------------------------------------------------------------------


def _print(console, text: str) -> None:
    console.print(text, markup=False, highlight=False)  # log lines carry brackets rich would read as markup


def _transition_line(transition: dict) -> str:
    start = transition.get("StartTime")
    when = start.strftime("%H:%M:%S") if isinstance(start, datetime) else "--:--:--"
    return f"{when} {transition.get('Status')}: {transition.get('StatusMessage', '')}".rstrip(": ")


def spot_interruption_message(job: dict) -> str:
    checkpoints = job.get("CheckpointConfig", {}).get("S3Uri", "the checkpoint S3 URI")
    return ("spot capacity interrupted the job; SageMaker restarts it and the script resumes from the last "
            f"checkpoint in {checkpoints}")


def wait_for_job(transport: AwsTransport, job_name: str, *, console, delay_s: float,
                 sleep: Callable[[float], None] = time.sleep) -> dict:
    """Poll DescribeTrainingJob until the job ends: a live status line, each secondary-status transition once,
    spot interruptions explained, every host's new log events. Returns the final DescribeTrainingJob."""
    tailer = LogTailer(transport, job_name)
    seen: set[tuple] = set()
    interrupted = False
    misses = 0
    with console.status(f"{job_name}: waiting for DescribeTrainingJob") as live:
        while True:
            try:
                job = describe_job(transport, job_name)
                events = tailer.poll()  # after the describe: once it says finished, this read gets the last lines
            except AwsCallError as exc:
                # A job runs for hours; a network blip or throttling outlasting botocore's retries must not end the wait.
                if exc.code not in TRANSIENT_CODES or misses >= MAX_MISSES:
                    raise
                misses += 1
                _print(console, f"lost contact with SageMaker ({exc.message}); the job runs on; retrying in "
                                f"{delay_s:g} s ({misses}/{MAX_MISSES})")
                sleep(delay_s)
                continue
            misses = 0
            if job is None:
                raise TrainingJobError(f"training job {job_name} does not exist in {transport.region}",
                                       "check the region and the name (neurondeploy status)")
            newly_interrupted = False
            for transition in job.get("SecondaryStatusTransitions", []):
                key = (transition.get("Status"), str(transition.get("StartTime")), transition.get("StatusMessage"))
                if key not in seen:
                    seen.add(key)
                    _print(console, _transition_line(transition))
                    newly_interrupted |= transition.get("Status") == "Interrupted"
            now_interrupted = job.get("SecondaryStatus") == "Interrupted"
            if newly_interrupted or (now_interrupted and not interrupted):
                _print(console, spot_interruption_message(job))
            interrupted = now_interrupted
            for event in events:
                _print(console, event.line())
            live.update(status_line(job))
            if job["TrainingJobStatus"] in FINISHED:
                return job
            sleep(delay_s)


def report_outcome(job: dict, console) -> int:
    summary = job_summary(job)
    status = summary["status"]
    _print(console, f"{summary['job_name']}: {status} ({summary['secondary_status']})")
    if summary["training_time_s"] is not None:
        billable = f", billable {summary['billable_time_s']} s" if summary["billable_time_s"] is not None else ""
        savings = f" (managed spot saved {summary['spot_savings_pct']:.1f} %)" if summary["spot_savings_pct"] is not None else ""
        _print(console, f"training time {summary['training_time_s']} s{billable}{savings}")
    if status == "Failed":
        _print(console, f"failure reason: {summary['failure_reason'] or 'none given'}")
    if summary["model_artifacts"] and status == "Completed":
        _print(console, f"model artifacts: {summary['model_artifacts']}")
    if status == "Stopped" and summary["checkpoint_s3_uri"]:
        _print(console, f"checkpoints stay in {summary['checkpoint_s3_uri']}; the next train resumes from them")
    return exit_code_of(status)


def _state(args):
    from neurondeploy.engine.state_s3 import open_state

    return open_state(getattr(args, "state", None))


def _print_json(data) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def run_training_job(loaded, args, *, hyperparameters: dict[str, Any], console) -> int:
    """`neurondeploy train SPEC` without --local."""
    transport = AwsTransport(loaded.spec.region, wait_delay_s=args.wait_delay_s)
    started = start_training_job(loaded, transport=transport, state=_state(args), hyperparameters=hyperparameters,
                                 on_event=lambda message: _print(console, f"  {message}"))
    name = started.deployment
    follow = f"follow it with `neurondeploy logs {name} --follow`, stop it with `neurondeploy stop {name}`"
    if not started.attached:
        _print(console, f"started training job {started.job_name}")
    if args.no_wait:
        _print(console, follow)
        if args.json:
            _print_json(dataclasses.asdict(started))
        return 0
    try:
        job = wait_for_job(transport, started.job_name, console=console, delay_s=args.wait_delay_s)
    except KeyboardInterrupt:
        _print(console, f"stopped waiting; {started.job_name} keeps running: {follow}")
        return EXIT_DETACHED
    code = report_outcome(job, console)
    if args.json:
        _print_json({**job_summary(job), "attached": started.attached, "source_uri": started.source_uri, "exit_code": code})
    return code


# --- stop, logs, status --------------------------------------------------------------------------------------


def _recorded(state, name: str):
    deployment = state.get(name)
    if deployment is None:
        raise TrainingJobError(f"no state for deployment {name}", f"known: {', '.join(state.names()) or 'none'}")
    if deployment.kind != "training":
        raise TrainingJobError(f"{name} is an {deployment.kind} deployment, not a training one",
                               f"neurondeploy destroy {name} removes endpoints")
    job_name = recorded_job_name(deployment)
    if job_name is None:
        raise TrainingJobError(f"deployment {name} has no training job recorded", "start one with neurondeploy train SPEC")
    return deployment, job_name


def stop_training_job(args, console) -> int:
    """`neurondeploy stop NAME`: StopTrainingJob on the deployment's job, then wait until it has stopped."""
    deployment, job_name = _recorded(_state(args), args.name)
    transport = AwsTransport(deployment.region, wait_delay_s=args.wait_delay_s)
    job = describe_job(transport, job_name)
    if job is None:
        raise TrainingJobError(f"training job {job_name} no longer exists in {deployment.region}", "nothing to stop")
    if job["TrainingJobStatus"] not in RUNNING:
        raise TrainingJobError(f"training job {job_name} already finished ({job['TrainingJobStatus']}); there is nothing to stop",
                               f"neurondeploy status {args.name} shows it")
    if job["TrainingJobStatus"] == "InProgress":
        try:
            transport.call("sagemaker", "StopTrainingJob", {"TrainingJobName": job_name})
        except AwsCallError as exc:  # it ended between the describe and the stop
            finished = describe_job(transport, job_name)
            if not finished or finished["TrainingJobStatus"] not in FINISHED:
                raise
            _print(console, f"{job_name} ended ({finished['TrainingJobStatus']}) before the stop: {exc.message}")
            return report_outcome(finished, console)
    _print(console, f"stopping {job_name}: SageMaker signals the script, then uploads checkpoints and output")
    try:
        transport.wait("sagemaker", "TrainingJobCompletedOrStopped", {"TrainingJobName": job_name})
    except AwsCallError:
        pass  # Failed is a waiter failure: the describe below says what happened
    job = describe_job(transport, job_name) or job
    if job["TrainingJobStatus"] in RUNNING:
        raise TrainingJobError(f"training job {job_name} is still {job['TrainingJobStatus']} after waiting",
                               f"neurondeploy status {args.name} shows when it has stopped")
    code = report_outcome(job, console)
    return 0 if job["TrainingJobStatus"] in ("Stopped", "Completed") else code


def print_training_logs(args, out=None) -> int:
    """`neurondeploy logs NAME [--follow]`: every event of every host of the deployment's latest job (or of the
    job NAME with --region), on stdout; --follow keeps polling until the job ends."""
    out = out or sys.stdout
    state = _state(args)
    if state.get(args.name) is not None:
        deployment, job_name = _recorded(state, args.name)
        region = deployment.region
    elif args.region:
        region, job_name = args.region, args.name
    else:
        raise TrainingJobError(f"no state for deployment {args.name}",
                               "pass --region to read the logs of the training job of that name")
    transport = AwsTransport(region, wait_delay_s=args.wait_delay_s)
    job = describe_job(transport, job_name)
    if job is None:
        raise TrainingJobError(f"no training job {job_name} in {region}", "check the name and --region")
    tailer = LogTailer(transport, job_name)
    printed = 0
    try:
        while True:
            events = tailer.poll()
            for event in events:
                out.write(event.line() + "\n")
            out.flush()
            printed += len(events)
            if not args.follow or job["TrainingJobStatus"] in FINISHED:
                break
            time.sleep(args.wait_delay_s)
            job = describe_job(transport, job_name) or job  # describe first: a finished job's last poll gets every line
    except KeyboardInterrupt:
        return EXIT_DETACHED
    if not printed:
        print(f"no log events for {job_name} in {LOG_GROUP} ({job['TrainingJobStatus']} / {job.get('SecondaryStatus')})",
              file=sys.stderr)
    return 0


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
