"""Parts shared by training and inference specs: naming, region, tags, network, DNS, TLS, IAM.

Every field is described so that ``neurondeploy schema`` and the docs come from the models.
Cross-field rules that need no catalogue live here; rules that need the catalogue (instance
types, TP degrees, memory fit) live in ``neurondeploy.planner.checks``.
"""

from __future__ import annotations

import ipaddress
import math
import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from neurondeploy.catalog.images import dlc_accounts
from neurondeploy.catalog.partitions import unknown_region
from neurondeploy.specs.screening import screen_value

# Deployment names become prefixes of AWS names; the tightest is an ALB / target group name (32 chars),
# which gets a "-tg"/"-alb" style suffix, so the name itself stays short.
NAME_PATTERN = r"^[a-z]([a-z0-9-]{0,22}[a-z0-9])?$"
NAME_MAX = 24
REGION_PATTERN = r"^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-\d$"
ROLE_ARN_PATTERN = r"^arn:aws[a-z\-]*:iam::\d{12}:role/?[a-zA-Z_0-9+=,.@\-_/]+$"
# registry/repository:tag or @digest (https://docs.docker.com/reference/cli/docker/image/tag/): no spaces or
# control characters, which SageMaker's Image ([\S]{1,255}) refuses late and a boot script must never see.
IMAGE_URI_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._\-/:@]{0,254}$"
S3_URI_PATTERN = r"^s3://[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9](/.*)?$"
# An S3 object key is at most 1,024 bytes of UTF-8
# (https://docs.aws.amazon.com/AmazonS3/latest/userguide/object-keys.html).
S3_KEY_MAX_BYTES = 1024
RESERVED_TAG_PREFIXES = ("aws:", "neurondeploy:")
# An ALB needs a /27 or larger subnet in each AZ; the VPC is cut into public + private blocks per AZ.
SMALLEST_SUBNET_PREFIX = 27
# AWS's tag character set (letters, spaces, digits and _ . : / = + - @).
TAG_PATTERN = re.compile(r"[\w\s.:/=+\-@]*")


def s3_key_problem(uri: str, room: int) -> str | None:
    """Why the keys under the S3 prefix ``uri`` cannot hold file names of ``room`` bytes more, or None."""
    key = uri.partition("://")[2].partition("/")[2]
    size = len(key.encode())
    if size + 1 + room <= S3_KEY_MAX_BYTES:
        return None
    return (
        f"the key of {uri[:60]}... is {size} bytes: with the files under it (up to {room + 1} bytes more) it passes "
        f"S3's {S3_KEY_MAX_BYTES}-byte key limit (fix: a shorter prefix, at most {S3_KEY_MAX_BYTES - 1 - room} bytes)"
    )


class FieldIssue(ValueError):
    """A cross-field problem that belongs to one field (dotted path relative to the model raising it),
    so the error can name that field and its line instead of the whole model."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class Refusal(ValueError):
    """A validator's refusal that carries its fix (the loader prints it as the hint)."""

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(message)
        self.fix = fix


class StrictModel(BaseModel):
    """Base of every spec model: unknown keys are errors, no silent type coercion."""

    # defer_build: a model's validator is built when first used, so a plan pays only for its own kind's models.
    model_config = ConfigDict(extra="forbid", strict=True, validate_default=True, defer_build=True)


def _cidr(value: str) -> str:
    try:
        return str(ipaddress.ip_network(value, strict=True))
    except ValueError as exc:
        raise ValueError(f"{value!r} is not a CIDR block such as 10.0.0.0/16 ({exc})") from None


