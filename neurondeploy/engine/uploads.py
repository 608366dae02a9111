"""What apply puts in S3 before any resource: the shared bucket, the packed artifact (only when its sha256
changed); and the look-up that our serving image is in ECR."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from neurondeploy.archive import artifact_digest, pack_artifact
from neurondeploy.aws.errors import is_ecr_image_missing, is_s3_missing_bucket, is_s3_missing_object
from neurondeploy.aws.transport import AwsCallError, AwsTransport
from neurondeploy.errors import NeurondeployError
from neurondeploy.planner.image_push import image_to_push
from neurondeploy.resources.compute import CONSTRAINTS_FILE
from neurondeploy.resources.model import PlanContext
from neurondeploy.resources.naming import split_s3, toolkit_prefix
from neurondeploy.resources.s3 import shared_bucket_resource
from neurondeploy.resources.sagemaker_endpoint import container_image
from neurondeploy.specs import InferenceSpec
from neurondeploy.wheel import ToolkitWheel

SHA256_METADATA = "neurondeploy-sha256"


class ApplyError(NeurondeployError):
    exit_code = 6


def ensure_bucket(transport: AwsTransport, region: str, ctx: PlanContext) -> str:
    bucket = shared_bucket_resource(region, ctx)
    name = bucket.create[0].params["Bucket"]
    try:
        transport.call("s3", "HeadBucket", {"Bucket": name})
        return name
    except AwsCallError as exc:
        if not is_s3_missing_bucket(exc):
            raise ApplyError(
                f"shared bucket {name}: {exc.message}", "check the bucket's owner and your permissions"
            ) from exc
    for request in bucket.create:
        transport.call(request.service, request.operation, request.params)
    return name


def artifact_is_current(transport: AwsTransport, uri: str, digest: str) -> bool:
    """Whether the object at ``uri`` is the artifact of sha256 ``digest`` (read-only: HeadObject)."""
    bucket, key = split_s3(uri)
    try:
        head = transport.call("s3", "HeadObject", {"Bucket": bucket, "Key": key})
    except AwsCallError as exc:
        if is_s3_missing_object(exc) or is_s3_missing_bucket(exc):
            return False
        raise
    return head.get("Metadata", {}).get(SHA256_METADATA) == digest


def upload_artifact(
    transport: AwsTransport,
    directory: Path,
    uri: str,
    digest: str | None = None,
    generated: Mapping[str, bytes] | None = None,
) -> bool:
    """Put the packed artifact (``directory`` and the ``generated`` files beside its own) at ``uri`` unless the
    object there already has the same sha256 (``digest``, when the caller has it already: :func:`artifact_digest`
    of the same). True if sent."""
    digest = digest or artifact_digest(directory, generated)
    if artifact_is_current(transport, uri, digest):
        return False
    return put_if_new(transport, uri, pack_artifact(directory, generated), digest, "application/gzip")


def put_if_new(transport: AwsTransport, uri: str, body: bytes, digest: str, content_type: str) -> bool:
    """PutObject of ``body`` at ``uri`` with its sha256 (``digest``) in its metadata, unless the object there already
    has it. True if sent."""
    if artifact_is_current(transport, uri, digest):
        return False
    bucket, key = split_s3(uri)
    transport.call(
        "s3",
        "PutObject",
        {
            "Bucket": bucket,
            "Key": key,
            "Body": body,
            "Metadata": {SHA256_METADATA: digest},
            "ContentType": content_type,
            "ServerSideEncryption": "AES256",
        },
    )
    return True


def upload_toolkit(transport: AwsTransport, artifact_s3_uri: str, wheel: ToolkitWheel) -> list[str]:
    """The exact neurondeploy build instances install: its wheel and constraints, beside the artifact and named by
    the wheel's sha256 (:func:`~neurondeploy.resources.naming.toolkit_prefix`); only what S3 lacks is sent."""
    prefix = toolkit_prefix(artifact_s3_uri, wheel.sha256)
    sent = []
    objects = (
        (wheel.filename, wheel.data, wheel.sha256, "application/zip"),
        (CONSTRAINTS_FILE, wheel.constraints.encode(), wheel.constraints_sha256, "text/plain"),
    )
    for name, body, digest, content_type in objects:
        if put_if_new(transport, prefix + name, body, digest, content_type):
            sent.append(prefix + name)
    return sent


def check_container_image(transport: AwsTransport, spec, ctx: PlanContext) -> None:
    """An endpoint on an image pushed to the account's ECR (our own serving image, the wrapper of infra/hf-secrets
    a container kind without secret support needs, your own) needs that image there. SageMaker would only find out
    after creating the endpoint (and failing it minutes later, at image pull), so look first and say how to push it.
    (The defaults, AWS's Neuron DLC and Hugging Face's images, are in AWS's registries: nothing to push.)"""
    if not (isinstance(spec, InferenceSpec) and spec.deployment.platform == "sagemaker"):
        return
    image = container_image(spec, ctx)
    push = image_to_push(spec, image)
    if push is None:
        return
    params = {
        "repositoryName": push.image.repository,
        "imageIds": [push.image.image_id],
        "registryId": push.image.account,
    }
    try:
        transport.call("ecr", "DescribeImages", params)
    except AwsCallError as exc:
        if not is_ecr_image_missing(exc):
            raise
        hint = "push it: " + " && ".join(push.commands)
        if spec.container.ours:
            hint += ", or leave deployment.container.image_uri empty for the Neuron DLC"
        raise ApplyError(
            f"the container image {image} is not in ECR ({exc.code}); the endpoint would fail to start", hint
        ) from None
