"""`logs NAME [--follow]`: every host's log lines of a training deployment's latest SageMaker job (or of a job
named directly, with its region), from CloudWatch Logs."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from neurondeploy.aws.transport import AwsTransport
from neurondeploy.ops.sagemaker_job import FINISHED, TrainingJobError, describe_job, recorded_job
from neurondeploy.resources.sagemaker_compile import COMPILE_SUFFIX
from neurondeploy.training.logs import LOG_GROUP, LogTailer


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
    if state.get(name) is not None or state.get(f"{name}{COMPILE_SUFFIX}") is not None:
        deployment, job_name = recorded_job(state, name)
        region = deployment.region
    elif region:
        job_name = name
    else:
        known = ", ".join(state.names()) or "none"
        raise TrainingJobError(
            f"no state for deployment {name}",
            f"known: {known}; or pass --region to read the logs of the SageMaker job of that name",
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