class NetworkSpec(StrictModel):
    """Where instances and the load balancer live: a VPC we create, or one that exists."""

    vpc_id: Annotated[
        str | None,
        Field(
            description="Existing VPC to use (vpc-...). Leave empty to create a VPC owned by this deployment.",
            pattern=r"^vpc-[0-9a-f]{8,17}$",
        ),
    ] = None
    vpc_cidr: Annotated[
        str, Field(description="CIDR block of the VPC to create (ignored with vpc_id); /16 to /24.")
    ] = "10.0.0.0/16"
    availability_zones: Annotated[
        int,
        Field(description="How many AZs to spread subnets over when creating the VPC; an ALB needs 2.", ge=1, le=6),
    ] = 2
    public_subnet_ids: Annotated[
        list[Annotated[str, Field(pattern=r"^subnet-[0-9a-f]{8,17}$")]],
        Field(description="Existing public subnets (for the load balancer), with vpc_id; in 2 or more AZs."),
    ] = []
    instance_subnet_ids: Annotated[
        list[Annotated[str, Field(pattern=r"^subnet-[0-9a-f]{8,17}$")]],
        Field(description="Existing subnets for instances / SageMaker VPC config, with vpc_id."),
    ] = []
    instance_subnets: Annotated[
        Literal["public", "private"] | None,
        Field(
            description="Where instances of a VPC we create live: private subnets behind a NAT gateway, with no "
            "public IP (the default; about $0.05/h for the gateway and its address), or public subnets with a "
            "public IPv4 address each (no NAT cost; the security group admits only the ALB; plan warns). With "
            "vpc_id, the subnets you list decide: instance_subnet_ids, else public_subnet_ids."
        ),
    ] = None
    empty_default_security_group: Annotated[
        bool,
        Field(
            description="Remove every rule of the default security group of a VPC we create, so anything placed "
            "in it by mistake can reach nothing and nothing can reach it (CIS AWS Foundations 5.4; Security Hub "
            "EC2.2). false keeps AWS's default rules (all traffic between its members, all egress)."
        ),
    ] = True
    flow_logs: Annotated[
        Literal["off", "rejected", "all"],
        Field(
            description="VPC flow logs of a VPC we create, written to the shared bucket under <name>/flow-logs/: "
            "every connection (all), only those security groups and network ACLs refused (rejected), or none "
            "(off, the default: S3 delivery is billed per GB, $0.25/GB list price for vended logs)."
        ),
    ] = "off"
    allowed_cidrs: Annotated[
        list[str],
        Field(description="CIDR blocks allowed to reach the load balancer on 80/443.", min_length=1),
    ] = ["0.0.0.0/0"]
    security_group_ids: Annotated[
        list[Annotated[str, Field(pattern=r"^sg-[0-9a-f]{8,17}$")]],
        Field(description="Extra existing security groups to attach to instances or SageMaker jobs.", max_length=4),
    ] = []

    @field_validator("vpc_cidr")
    @classmethod
    def _vpc_cidr_size(cls, value: str) -> str:
        network = ipaddress.ip_network(_cidr(value))
        if network.version != 4 or not 16 <= network.prefixlen <= 24:
            raise ValueError(f"{value} must be an IPv4 block from /16 to /24 (AWS VPC limits)")
        return str(network)

    @field_validator("allowed_cidrs")
    @classmethod
    def _allowed_cidrs_parse(cls, values: list[str]) -> list[str]:
        return [_cidr(value) for value in values]

    @property
    def subnet_prefix(self) -> int:
        """Prefix length of each public/private subnet when the VPC is created (2 blocks per AZ)."""
        return ipaddress.ip_network(self.vpc_cidr).prefixlen + math.ceil(math.log2(2 * self.availability_zones))

    @model_validator(mode="after")
    def _existing_vpc_needs_subnets(self) -> NetworkSpec:
        if self.vpc_id is None and self.subnet_prefix > SMALLEST_SUBNET_PREFIX:
            raise FieldIssue(
                "vpc_cidr",
                f"{self.vpc_cidr} is too small for {self.availability_zones} AZs "
                f"(subnets would be /{self.subnet_prefix}; an ALB needs /{SMALLEST_SUBNET_PREFIX})",
            )
        if self.vpc_id is None and (self.public_subnet_ids or self.instance_subnet_ids):
            raise FieldIssue("vpc_id", "subnet ids were given without vpc_id; set vpc_id to the VPC they belong to")
        return self

    @property
    def creates_vpc(self) -> bool:
        return self.vpc_id is None


class DnsSpec(StrictModel):
    """A Route 53 name for the endpoint."""

    hosted_zone_id: Annotated[
        str,
        Field(
            description="Route 53 hosted zone id that holds the record (e.g. Z0123456789ABC).",
            pattern=r"^[A-Z0-9]{1,32}$",
        ),
    ]
    zone_name: Annotated[str, Field(description="The hosted zone's domain, e.g. example.com.")]
    record_name: Annotated[str, Field(description="Full name to create, inside the zone, e.g. api.example.com.")]

    @field_validator("zone_name", "record_name")
    @classmethod
    def _domain(cls, value: str) -> str:
        value = value.rstrip(".").lower()
        label = r"(?!-)[a-z0-9-]{1,63}(?<!-)"
        if len(value) > 253 or not re.fullmatch(rf"{label}(\.{label})+", value):
            raise ValueError(f"{value!r} is not a domain name such as api.example.com")
        return value

    @model_validator(mode="after")
    def _record_in_zone(self) -> DnsSpec:
        if self.record_name != self.zone_name and not self.record_name.endswith("." + self.zone_name):
            raise FieldIssue(
                "record_name",
                f"record_name {self.record_name} is not inside zone {self.zone_name}; "
                f"use a name ending in .{self.zone_name}",
            )
        return self


