"""SageMaker endpoints and training jobs as Resources, assembled from the builders in requests.py."""

from __future__ import annotations

from neurondeploy.resources.iam import (
    role_resource,
    vpc_statements,
)
from neurondeploy.resources.refs import ref
from neurondeploy.resources.model import Request, Resource, resource
from neurondeploy.resources.naming import ec2_tags
from neurondeploy.resources.naming import ownership_tags, tag_list

SAGEMAKER_PRINCIPAL = "sagemaker.amazonaws.com"


def execution_role_resources(spec, statements: list[dict], what: str) -> list[Resource]:
    if spec.iam.role_arn:
        return []
    if vpc_config(spec):
        statements = statements + vpc_statements()
    return [role_resource(spec, "execution-role", "sagemaker-role", SAGEMAKER_PRINCIPAL, statements,
                          f"SageMaker execution role for {what} {spec.name}: its S3 prefixes, image and logs only")]


def security_group_resources(spec, *, training: bool) -> list[Resource]:
    """A group for SageMaker's ENIs when it joins the VPC without given groups. No ingress for endpoints;
    training hosts talk to each other (torchrun, EFA), so the group admits all traffic from itself."""
    config = vpc_config(spec)
    if not config or spec.network.security_group_ids:
        return []
    group = ref("sg-sagemaker", "GroupId")
    name = f"{spec.name}-sagemaker"
    create = [Request("ec2", "CreateSecurityGroup", {
        "GroupName": name, "VpcId": spec.network.vpc_id, "TagSpecifications": ec2_tags(spec, "security-group", name),
        "Description": "neurondeploy SageMaker " + ("training hosts: all traffic between them" if training else "endpoint: no ingress"),
    }, {"GroupId": "GroupId"})]
    if training:
        create.append(Request("ec2", "AuthorizeSecurityGroupIngress", {"GroupId": group, "IpPermissions": [
            {"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": group, "Description": "training hosts"}]}]}))
    return [resource("sg-sagemaker", "ec2:security-group", create,
                     [Request("ec2", "DeleteSecurityGroup", {"GroupId": group})],
                     description="Security group of SageMaker's network interfaces in the VPC")]


NAME_MAX = 63  # model, endpoint config, endpoint and training job names


def execution_role_arn(spec) -> str:
    return spec.iam.role_arn or ref("execution-role", "Arn")


def vpc_config(spec) -> dict | None:
    """SageMaker joins the VPC only when existing subnets are named; its own group unless groups are given."""
    net = spec.network
    if not (net.vpc_id and net.instance_subnet_ids):
        return None
    groups = list(net.security_group_ids) or [ref("sg-sagemaker", "GroupId")]
    return {"SecurityGroupIds": groups, "Subnets": list(net.instance_subnet_ids)}


def sagemaker_tags(spec, **extra: str) -> list[dict]:
    return tag_list(ownership_tags(spec, **extra))
