"""The request that puts tags on an object the sweep found (``neurondeploy import`` moves a deployment into a
state by giving its objects that state's lineage). Pure: a type, an id and tags in, one request out."""

from __future__ import annotations

from collections.abc import Mapping

from neurondeploy.resources.model import Request
from neurondeploy.resources.naming import partition, tag_list

# Types the sweep names by an EC2 id (vpc-, subnet-, sg-, igw-, rtb-, nat-, eipalloc-, lt-, sgr-, vol-, eni-)
_EC2 = "ec2:"
_SAGEMAKER_ARN_TYPES = {
    "sagemaker:endpoint": "endpoint",
    "sagemaker:endpoint-config": "endpoint-config",
    "sagemaker:model": "model",
    "sagemaker:training-job": "training-job",
}


def retag_request(kind: str, ident: str, tags: Mapping[str, str], *, region: str, account: str) -> Request | None:
    """Tags ``tags`` onto the object ``ident`` of type ``kind``; None for types that carry no tags of their own
    (Route 53 records: their ownership TXT record speaks for them; scaling targets: their endpoint does)."""
    pairs = tag_list(tags)
    if kind.startswith(_EC2):
        return Request("ec2", "CreateTags", {"Resources": [ident], "Tags": pairs})
    if kind.startswith("elbv2:") and kind != "elbv2:target-registration":
        return Request("elbv2", "AddTags", {"ResourceArns": [ident], "Tags": pairs})
    if kind == "acm:certificate":
        return Request("acm", "AddTagsToCertificate", {"CertificateArn": ident, "Tags": pairs})
    if kind == "iam:role":
        return Request("iam", "TagRole", {"RoleName": ident, "Tags": pairs})
    if kind == "iam:instance-profile":
        return Request("iam", "TagInstanceProfile", {"InstanceProfileName": ident, "Tags": pairs})
    if kind == "autoscaling:group":
        group_tags = [
            {"ResourceId": ident, "ResourceType": "auto-scaling-group", "PropagateAtLaunch": True, **pair}
            for pair in pairs
        ]
        return Request("autoscaling", "CreateOrUpdateTags", {"Tags": group_tags})
    if kind in _SAGEMAKER_ARN_TYPES:
        arn = f"arn:{partition(region)}:sagemaker:{region}:{account}:{_SAGEMAKER_ARN_TYPES[kind]}/{ident.lower()}"
        return Request("sagemaker", "AddTags", {"ResourceArn": arn, "Tags": pairs})
    return None
