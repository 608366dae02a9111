"""A SageMaker training job, as `train` and `compile --remote` both run one: start it or attach to the one still
running, follow it (live status, each secondary-status transition, every host's log lines), and say how it ended.

State records a deployment's latest job as one resource (``training-job`` or ``compile-job``). A recorded job still
running is attached to, never doubled; a finished one is forgotten before the next run, because SageMaker can
neither stop nor delete a finished job and the executor would otherwise try to remove it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

from neurondeploy import catalog
from neurondeploy.aws.errors import is_gone, is_transient
from neurondeploy.aws.transport import AwsCallError, AwsTransport
from neurondeploy.engine.executor import Executor
from neurondeploy.engine.state import DeploymentState, StateStore
from neurondeploy.errors import NeurondeployError
from neurondeploy.resources.model import Resource
from neurondeploy.resources.sagemaker_compile import COMPILE_SUFFIX
from neurondeploy.resources.sagemaker_compile import JOB_RESOURCE as COMPILE_JOB_RESOURCE
from neurondeploy.training.logs import LogTailer

EXIT_JOB_FAILED = 9  # the job ended Failed (its FailureReason is printed); as a failed script in train --local
EXIT_JOB_STOPPED = 10  # the job ended Stopped (by `neurondeploy stop`, the console, or MaxRuntime/MaxWait)
EXIT_DETACHED = 130  # Ctrl-C while waiting: the job keeps running
RUNNING = ("InProgress", "Stopping")
MAX_MISSES = 20  # consecutive polls without an answer before giving up the wait (the job is not touched)
FINISHED = ("Completed", "Failed", "Stopped")
TRAINING_JOB_RESOURCE = "training-job"  # the resource name resources.sagemaker_training gives a train run's job


class TrainingJobError(NeurondeployError):
    """No such deployment or job, or a job in a state that does not allow what was asked."""


# --- pure helpers ------------------------------------------------------------------------------------------


def new_run_id(now: datetime | None = None) -> str:
    return (now or datetime.now(timezone.utc)).strftime("%Y%m%d-%H%M%S")


def recorded_job_name(deployment: DeploymentState | None, job_resource: str = TRAINING_JOB_RESOURCE) -> str | None:
    """The job a deployment's state records as ``job_resource`` (as sent: ARNs lowercase the name), or None."""
    if deployment is None:
        return None
    resource = deployment.resources.get(job_resource)
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


def recorded_job(state: StateStore, name: str) -> tuple[DeploymentState, str]:
    """The latest SageMaker job ``name`` records: a training deployment's run, a compile deployment's
    (``<name>-compile``) job, or, for an endpoint's name, the job compile --remote ran for it: every job `status`
    shows, `logs` and `stop` find."""
    deployment = state.get(name)
    compile_deployment = state.get(f"{name}{COMPILE_SUFFIX}")
    if deployment is None and compile_deployment is None:
        raise TrainingJobError(f"no state for deployment {name}", f"known: {', '.join(state.names()) or 'none'}")
    for candidate in (deployment, compile_deployment):
        for resource in (TRAINING_JOB_RESOURCE, COMPILE_JOB_RESOURCE):
            job_name = recorded_job_name(candidate, resource)
            if job_name is not None:
                return candidate, job_name
    if deployment is not None and deployment.kind != "training":
        raise TrainingJobError(
            f"{name} is an {deployment.kind} deployment with no SageMaker job recorded (compile --remote starts one)",
            f"neurondeploy status {name} shows its endpoint; neurondeploy destroy {name} removes it",
        )
    raise TrainingJobError(f"deployment {name} has no job recorded", "start one with neurondeploy train SPEC")


# --- start or attach ------------------------------------------------------------------------------------


@dataclass
class JobToStart:
    """What a new SageMaker job creates and may spend, shown (and agreed to) before anything is sent."""

    resources: list[Resource]
    instance_type: str  # ml.*
    instance_count: int
    max_runtime_s: int  # SageMaker stops the job there: the ceiling of what it costs
    uploads: list[str]  # "the job's source, to s3://..."
    region: str
    spot: bool = False  # managed spot: billed below the on-demand price shown

    @property
    def hourly_usd(self) -> float | None:
        """None where the catalogue has no price, a CPU type for a cross-compile among them (it lists Neuron types)."""
        instance = catalog.instance_types().get(self.instance_type.removeprefix("ml."))
        if instance is None:
            return None
        return catalog.price_per_hour(instance, self.instance_count, region=self.region, platform="sagemaker")

    def lines(self) -> list[str]:
        made = [f"+ {r.name} ({r.type})" for r in self.resources if not r.is_lookup] + [f"+ {u}" for u in self.uploads]
        hourly, hours = self.hourly_usd, self.max_runtime_s / 3600
        where = f"{self.instance_count} × {self.instance_type}"
        if hourly is None:
            cost = f"{where}: no ml.* price catalogued for {self.region}; SageMaker stops it after {hours:g} h"
        else:
            cost = (
                f"{where} at ${hourly:,.2f}/hour; SageMaker stops it after {hours:g} h: at most ${hourly * hours:,.2f}"
            )
        if self.spot:
            cost += " (on-demand prices; managed spot bills less)"
        return [*made, f"cost: {cost}"]


Review = Callable[[JobToStart], None]


def start_or_attach(
    state: StateStore,
    transport: AwsTransport,
    *,
    deployment: str,
    region: str,
    job_resource: str,
    what: str,
    launch: Callable[[str], list[Resource]],
    spec_digest: str,
    spec_json: str,
    on_event: Callable[[str], None],
    attach_note: Callable[[DeploymentState], str] = lambda recorded: "",
) -> tuple[str, bool]:
    """Under the deployment's lock: attach to its recorded job while that still runs; otherwise forget the finished
    one, ``launch(run_id)`` (uploads, then the resources of a new job) and apply them through the executor.
    Returns the job's name and whether it was attached to. ``what`` names the job in events ("job")."""
    with state.lock(deployment, region, "training"):  # the executor re-enters it: no second run can slip in
        recorded = state.get(deployment)
        if recorded is not None and recorded.kind != "training":
            raise TrainingJobError(
                f"{deployment} is recorded as an {recorded.kind} deployment",
                "give the training spec another name, or destroy that deployment first",
            )
        previous = recorded_job_name(recorded, job_resource)
        if previous:
            job = describe_job(transport, previous)
            status = job["TrainingJobStatus"] if job else "gone"
            if status in RUNNING:
                on_event(
                    f"{what} {previous} of {deployment} is still {status}: attaching to it instead of starting "
                    f"another{attach_note(recorded)}"
                )
                return previous, True
            # A finished job can be neither stopped nor deleted: forget it so the executor does not try.
            state.remove_resource(deployment, job_resource)
            on_event(f"previous {what} {previous}: {status}")
        run_id = new_run_id()
        while previous and previous.endswith(run_id):  # two runs within one second
            time.sleep(0.2)
            run_id = new_run_id()
        resources = launch(run_id)
        Executor(transport, state, on_event=on_event).apply(
            deployment, region, "training", resources, spec_digest=spec_digest, spec_json=spec_json
        )
    job = next(r for r in resources if r.name == job_resource)
    return next(q.params["TrainingJobName"] for q in job.create if q.operation == "CreateTrainingJob"), False


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
