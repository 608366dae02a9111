"""The account's shared neurondeploy bucket, as a resource."""

from __future__ import annotations

import json

from neurondeploy.resources.model import PlanContext, Request, Resource, resource
from neurondeploy.resources.naming import MANAGED_BY, MANAGED_BY_TAG, bucket_name, partition

# Old versions of an object (an artifact or checkpoint overwritten or deleted) are kept this long, so a mistaken
# delete or overwrite can be undone, then expire: versioning alone would keep them, and bill them, forever.
NONCURRENT_DAYS = 30
# Multipart uploads an interrupted `train` or `apply` left behind (billed, invisible to ListObjects).
ABANDONED_UPLOAD_DAYS = 7


def tls_only_policy(name: str, region: str) -> str:
    """Refuses every request to the bucket that does not come over TLS, whoever sends it (the rule AWS Security
    Hub checks as S3.5: https://docs.aws.amazon.com/securityhub/latest/userguide/s3-controls.html#s3-5)."""
    arn = f"arn:{partition(region)}:s3:::{name}"
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "DenyInsecureTransport",
                    "Effect": "Deny",
                    "Principal": "*",
                    "Action": "s3:*",
                    "Resource": [arn, f"{arn}/*"],
                    "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                }
            ],
        },
        separators=(",", ":"),
    )


def shared_bucket_resource(region: str, ctx: PlanContext) -> Resource:
    """The account's neurondeploy bucket (artifacts, sources, training outputs). Shared by deployments, so it
    is not in any deployment's resources and has no delete: apply, train and compile --remote create it when
    missing. Private, TLS-only, versioned with old versions expiring."""
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
            Request("s3", "PutBucketPolicy", {"Bucket": name, "Policy": tls_only_policy(name, region)}),
            Request("s3", "PutBucketVersioning", {"Bucket": name, "VersioningConfiguration": {"Status": "Enabled"}}),
            Request(
                "s3",
                "PutBucketLifecycleConfiguration",
                {
                    "Bucket": name,
                    "LifecycleConfiguration": {
                        "Rules": [
                            {
                                "ID": "expire-old-versions-and-abandoned-uploads",
                                "Status": "Enabled",
                                "Filter": {"Prefix": ""},
                                "NoncurrentVersionExpiration": {"NoncurrentDays": NONCURRENT_DAYS},
                                "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": ABANDONED_UPLOAD_DAYS},
                            }
                        ]
                    },
                },
            ),
        ],
        (),
        description=(
            f"Shared bucket {name} for artifacts, sources and outputs of every deployment; private (public access "
            f"blocked), TLS only (bucket policy), versioned (old versions expire after {NONCURRENT_DAYS} days); "
            "made by the first apply, train or compile --remote that needs it; never destroyed"
        ),
    )


CLAIMS_PREFIX = "claims/"


def claim_key(name: str) -> str:
    return f"{CLAIMS_PREFIX}{name}.json"


def claim_request(bucket: str, name: str, body: bytes | None = None, *, only_if_absent: bool = True) -> Request:
    """The PutObject that claims deployment ``name`` (neurondeploy.engine.claims). ``If-None-Match: *``: of two
    writers exactly one succeeds (https://docs.aws.amazon.com/AmazonS3/latest/userguide/conditional-writes.html)."""
    params = {
        "Bucket": bucket,
        "Key": claim_key(name),
        "ContentType": "application/json",
        "ServerSideEncryption": "AES256",
    }
    if body is not None:
        params["Body"] = body
    if only_if_absent:
        params["IfNoneMatch"] = "*"
    return Request("s3", "PutObject", params)


def claim_resource(region: str, ctx: PlanContext, name: str) -> Resource:
    """The deployment's claim on its name, as plan shows it: in the shared bucket, written before the first create."""
    bucket = bucket_name(region, ctx)
    return resource(
        "deployment-claim",
        "s3:object",
        [claim_request(bucket, name)],
        taggable=False,
        description=(
            f"Claim on the name {name} in this account and region (s3://{bucket}/{claim_key(name)}, naming this "
            "state's lineage): written once, before the first create, only if absent; another state's apply is "
            "refused; destroy deletes it, import takes it over"
        ),
    )
