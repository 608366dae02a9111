"""Long waits: progress while a waiter polls, and the resource's own FailureReason when it fails (moto over HTTP)."""

from __future__ import annotations

import threading
import time

import pytest

from neurondeploy.aws.transport import AwsCallError, AwsTransport

pytestmark = pytest.mark.integration


def _backend():
    from moto.backends import get_backend

    return get_backend("sagemaker")["123456789012"]["us-east-1"]


def _endpoint(aws) -> str:
    sagemaker = aws.client("sagemaker")
    sagemaker.create_model(
        ModelName="m",
        ExecutionRoleArn="arn:aws:iam::123456789012:role/r",
        PrimaryContainer={"Image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/x:1"},
    )
    sagemaker.create_endpoint_config(
        EndpointConfigName="c",
        ProductionVariants=[
            {"VariantName": "AllTraffic", "ModelName": "m", "InitialInstanceCount": 1, "InstanceType": "ml.m5.large"}
        ],
    )
    sagemaker.create_endpoint(EndpointName="e", EndpointConfigName="c")
    return "e"


def test_a_long_wait_reports_progress_until_the_resource_is_ready(aws):
    _endpoint(aws)
    endpoint = _backend().endpoints["e"]
    endpoint.endpoint_status = "Creating"  # moto makes endpoints InService at once; AWS takes minutes
    heard: list[str] = []
    transport = AwsTransport(
        "us-east-1", wait_delay_s=0, wait_attempts=1000, on_progress=heard.append, progress_every_s=0.05
    )
    threading.Timer(0.4, lambda: setattr(endpoint, "endpoint_status", "InService")).start()
    started = time.monotonic()
    transport.wait("sagemaker", "EndpointInService", {"EndpointName": "e"})
    assert time.monotonic() - started >= 0.4
    # what it waits for, in words, not only the waiter's name
    said = "waiting for e: SageMaker starts the instances, pulls the image, loads the model and waits for its /ping"
    assert heard and all(message.startswith(said) and "(EndpointInService)" in message for message in heard)
    count = len(heard)
    time.sleep(0.2)
    assert len(heard) == count  # the reporter stops with the wait


def test_a_failed_wait_says_why_in_the_resources_own_words(aws):
    _endpoint(aws)
    endpoint = _backend().endpoints["e"]
    endpoint.endpoint_status = "Failed"
    endpoint.failure_reason = (
        "The primary container for production variant AllTraffic did not pass the ping health check."
    )
    transport = AwsTransport("us-east-1", wait_delay_s=0, wait_attempts=3)
    with pytest.raises(AwsCallError) as failure:
        transport.wait("sagemaker", "EndpointInService", {"EndpointName": "e"})
    assert "did not pass the ping health check" in failure.value.message
