"""What a deployment wrote into the shared bucket under its own prefix (``<name>/``): the artifact or model.tar.gz,
neurondeploy's wheel and its constraints, the training or compile job's source, the VPC's flow logs. `destroy`
deletes them with the deployment, every version of each (the bucket is versioned: a plain DeleteObject only hides
an object behind a delete marker, and its bytes stay billed until the lifecycle expires them).

A training job's results (``<name>/output/``: model.tar.gz, output.tar.gz) are kept unless asked: they are what
the money was spent on. The compile cache (``compile-cache/``) and the claims (``claims/``) are shared by every
deployment of the account and region, not this one's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from neurondeploy.aws.errors import is_s3_missing_bucket
from neurondeploy.aws.paging import Paged
from neurondeploy.aws.transport import AwsCallError, AwsTransport

RESULTS = "output/"  # under the deployment's prefix: what a training job produced
DELETE_BATCH = 1000  # DeleteObjects takes at most 1000 keys per request (S3 API reference, DeleteObjects)


@dataclass
class BucketCleanup:
    bucket: str
    prefix: str
    deleted: int = 0  # objects (every version of each counted once)
    kept: list[str] = field(default_factory=list)  # keys left on purpose (training results, --keep-artifacts)
    errors: list[str] = field(default_factory=list)


def _versions(transport: AwsTransport, bucket: str, prefix: str) -> list[dict]:
    """Every version and delete marker under ``prefix``: {Key, VersionId}."""
    found: list[dict] = []
    params = {"Bucket": bucket, "Prefix": prefix}
    for page in Paged(transport).call("s3", "ListObjectVersions", params):
        for item in page.get("Versions", []) + page.get("DeleteMarkers", []):
            found.append({"Key": item["Key"], "VersionId": item["VersionId"]})
    return found


def delete_deployment_objects(
    transport: AwsTransport, bucket: str, name: str, *, keep_artifacts: bool = False, keep_results: bool = True
) -> BucketCleanup:
    """Delete every version of every object under ``<name>/`` in ``bucket`` but the kept ones; a bucket that does
    not exist holds nothing. Failures are in ``errors``, not raised: the deployment itself is gone by now."""
    cleanup = BucketCleanup(bucket, f"{name}/")
    try:
        versions = _versions(transport, bucket, cleanup.prefix)
    except AwsCallError as exc:
        if not is_s3_missing_bucket(exc):
            cleanup.errors.append(f"listing s3://{bucket}/{cleanup.prefix}: {exc.message}")
        return cleanup
    doomed = []
    for version in versions:
        relative = version["Key"][len(cleanup.prefix) :]
        if keep_artifacts or (keep_results and relative.startswith(RESULTS)):
            cleanup.kept.append(version["Key"])
        else:
            doomed.append(version)
    cleanup.kept = sorted(set(cleanup.kept))
    failed: set[str] = set()
    for start in range(0, len(doomed), DELETE_BATCH):
        batch = doomed[start : start + DELETE_BATCH]
        try:
            answer = transport.call(
                "s3", "DeleteObjects", {"Bucket": bucket, "Delete": {"Objects": batch, "Quiet": True}}
            )
        except AwsCallError as exc:
            cleanup.errors.append(f"deleting {len(batch)} objects under s3://{bucket}/{cleanup.prefix}: {exc.message}")
            failed |= {item["Key"] for item in batch}
            continue
        for error in answer.get("Errors", []):
            cleanup.errors.append(f"s3://{bucket}/{error.get('Key')}: {error.get('Code')}: {error.get('Message')}")
            failed.add(error.get("Key"))
    cleanup.deleted = len({version["Key"] for version in doomed} - failed)
    return cleanup
