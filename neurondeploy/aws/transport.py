"""The only place requests leave for AWS: boto3 clients per service, botocore's standard retry mode, waiters,
managed file uploads (:class:`Transfer`), the default region, and a log of every call (service, operation,
whether it mutates) so apply can count what it sent. No other module imports boto3.

Every request is checked strictly against the botocore model before it is sent.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from neurondeploy.errors import NeurondeployError
from neurondeploy.resources.validation import check_request

READ_ONLY_PREFIXES = ("Describe", "Get", "List", "Head", "Lookup", "Search")
# Waiters poll; against an emulator they succeed at once, against AWS they take their documented time.
DEFAULT_WAIT_DELAY_S = 15
DEFAULT_WAIT_ATTEMPTS = 120
PROGRESS_EVERY_S = 60.0
# What each botocore waiter we use waits for, in the user's words (the waiter's acceptors: botocore's
# data/<service>/<version>/waiters-2.json).
WAITED_FOR = {
    "EndpointInService": "SageMaker starts the instances, pulls the image, loads the model and waits for its "
    "/ping (up to the startup health-check budget)",
    "EndpointDeleted": "SageMaker deletes the endpoint and its instances",
    "TrainingJobCompletedOrStopped": "the training job ends",
    "CertificateValidated": "ACM sees the DNS validation record and issues the certificate",
    "LoadBalancerAvailable": "the load balancer is provisioned",
    "LoadBalancersDeleted": "the load balancer is deleted",
    "NatGatewayAvailable": "the NAT gateway is available",
    "NatGatewayDeleted": "the NAT gateway is deleted",
    "InstanceTerminated": "the instances terminate",
    "VpcAvailable": "the VPC is available",
    "RoleExists": "IAM's new role is visible",
    "InstanceProfileExists": "IAM's new instance profile is visible",
}


class AwsCallError(NeurondeployError):
    """AWS refused a request for good (after botocore's retries): its code and message, and what we were doing."""

    exit_code = 6

    def __init__(
        self, message: str, hint: str | None = None, code: str | None = None, detail: str | None = None
    ) -> None:
        super().__init__(message, hint)
        self.code = code
        self.detail = detail if detail is not None else message  # what AWS (or botocore) said, without our prefix


def default_region(fallback: str | None = "us-east-1") -> str | None:
    """The region boto3 would use (``AWS_REGION``/``AWS_DEFAULT_REGION``, the profile's config), else ``fallback``."""
    import boto3

    return boto3.session.Session().region_name or fallback


def _aws_error(service: str, operation: str, exc: Exception) -> AwsCallError | None:
    """The :class:`AwsCallError` of a botocore ``ClientError`` (AWS answered no), ``BotoCoreError`` (no answer:
    credentials, region, network) or ``ResponseParserError`` (an answer that is no AWS response); None for anything
    else."""
    from botocore.exceptions import BotoCoreError, ClientError

    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        return AwsCallError(
            f"{service}:{operation}: {error.get('Code')}: {error.get('Message')}",
            code=error.get("Code"),
            detail=str(error.get("Message")),
        )
    if isinstance(exc, BotoCoreError):
        return AwsCallError(f"{service}:{operation}: {exc}", "check credentials, region and network", detail=str(exc))
    from botocore.parsers import ResponseParserError

    if isinstance(exc, ResponseParserError):  # an error page (a proxy, an emulator's 500) instead of AWS's answer
        first = " ".join(str(exc).split())[:160]
        return AwsCallError(
            f"{service}:{operation}: the answer is not an AWS response: {first}",
            "check the endpoint (AWS_ENDPOINT_URL, a proxy) and try again",
            detail=first,
        )
    return None


def is_mutating(operation: str) -> bool:
    return not operation.startswith(READ_ONLY_PREFIXES)


@dataclass
class Call:
    service: str
    operation: str
    mutating: bool


@dataclass
class AwsTransport:
    region: str
    max_attempts: int = 8
    wait_delay_s: int = DEFAULT_WAIT_DELAY_S
    wait_attempts: int = DEFAULT_WAIT_ATTEMPTS
    on_progress: Callable[[str], None] | None = None  # hears about long waits
    progress_every_s: float = PROGRESS_EVERY_S
    calls: list[Call] = field(default_factory=list)
    _clients: dict = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def client(self, service: str):
        with self._lock:
            if service not in self._clients:
                import boto3
                from botocore.config import Config

                config = Config(
                    retries={"mode": "standard", "total_max_attempts": self.max_attempts},
                    user_agent_extra="neurondeploy",
                )
                region = "us-east-1" if service in ("iam", "route53") else self.region  # global services
                self._clients[service] = boto3.client(service, region_name=region, config=config)
            return self._clients[service]

    def adopt(self, service: str, client) -> None:
        """Send ``service``'s calls through a boto3 client made elsewhere (its own endpoint, config and hooks)."""
        with self._lock:
            self._clients[service] = client

    def _log(self, service: str, operation: str) -> None:
        with self._lock:
            self.calls.append(Call(service, operation, is_mutating(operation)))

    def call(self, service: str, operation: str, params: dict[str, Any]) -> dict[str, Any]:
        from botocore import xform_name

        check_request(service, operation, params, self.region)
        try:
            client = self.client(service)  # inside: a client botocore cannot make (no region) is an AwsCallError
            self._log(service, operation)
            response = getattr(client, xform_name(operation))(**params)
        except Exception as exc:
            error = _aws_error(service, operation, exc)
            if error is None:
                raise
            raise error from exc
        response.pop("ResponseMetadata", None)
        return response

    def wait(self, service: str, waiter: str, params: dict[str, Any]) -> None:
        """A botocore waiter; while it polls, ``on_progress`` hears every PROGRESS_EVERY_S how long it has been
        (an endpoint takes minutes). A failure carries the resource's own FailureReason when it has one."""
        from botocore import xform_name
        from botocore.exceptions import WaiterError

        done = threading.Event()
        started = time.monotonic()
        subject = next((str(v) for v in params.values() if isinstance(v, str)), "")

        what = WAITED_FOR.get(waiter, waiter)

        def report() -> None:
            while not done.wait(self.progress_every_s):
                minutes = (time.monotonic() - started) / 60
                self.on_progress(f"waiting for {subject}: {what} ({waiter}): {minutes:.0f} min so far")

        reporter = threading.Thread(target=report, daemon=True, name="wait-progress")
        if self.on_progress is not None:
            reporter.start()
        try:
            self.client(service).get_waiter(xform_name(waiter)).wait(
                **params, WaiterConfig={"Delay": self.wait_delay_s, "MaxAttempts": self.wait_attempts}
            )
        except WaiterError as exc:
            reason = (exc.last_response or {}).get("FailureReason")
            raise AwsCallError(
                f"{service}: waiting for {waiter} {subject} failed: "
                + (f"FailureReason: {reason}" if reason else str(exc)),
                "look at the resource in the AWS console; re-run apply once it is fixed",
            ) from exc
        finally:
            done.set()
            if reporter.is_alive():
                reporter.join()  # no progress line may follow the wait's end

    def mutating_calls(self) -> list[Call]:
        return [call for call in self.calls if call.mutating]


class Transfer:
    """A local file to S3 with boto3's managed transfer: one PutObject, or a multipart upload above 8 MiB, so
    objects over PutObject's 5 GiB work too (multipart uploads are authorised as s3:PutObject).

    ``Transfer(transport).call("s3", "PutObject", {"Bucket": ..., "Key": ..., **extra args}, path)``: spelt like a
    call, so that :mod:`neurondeploy.aws.iam_policy` sees the operation; checked strictly and logged as one call.
    """

    OPERATIONS = (("s3", "PutObject"),)

    def __init__(self, transport: AwsTransport) -> None:
        self.transport = transport

    def call(self, service: str, operation: str, params: dict[str, Any], path) -> None:
        from boto3.exceptions import S3UploadFailedError
        from boto3.s3.transfer import TransferConfig

        if (service, operation) not in self.OPERATIONS:
            raise ValueError(f"Transfer sends {self.OPERATIONS}, not {service}:{operation}")
        check_request(service, operation, params, self.transport.region)
        extra = {name: value for name, value in params.items() if name not in ("Bucket", "Key")}
        try:
            client = self.transport.client(service)
            self.transport._log(service, operation)
            client.upload_file(
                str(path),
                params["Bucket"],
                params["Key"],
                ExtraArgs=extra or None,
                Config=TransferConfig(use_threads=False),
            )
        except Exception as exc:
            cause = exc.__context__ if isinstance(exc, S3UploadFailedError) else exc  # boto3 wraps ClientError
            error = _aws_error(service, operation, cause) if cause is not None else None
            if error is None:
                raise
            raise error from exc
