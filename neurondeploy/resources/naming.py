"""Names, ownership tags, partitions, ARNs and S3 URIs of what neurondeploy creates: pure string building."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping

from neurondeploy.errors import PlanError
from neurondeploy.resources.model import PlanContext
from neurondeploy.resources.refs import ref
from neurondeploy.resources.tags import DEPLOYMENT_TAG, LINEAGE, LINEAGE_TAG, MANAGED_BY, MANAGED_BY_TAG
from neurondeploy.specs import Spec


def aws_name(spec: Spec, suffix: str, limit: int) -> str:
    """``<spec.name>-<suffix>``, refused when over a service's length limit (specs cap names at 24)."""
    name = f"{spec.name}-{suffix}" if suffix else spec.name
    if len(name) > limit:
        raise PlanError(
            f"AWS name {name!r} is {len(name)} characters; the limit is {limit}",
            f"shorten the spec name to {limit - len(suffix) - 1} characters",
        )
    return name


def content_suffix(params: Mapping) -> str:
    """8 hex characters of the params' hash: immutable SageMaker objects get a new name when they change."""
    text = json.dumps(params, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def ownership_tags(spec: Spec, **extra: str) -> dict[str, str]:
    # Ours last: the spec refuses reserved prefixes, and ownership must never be overridden.
    return {**spec.tags, **extra, DEPLOYMENT_TAG: spec.name, MANAGED_BY_TAG: MANAGED_BY, LINEAGE_TAG: LINEAGE}


def tag_list(tags: Mapping[str, str]) -> list[dict[str, str]]:
    return [{"Key": key, "Value": value} for key, value in tags.items()]


def ec2_tags(spec, resource_type: str, name: str | None = None) -> list[dict]:
    """``TagSpecifications`` for an EC2 create call; ``Name`` shows in the console unless the spec sets it."""
    tags = ownership_tags(spec)
    if name and "Name" not in tags:
        tags = {"Name": name, **tags}
    return [{"ResourceType": resource_type, "Tags": tag_list(tags)}]


def partition(region: str) -> str:
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"


def account(ctx: PlanContext) -> str:
    return ctx.account_id or ref("account", "Account")


# The shared buckets' names start so; the operator policy grants S3 on these names only.
BUCKET_PREFIX = "neurondeploy-"


def bucket_name(region: str, ctx: PlanContext) -> str:
    # Shared across deployments (like SageMaker's sagemaker-<region>-<account>): holds training outputs that
    # must outlive `destroy`, so it is not a deployment resource (see deployment.shared_bucket_resource).
    return ctx.bucket or f"{BUCKET_PREFIX}{account(ctx)}-{region}"


def artifact_uri(spec: Spec, ctx: PlanContext) -> str:
    """Named by the artifact's sha256 when it is known: a new model is a new object, so what points at it (the
    SageMaker model, the instances' user data) changes and rolls out, while the running one keeps its own."""
    if ctx.artifact_s3_uri:
        return ctx.artifact_s3_uri
    name = f"model-{ctx.artifact_sha256[:16]}.tar.gz" if ctx.artifact_sha256 else "model.tar.gz"
    return f"s3://{bucket_name(spec.region, ctx)}/{spec.name}/artifact/{name}"


def toolkit_prefix(artifact_s3_uri: str, sha256: str) -> str:
    """Where the toolkit's wheel and constraints go: beside the artifact (the instance role reads that prefix), named by
    the wheel's sha256, so another build is another object and rolls the fleet."""
    return f"{parent_uri(artifact_s3_uri)}toolkit-{sha256[:16]}/"


def source_uri(spec: Spec, ctx: PlanContext) -> str:
    archive = f"sourcedir-{ctx.source_digest or ctx.run_id}.tar.gz"
    return ctx.source_s3_uri or f"s3://{bucket_name(spec.region, ctx)}/{spec.name}/source/{archive}"


_S3 = re.compile(r"^s3://([^/]+)/?(.*)$")


def split_s3(uri: str) -> tuple[str, str]:
    match = _S3.match(uri)
    if not match:
        raise PlanError(f"{uri!r} is not an S3 URI", "write it as s3://bucket/prefix")
    return match[1], match[2]


def s3_prefix_arn(uri: str, region: str, *, parent: bool = False) -> str:
    """ARN of every object under ``uri`` (``parent``: under the directory holding the object ``uri``)."""
    bucket, key = split_s3(uri)
    if parent:
        key = key.rsplit("/", 1)[0] if "/" in key else ""
    key = key.strip("/")
    return f"arn:{partition(region)}:s3:::{bucket}/{key + '/' if key else ''}*"


def parent_uri(uri: str) -> str:
    """The "directory" holding the object ``uri``: s3://b/a/model.tar.gz -> s3://b/a/."""
    bucket, key = split_s3(uri)
    return f"s3://{bucket}/{key.rsplit('/', 1)[0] + '/' if '/' in key else ''}"


def s3_bucket_arn(uri: str, region: str) -> str:
    return f"arn:{partition(region)}:s3:::{split_s3(uri)[0]}"
