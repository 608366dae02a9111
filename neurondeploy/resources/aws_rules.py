"""AWS rules that botocore's service models do not carry, each with the page that states it.

botocore models types, lengths, patterns and enums, and :mod:`neurondeploy.resources.validation` checks those. AWS
states other rules only in its documentation, and refuses the request at run time: an ELB name that begins with
``internal-``, a security group with more inbound rules than it holds, a CIDR given twice in one rule, a SageMaker
model whose image is not in ECR (or is in another region's), a role of another partition, an S3 bucket named like an
IP address. Each :class:`Rule` here names the operation, what AWS refuses and where it says so;
:func:`rule_problems` runs them after the model's checks, so ``validate``, ``plan`` and every call the transport sends
refuse the same requests offline, before anything is made.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from neurondeploy.resources.naming import partition
from neurondeploy.resources.refs import contains_ref

ELB_NAME_MAX = 32
# Inbound rules per security group, the default quota (adjustable); IPv4 and IPv6 rules are counted apart.
INBOUND_RULES_PER_GROUP = 60
BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
BUCKET_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
BUCKET_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")
ECR_IMAGE = re.compile(r"^\d{12}\.dkr\.ecr(?:-fips)?\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(?:\.cn)?/\S+$")
ARN_PARTITION = re.compile(r"^arn:(?P<partition>[a-z-]+):")
# Parameters that carry an ARN of the caller's own account: they must be of the region's partition.
ROLE_PARAMETERS = ("RoleArn", "ExecutionRoleArn")
S3_URI_PARAMETERS = ("ModelDataUrl", "S3Uri", "S3OutputPath", "S3ModelArtifacts")


@dataclass(frozen=True)
class Rule:
    """One rule AWS states in prose: ``check(params, region)`` yields ``"<Field.Path>: <what is wrong>"``."""

    operations: tuple[tuple[str, str], ...]  # (service, operation); ("*", "*"): every request
    what: str
    source: str
    check: Callable[[Mapping[str, Any], str | None], Iterable[str]]


def _text(value: Any) -> str | None:
    """A literal string to judge; None for anything else (a ``${ref}`` is resolved at apply time)."""
    return value if isinstance(value, str) and not contains_ref(value) else None


def _elb_name(kind: str, *, internal_prefix: bool) -> Callable[[Mapping[str, Any], str | None], Iterable[str]]:
    def check(params: Mapping[str, Any], region: str | None) -> Iterable[str]:
        name = _text(params.get("Name"))
        if name is None:
            return
        if len(name) > ELB_NAME_MAX:
            yield f"Name: {name!r} has {len(name)} characters; a {kind} name has at most {ELB_NAME_MAX}"
        if not re.fullmatch(r"[A-Za-z0-9-]*", name):
            yield f"Name: {name!r}: a {kind} name holds only letters, digits and hyphens"
        if name.startswith("-") or name.endswith("-"):
            yield f"Name: {name!r}: a {kind} name cannot begin or end with a hyphen"
        if internal_prefix and name.lower().startswith("internal-"):
            yield f"Name: {name!r}: a {kind} name cannot begin with 'internal-' (ELB keeps it for internal DNS names)"

    return check


def _ranges(params: Mapping[str, Any]) -> Iterable[tuple[int, str, str, int, Any]]:
    """(permission index, ranges member, CIDR key, range index, CIDR) of each address range in an ingress request."""
    for i, permission in enumerate(params.get("IpPermissions") or []):
        for ranges, key in (("IpRanges", "CidrIp"), ("Ipv6Ranges", "CidrIpv6")):
            for j, item in enumerate(permission.get(ranges) or []):
                yield i, ranges, key, j, item.get(key)


def _inbound_rule_quota(params: Mapping[str, Any], region: str | None) -> Iterable[str]:
    for ranges, family in (("IpRanges", "IPv4"), ("Ipv6Ranges", "IPv6")):
        count = sum(1 for _, member, *_ in _ranges(params) if member == ranges)
        if count > INBOUND_RULES_PER_GROUP:
            yield (
                f"IpPermissions: {count} {family} inbound rules; a security group holds {INBOUND_RULES_PER_GROUP} "
                "(the default quota, per address family)"
            )


def _duplicate_cidrs(params: Mapping[str, Any], region: str | None) -> Iterable[str]:
    seen: set[tuple[int, str]] = set()
    for i, ranges, key, j, value in _ranges(params):
        cidr = _text(value)
        try:
            network = str(ipaddress.ip_network(cidr, strict=False)) if cidr else None
        except ValueError:
            continue  # the model's pattern, or EC2, says what is wrong with it
        if network is not None and (i, network) in seen:
            yield (
                f"IpPermissions[{i}].{ranges}[{j}].{key}: {cidr} is given twice for the same ports: EC2 refuses the "
                "rule (InvalidPermission.Duplicate)"
            )
        seen.add((i, network))


def _image_problem(image: str, region: str | None, *, same_region: bool) -> str | None:
    found = ECR_IMAGE.match(image)
    if found is None:
        return (
            f"{image!r} is not an Amazon ECR image (<account>.dkr.ecr.<region>.amazonaws.com/<repository>:<tag>): "
            "SageMaker pulls from ECR, or from a private registry in the job's or endpoint's VPC"
        )
    if same_region and region and found["region"] != region:
        return f"{image!r} is in ECR in {found['region']}; SageMaker needs it in the model's region, {region}"
    return None


def _model_images(params: Mapping[str, Any], region: str | None) -> Iterable[str]:
    containers = [("PrimaryContainer", params.get("PrimaryContainer"))]
    containers += [(f"Containers[{i}]", c) for i, c in enumerate(params.get("Containers") or [])]
    for path, container in containers:
        if (
            not isinstance(container, Mapping)
            or (container.get("ImageConfig") or {}).get("RepositoryAccessMode") == "Vpc"
        ):
            continue
        image = _text(container.get("Image"))
        problem = image and _image_problem(image, region, same_region=True)
        if problem:
            yield f"{path}.Image: {problem}"


def _training_image(params: Mapping[str, Any], region: str | None) -> Iterable[str]:
    algorithm = params.get("AlgorithmSpecification") or {}
    if (algorithm.get("TrainingImageConfig") or {}).get("TrainingRepositoryAccessMode") == "Vpc":
        return
    image = _text(algorithm.get("TrainingImage"))
    problem = image and _image_problem(image, region, same_region=False)
    if problem:
        yield f"AlgorithmSpecification.TrainingImage: {problem}"


def _walk(value: Any, path: str = "") -> Iterable[tuple[str, str, Any]]:
    """(path, key, value) of every member of a request, depth first."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            yield where, str(key), item
            yield from _walk(item, where)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _walk(item, f"{path}[{i}]")


