"""Every AWS error code neurondeploy acts on, in one table: what each answer means for the caller.

- gone: the thing asked about does not exist (any more). A delete counts it as done, a describe as "missing".
  Some services say so only in the message of a generic validation error (Auto Scaling, SageMaker, IAM).
- retryable: something still uses the resource (ENIs of a just-deleted ALB or instance linger for minutes on AWS),
  or a scaling activity is under way: waiting may help.
- already done: a resumed request AWS had carried out the first time (its answer was lost): a rule already there,
  a gateway already attached. Keyed by operation, because the same code means failure elsewhere.
- S3 missing: no such object or bucket, as S3 says it (a HEAD answers a bare "404").
- transient: no answer at all (connection errors carry no code), throttling or server trouble that outlasted
  botocore's own retries; worth waiting out while a long-running job runs on.
- conditional-write conflict: another writer got there first (``If-None-Match: *``).
- quota missing: Service Quotas has no applied value for a quota (its default may still be readable), or does not
  know the service in this region.
"""

from __future__ import annotations

from typing import Protocol

GONE_CODES = (
    "NotFound",
    "NoSuchEntity",
    "NoSuchHostedZone",
    "ResourceNotFound",
    "LoadBalancerNotFound",
    "TargetGroupNotFound",
    "ListenerNotFound",
    "ObjectNotFoundException",
    "InvalidTarget",
    "Gateway.NotAttached",
    "InvalidAssociationID.NotFound",
    "InvalidAllocationID.NotFound",
    "InvalidPermission.NotFound",
)
GONE_MESSAGES = ("not found", "does not exist", "could not find", "cannot find")
GONE_IN_MESSAGE_CODES = ("ValidationError", "ValidationException", "InvalidParameterValue", "InvalidInput")

RETRYABLE_CODES = (
    "DependencyViolation",
    "ResourceInUse",
    "ResourceInUseException",
    "ScalingActivityInProgress",
    "InvalidNetworkInterface.InUse",
    "VolumeInUse",
    "DeleteConflict",
    "IncorrectState",
    "InvalidRouteTableID",
)

# (operation, code): only for requests with no outputs to learn from the answer.
ALREADY_DONE = frozenset(
    {
        ("AuthorizeSecurityGroupIngress", "InvalidPermission.Duplicate"),
        ("AuthorizeSecurityGroupEgress", "InvalidPermission.Duplicate"),
        ("RevokeSecurityGroupEgress", "InvalidPermission.NotFound"),
        ("RevokeSecurityGroupIngress", "InvalidPermission.NotFound"),
        ("AttachInternetGateway", "Resource.AlreadyAssociated"),
        ("CreateRoute", "RouteAlreadyExists"),
        ("AddRoleToInstanceProfile", "LimitExceeded"),  # a profile holds one role: ours, added the first time
    }
)

S3_MISSING_OBJECT_CODES = ("NoSuchKey", "404", "NotFound")
S3_MISSING_BUCKET_CODES = ("NoSuchBucket", "404", "NotFound")
S3_CONDITION_FAILED_CODES = ("PreconditionFailed", "412", "ConditionalRequestConflict")

TRANSIENT_CODES = (
    None,
    "ThrottlingException",
    "Throttling",
    "RequestTimeout",
    "ServiceUnavailable",
    "InternalFailure",
    "InternalServerError",
    "InternalError",
)

ECR_IMAGE_MISSING_CODES = ("RepositoryNotFoundException", "ImageNotFoundException")
QUOTA_MISSING_CODES = ("NoSuchResourceException",)


class CodedError(Protocol):
    code: str | None
    message: str


def is_gone(error: CodedError) -> bool:
    if error.code and any(marker in error.code for marker in GONE_CODES):
        return True
    return error.code in GONE_IN_MESSAGE_CODES and any(marker in error.message.lower() for marker in GONE_MESSAGES)


def is_retryable(error: CodedError) -> bool:
    return error.code in RETRYABLE_CODES


def is_already_done(operation: str, error: CodedError) -> bool:
    return (operation, error.code) in ALREADY_DONE


def is_s3_missing_object(error: CodedError) -> bool:
    return error.code in S3_MISSING_OBJECT_CODES


def is_s3_missing_bucket(error: CodedError) -> bool:
    return error.code in S3_MISSING_BUCKET_CODES


def is_s3_missing(error: CodedError) -> bool:
    """No such object, or no such bucket at all (a saved plan or state object that cannot be there)."""
    return is_s3_missing_object(error) or is_s3_missing_bucket(error)


def is_s3_condition_failed(error: CodedError) -> bool:
    """A conditional write lost: another writer got there first."""
    return error.code in S3_CONDITION_FAILED_CODES


def is_ecr_image_missing(error: CodedError) -> bool:
    """No such repository, or no such image in it."""
    return error.code in ECR_IMAGE_MISSING_CODES


def is_transient(error: CodedError) -> bool:
    return error.code in TRANSIENT_CODES


def is_quota_missing(error: CodedError) -> bool:
    """Service Quotas has no (applied) value for that quota, or does not know the service here."""
    return error.code in QUOTA_MISSING_CODES
