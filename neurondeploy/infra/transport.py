"""The only place requests leave for AWS: boto3 clients per service, botocore's standard retry mode, waiters,
and a log of every call (service, operation, whether it mutates) so apply can count what it sent.

Every request is checked strictly against the botocore model before it is sent.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from neurondeploy.errors import NeurondeployError

READ_ONLY_PREFIXES = ("Describe", "Get", "List", "Head", "Lookup", "Search")
# Waiters poll; against an emulator they succeed at once, against AWS they take their documented time.
DEFAULT_WAIT_DELAY_S = 15
DEFAULT_WAIT_ATTEMPTS = 120


class AwsCallError(NeurondeployError):
    """AWS refused a request for good (after botocore's retries): its code and message, and what we were doing."""

    exit_code = 6

    def __init__(self, message: str, hint: str | None = None, code: str | None = None) -> None:
        super().__init__(message, hint)
        self.code = code


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
    calls: list[Call] = field(default_factory=list)
    _clients: dict = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def client(self, service: str):
        with self._lock:
            if service not in self._clients:
                import boto3
                from botocore.config import Config

                config = Config(retries={"mode": "standard", "total_max_attempts": self.max_attempts},
                                user_agent_extra="neurondeploy")
                region = "us-east-1" if service in ("iam", "route53") else self.region  # global services
                self._clients[service] = boto3.client(service, region_name=region, config=config)
            return self._clients[service]

    def call(self, service: str, operation: str, params: dict[str, Any]) -> dict[str, Any]:
        from botocore import xform_name
        from botocore.exceptions import BotoCoreError, ClientError

        from neurondeploy.infra.request_validation import check_request

        check_request(service, operation, params)
        client = self.client(service)
        with self._lock:
            self.calls.append(Call(service, operation, is_mutating(operation)))
        try:
            response = getattr(client, xform_name(operation))(**params)
        except ClientError as exc:
            error = exc.response.get("Error", {})
            raise AwsCallError(f"{service}:{operation}: {error.get('Code')}: {error.get('Message')}",
                               code=error.get("Code")) from exc
        except BotoCoreError as exc:
            raise AwsCallError(f"{service}:{operation}: {exc}", "check credentials, region and network") from exc
        response.pop("ResponseMetadata", None)
        return response

    def wait(self, service: str, waiter: str, params: dict[str, Any]) -> None:
        from botocore import xform_name
        from botocore.exceptions import WaiterError

        try:
            self.client(service).get_waiter(xform_name(waiter)).wait(
                **params, WaiterConfig={"Delay": self.wait_delay_s, "MaxAttempts": self.wait_attempts})
        except WaiterError as exc:
            raise AwsCallError(f"{service}: waiting for {waiter} failed: {exc}",
                               "look at the resource in the AWS console; re-run apply once it is fixed") from exc

    def mutating_calls(self) -> list[Call]:
        return [call for call in self.calls if call.mutating]