def _role_partition(params: Mapping[str, Any], region: str | None) -> Iterable[str]:
    if not region:
        return
    want = partition(region)
    for path, key, value in _walk(params):
        arn = _text(value) if key in ROLE_PARAMETERS else None
        found = ARN_PARTITION.match(arn) if arn else None
        if found and found["partition"] != want:
            yield (
                f"{path}: {arn!r} is in partition {found['partition']}; {region} is in {want}, and a role is used "
                "only in its own partition"
            )


def bucket_name_problem(name: str) -> str | None:
    """Why S3 refuses ``name`` as a general purpose bucket's name, or None."""
    if not BUCKET_NAME.match(name):
        return (
            "a bucket name has 3 to 63 lowercase letters, digits, dots and hyphens, and begins and ends with a "
            "letter or digit"
        )
    if ".." in name:
        return "a bucket name cannot have two dots in a row"
    try:
        ipaddress.IPv4Address(name)
        return "a bucket name cannot be formatted as an IP address"
    except ValueError:
        pass
    if name.startswith(BUCKET_PREFIXES):
        return f"a bucket name cannot begin with {', '.join(BUCKET_PREFIXES)}"
    if name.endswith(BUCKET_SUFFIXES):
        return f"a bucket name cannot end with {', '.join(BUCKET_SUFFIXES)}"
    return None