class TlsSpec(StrictModel):
    """HTTPS on the load balancer: an existing ACM certificate, or one requested and validated through Route 53."""

    enabled: Annotated[bool, Field(description="Serve HTTPS on 443 and redirect HTTP to it.")] = True
    certificate_arn: Annotated[
        str | None,
        Field(
            description="Existing ACM certificate to use. Leave empty to request one, validated by DNS in dns.hosted_zone_id.",
            pattern=r"^arn:aws[a-z\-]*:acm:[a-z0-9-]+:\d{12}:certificate/[0-9a-f-]{36}$",
        ),
    ] = None


class IamSpec(StrictModel):
    """The role AWS services assume on the deployment's behalf."""

    role_arn: Annotated[
        str | None,
        Field(
            description="Existing execution role (SageMaker) or instance role (EC2). Leave empty to create a "
            "least-privilege role owned by this deployment.",
            pattern=ROLE_ARN_PATTERN,
        ),
    ] = None


def validate_tags(tags: dict[str, str]) -> dict[str, str]:
    if len(tags) > 40:
        raise ValueError(f"{len(tags)} tags given; AWS allows 50 per resource and neurondeploy needs 10 of them")
    for key, value in tags.items():
        if not 1 <= len(key) <= 128 or len(value) > 256:
            raise ValueError(f"tag {key!r}: keys are 1-128 characters and values at most 256")
        screen_value("tag", key, value, "keep credentials out of tags, which tag:GetResources shows to any reader")
        if not TAG_PATTERN.fullmatch(key) or not TAG_PATTERN.fullmatch(value):
            raise ValueError(f"tag {key!r}: keys and values may hold letters, digits, spaces and _ . : / = + - @ only")
        if key.lower().startswith(RESERVED_TAG_PREFIXES):
            raise ValueError(f"tag {key!r} uses a reserved prefix ({', '.join(RESERVED_TAG_PREFIXES)}); rename it")
    return tags


class SpecBase(StrictModel):
    """Fields every spec has."""

    name: Annotated[
        str,
        Field(
            description="Deployment name: lowercase letters, digits and dashes, starting with a letter, at most "
            f"{NAME_MAX} characters. Prefixes every AWS resource name and tags every resource.",
            pattern=NAME_PATTERN,
        ),
    ]
    region: Annotated[str, Field(description="AWS region, e.g. us-east-1.", pattern=REGION_PATTERN)] = "us-east-1"
    tags: Annotated[dict[str, str], Field(description="Extra tags put on every resource created.")] = {}
    neuron_sdk_version: Annotated[
        str | None,
        Field(
            description="Neuron SDK release to build and run with (e.g. 2.27.0): the artifact, the images and the "
            "DLAMI all come from it. Empty: the newest release in which every piece of the deployment exists "
            "(`plan` shows it).",
            pattern=r"^2\.\d{1,2}\.\d{1,2}$",
        ),
    ] = None
    network: Annotated[NetworkSpec, Field(description="VPC, subnets and who may connect.")] = Field(
        default_factory=NetworkSpec
    )
    iam: Annotated[IamSpec, Field(description="IAM role used by the instances or SageMaker.")] = Field(
        default_factory=IamSpec
    )

    @field_validator("tags")
    @classmethod
    def _tags(cls, tags: dict[str, str]) -> dict[str, str]:
        return validate_tags(tags)

    @field_validator("region")
    @classmethod
    def _region(cls, region: str) -> str:
        nearest = unknown_region(region, frozenset(dlc_accounts()))  # the DLCs' regions: botocore not read
        if nearest is not None:
            raise Refusal(
                f"unknown region {region!r}: no AWS partition has it (botocore's partitions.json)",
                f"did you mean {nearest[0]}?" if nearest else "give a region such as us-east-1",
            )
        return region
