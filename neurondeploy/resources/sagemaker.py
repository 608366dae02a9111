"""What SageMaker endpoints and training jobs share: names, tags, the execution role, VPC config and security group."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from neurondeploy.resources.iam import (
    role_resource,
    vpc_statements,
)
from neurondeploy.resources.kinds import Find, Reader, Scan, ours
from neurondeploy.resources.model import PlanContext, Request, Resource, resource
from neurondeploy.resources.naming import ec2_tags, ownership_tags, tag_list
from neurondeploy.resources.network import delete_security_group
from neurondeploy.resources.refs import ref
from neurondeploy.specs import Spec

SAGEMAKER_PRINCIPAL = "sagemaker.amazonaws.com"


def execution_role_resources(spec: Spec, ctx: PlanContext, statements: list[dict], what: str) -> list[Resource]:
    if spec.iam.role_arn:
        return []
    if vpc_config(spec):
        statements = statements + vpc_statements()
    return [
        role_resource(
            spec,
            ctx,
            "execution-role",
            "sagemaker-role",
            SAGEMAKER_PRINCIPAL,
            statements,
            f"SageMaker execution role for {what} {spec.name}: its S3 prefixes, image and logs only",
        )
    ]


def security_group_resources(spec: Spec, *, training: bool) -> list[Resource]:
    """A group for SageMaker's ENIs when it joins the VPC without given groups. No ingress for endpoints;
    training hosts talk to each other (torchrun, EFA), so the group admits all traffic from itself."""
    config = vpc_config(spec)
    if not config or spec.network.security_group_ids:
        return []
    group = ref("sg-sagemaker", "GroupId")
    name = f"{spec.name}-sagemaker"
    create = [
        Request(
            "ec2",
            "CreateSecurityGroup",
            {
                "GroupName": name,
                "VpcId": spec.network.vpc_id,
                "TagSpecifications": ec2_tags(spec, "security-group", name),
                "Description": "neurondeploy SageMaker "
                + ("training hosts: all traffic between them" if training else "endpoint: no ingress"),
            },
            {"GroupId": "GroupId"},
        )
    ]
    if training:
        create.append(
            Request(
                "ec2",
                "AuthorizeSecurityGroupIngress",
                {
                    "GroupId": group,
                    "IpPermissions": [
                        {"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": group, "Description": "training hosts"}]}
                    ],
                },
            )
        )
    return [
        resource(
            "sg-sagemaker",
            "ec2:security-group",
            create,
            delete_security_group(group),
            description="Security group of SageMaker's network interfaces in the VPC",
        )
    ]


NAME_MAX = 63  # model, endpoint config, endpoint and training job names


def execution_role_arn(spec: Spec) -> str:
    return spec.iam.role_arn or ref("execution-role", "Arn")


def vpc_config(spec: Spec) -> dict | None:
    """SageMaker joins the VPC only when existing subnets are named; its own group unless groups are given."""
    net = spec.network
    if not (net.vpc_id and net.instance_subnet_ids):
        return None
    groups = list(net.security_group_ids) or [ref("sg-sagemaker", "GroupId")]
    return {"SecurityGroupIds": groups, "Subnets": list(net.instance_subnet_ids)}


def sagemaker_tags(spec: Spec, **extra: str) -> list[dict]:
    return tag_list(ownership_tags(spec, **extra))


# --- kinds: the sweep's SageMaker source, shared by the endpoint's and the training job's kinds ----------------


def _find_sagemaker(scan: Scan) -> None:
    # Every name our builders give contains the deployment name: NameContains saves a ListTags per object.
    paged, named = scan.paged, {"NameContains": scan.deployment}
    endpoints: dict[str, list] = {}  # name -> tags
    for pages, key, name_key, arn_key, kind in [
        (
            paged.call("sagemaker", "ListEndpoints", named),
            "Endpoints",
            "EndpointName",
            "EndpointArn",
            "sagemaker:endpoint",
        ),
        (
            paged.call("sagemaker", "ListEndpointConfigs", named),
            "EndpointConfigs",
            "EndpointConfigName",
            "EndpointConfigArn",
            "sagemaker:endpoint-config",
        ),
        (paged.call("sagemaker", "ListModels", named), "Models", "ModelName", "ModelArn", "sagemaker:model"),
        # Jobs cannot be deleted; only a running one is a leftover (destroy stops it).
        (
            paged.call("sagemaker", "ListTrainingJobs", {**named, "StatusEquals": "InProgress"}),
            "TrainingJobSummaries",
            "TrainingJobName",
            "TrainingJobArn",
            "sagemaker:training-job",
        ),
    ]:
        for page in pages:
            for item in page.get(key, []):
                tags = scan.call("sagemaker", "ListTags", {"ResourceArn": item[arn_key]}).get("Tags")
                if ours(tags, scan.deployment):
                    scan.add(kind, item[name_key], f"{kind.split(':')[1]} {item[name_key]}", tags=tags)
                    if kind == "sagemaker:endpoint":
                        endpoints[item[name_key]] = tags
    if endpoints:  # scaling targets of our endpoints are ours (moto keeps no tags on scaling targets)
        prefixes = tuple(f"endpoint/{e}/" for e in endpoints)  # they take their endpoint's owner
        for page in paged.call("application-autoscaling", "DescribeScalableTargets", {"ServiceNamespace": "sagemaker"}):
            for target in page.get("ScalableTargets", []):
                if target["ResourceId"].startswith(prefixes):
                    ident = "|".join((target["ServiceNamespace"], target["ScalableDimension"], target["ResourceId"]))
                    endpoint = target["ResourceId"].split("/")[1]
                    detail = f"scaling of {target['ResourceId']}"
                    scan.add("application-autoscaling:scalable-target", ident, detail, tags=endpoints.get(endpoint))


FIND_SAGEMAKER = Find("sagemaker", 500, _find_sagemaker)


def tags_by_arn(arn_key: str) -> Callable[[Reader, dict, Mapping], Any]:
    """Drift's tag reader for a SageMaker object whose describe names its ARN at ``arn_key``."""
    return lambda aws, obj, ids: aws.call("sagemaker", "ListTags", {"ResourceArn": obj[arn_key]}).get("Tags")
