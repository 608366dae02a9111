"""The account's shared neurondeploy bucket, as a resource."""

from __future__ import annotations

from neurondeploy.resources.model import PlanContext, Request, Resource, resource
from neurondeploy.resources.naming import MANAGED_BY, MANAGED_BY_TAG, bucket_name


def shared_bucket_resource(region: str, ctx: PlanContext) -> Resource:
    """The account's neurondeploy bucket (artifacts, sources, training outputs). Shared by deployments, so it
    is not in any deployment's resources and has no delete: the executor creates it when missing."""
    name = bucket_name(region, ctx)
    create = {"Bucket": name}
    if region != "us-east-1":  # us-east-1 refuses an explicit LocationConstraint
        create["CreateBucketConfiguration"] = {"LocationConstraint": region}
    return resource(
        "artifact-bucket",
        "s3:bucket",
        [
            Request("s3", "CreateBucket", create),
            Request(
                "s3",
                "PutPublicAccessBlock",
                {
                    "Bucket": name,
                    "PublicAccessBlockConfiguration": {
                        "BlockPublicAcls": True,
                        "IgnorePublicAcls": True,
                        "BlockPublicPolicy": True,
                        "RestrictPublicBuckets": True,
                    },
                },
            ),
            Request(
                "s3",
                "PutBucketTagging",
                {
                    "Bucket": name,
                    "Tagging": {
                        "TagSet": [
                            {"Key": MANAGED_BY_TAG, "Value": MANAGED_BY},
                            {"Key": "neurondeploy:scope", "Value": "shared"},
                        ]
                    },
                },
            ),
        ],
        (),
        description="Shared bucket for artifacts, sources and outputs of every deployment; never destroyed",
    )
