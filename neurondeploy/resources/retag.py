"""Retaggers: the request that gives an object the sweep found this state's lineage (``neurondeploy import``
moves a deployment into a state that way). Each kind's record names its own (:attr:`Kind.retag`); these are the
ones the services share. Pure: a context and an id in, one request out."""

from __future__ import annotations

from collections.abc import Callable

from neurondeploy.resources.kinds import Retag
from neurondeploy.resources.model import Request
from neurondeploy.resources.naming import partition, tag_list


def ec2_retag(context: Retag, ident: str) -> Request:
    """Every EC2 object the sweep names by its id (vpc-, subnet-, sg-, igw-, rtb-, nat-, eipalloc-, lt-, sgr-,
    i-, vol-, eni-, fl-)."""
    return Request("ec2", "CreateTags", {"Resources": [ident], "Tags": tag_list(context.tags)})


def elbv2_retag(context: Retag, ident: str) -> Request:
    return Request("elbv2", "AddTags", {"ResourceArns": [ident], "Tags": tag_list(context.tags)})


def acm_retag(context: Retag, ident: str) -> Request:
    return Request("acm", "AddTagsToCertificate", {"CertificateArn": ident, "Tags": tag_list(context.tags)})


def iam_role_retag(context: Retag, ident: str) -> Request:
    return Request("iam", "TagRole", {"RoleName": ident, "Tags": tag_list(context.tags)})


def iam_instance_profile_retag(context: Retag, ident: str) -> Request:
    return Request("iam", "TagInstanceProfile", {"InstanceProfileName": ident, "Tags": tag_list(context.tags)})


def autoscaling_group_retag(context: Retag, ident: str) -> Request:
    group_tags = [
        {"ResourceId": ident, "ResourceType": "auto-scaling-group", "PropagateAtLaunch": True, **pair}
        for pair in tag_list(context.tags)
    ]
    return Request("autoscaling", "CreateOrUpdateTags", {"Tags": group_tags})


def sagemaker_retag(resource_type: str) -> Callable[[Retag, str], Request]:
    """SageMaker objects are named by their name; AddTags takes their ARN (``<resource_type>/<lowercase name>``)."""

    def retag(context: Retag, ident: str) -> Request:
        arn = (
            f"arn:{partition(context.region)}:sagemaker:{context.region}:{context.account}:"
            f"{resource_type}/{ident.lower()}"
        )
        return Request("sagemaker", "AddTags", {"ResourceArn": arn, "Tags": tag_list(context.tags)})

    return retag