def _bucket_names(params: Mapping[str, Any], region: str | None) -> Iterable[str]:
    for path, key, value in _walk(params):
        text = _text(value)
        if text is None:
            continue
        if key == "Bucket":
            bucket = text
        elif key in S3_URI_PARAMETERS and text.startswith("s3://"):
            bucket = text[len("s3://") :].split("/", 1)[0]
        else:
            continue
        problem = bucket_name_problem(bucket)
        if problem:
            yield f"{path}: bucket {bucket!r}: {problem}"


RULES: tuple[Rule, ...] = (
    Rule(
        (("elbv2", "CreateLoadBalancer"),),
        "a load balancer's name: at most 32 letters, digits and hyphens, no hyphen at either end, not 'internal-...'",
        "https://docs.aws.amazon.com/elasticloadbalancing/latest/APIReference/API_CreateLoadBalancer.html",
        _elb_name("load balancer", internal_prefix=True),
    ),
    Rule(
        (("elbv2", "CreateTargetGroup"),),
        "a target group's name: at most 32 letters, digits and hyphens, no hyphen at either end",
        "https://docs.aws.amazon.com/elasticloadbalancing/latest/APIReference/API_CreateTargetGroup.html",
        _elb_name("target group", internal_prefix=False),
    ),
    Rule(
        (("ec2", "AuthorizeSecurityGroupIngress"),),
        "a security group holds 60 inbound rules per address family (the default quota)",
        "https://docs.aws.amazon.com/vpc/latest/userguide/amazon-vpc-limits.html#vpc-limits-security-groups",
        _inbound_rule_quota,
    ),
    Rule(
        (("ec2", "AuthorizeSecurityGroupIngress"),),
        "a rule names a CIDR once for the same ports (InvalidPermission.Duplicate)",
        "https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html",
        _duplicate_cidrs,
    ),
    Rule(
        (("sagemaker", "CreateModel"),),
        "a model's image is in Amazon ECR in the model's region, unless its ImageConfig names a registry in its VPC",
        "https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ContainerDefinition.html",
        _model_images,
    ),
    Rule(
        (("sagemaker", "CreateTrainingJob"),),
        "a training job's image is in Amazon ECR, unless it comes from a registry in its VPC",
        "https://docs.aws.amazon.com/sagemaker/latest/dg/docker-containers-adapt-your-own-private-registry.html",
        _training_image,
    ),
    Rule(
        (("*", "*"),),
        "a role is used in its own partition: aws, aws-cn (cn-*), aws-us-gov (us-gov-*)",
        "https://docs.aws.amazon.com/IAM/latest/UserGuide/reference-arns.html",
        _role_partition,
    ),
    Rule(
        (("*", "*"),),
        "S3 bucket names: 3-63 lowercase letters, digits, dots, hyphens; not an IP address; no reserved affixes",
        "https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html",
        _bucket_names,
    ),
)


def rule_problems(service: str, operation: str, params: Mapping[str, Any], region: str | None = None) -> list[str]:
    """What the :data:`RULES` of ``service:operation`` find in ``params`` (``region``: where it is sent; the rules
    that need it skip without it), each ``"<Operation>.<Field.Path>: <what is wrong>"``."""
    if not isinstance(params, Mapping):
        return []
    problems: list[str] = []
    for rule in RULES:
        if any(s in (service, "*") and o in (operation, "*") for s, o in rule.operations):
            problems += [
                f"{operation}.{problem} (AWS rule: {rule.source.split(';')[0]})"
                for problem in rule.check(params, region)
            ]
    return problems
