"""A training job's CloudWatch logs: one stream per host in ``/aws/sagemaker/TrainingJobs``, named
``<job name>/algo-<n>-<epoch seconds>``, read incrementally (each poll returns only events not seen before).

The group appears with the first log line of the first job in the account and region, streams as each host starts:
a missing group or no streams yet is "nothing so far", not an error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from neurondeploy.aws.transport import AwsCallError, AwsTransport

LOG_GROUP = "/aws/sagemaker/TrainingJobs"
_STARTED_SUFFIX = re.compile(r"-\d{9,}$")  # SageMaker appends the host's start time in epoch seconds


@dataclass(frozen=True)
class LogEvent:
    host: str
    timestamp_ms: int
    message: str

    def line(self) -> str:
        return f"[{self.host}] {self.message.rstrip()}"


def host_of(stream: str) -> str:
    """``job/algo-1-1700000000`` -> ``algo-1``."""
    return _STARTED_SUFFIX.sub("", stream.split("/", 1)[-1])


@dataclass
class LogTailer:
    """New events of every host stream of one job, oldest first, each returned once."""

    transport: AwsTransport
    job_name: str
    tokens: dict[str, str] = field(default_factory=dict)  # stream -> nextForwardToken of the last page read

    def streams(self) -> list[str]:
        names, token = [], None
        while True:
            params = {"logGroupName": LOG_GROUP, "logStreamNamePrefix": f"{self.job_name}/"}
            if token:
                params["nextToken"] = token
            try:
                page = self.transport.call("logs", "DescribeLogStreams", params)
            except AwsCallError as exc:
                if exc.code == "ResourceNotFoundException":  # no job in this account and region has logged yet
                    return []
                raise
            names += [stream["logStreamName"] for stream in page.get("logStreams", [])]
            token = page.get("nextToken")
            if not token:
                return sorted(names)

    def poll(self) -> list[LogEvent]:
        events = [event for stream in self.streams() for event in self._new_events(stream)]
        return sorted(events, key=lambda event: (event.timestamp_ms, event.host))

    def _new_events(self, stream: str) -> list[LogEvent]:
        host, events = host_of(stream), []
        while True:
            params = {"logGroupName": LOG_GROUP, "logStreamName": stream, "startFromHead": True}
            if stream in self.tokens:
                params["nextToken"] = self.tokens[stream]
            page = self.transport.call("logs", "GetLogEvents", params)
            batch = page.get("events", [])
            events += [LogEvent(host, event.get("timestamp", 0), event.get("message", "")) for event in batch]
            # At the end of the stream the same token comes back with no events; keep it for the next poll.
            token = page.get("nextForwardToken")
            if token:
                self.tokens[stream] = token
            if not batch or not token:
                return events
