"""One claim per deployment name in an account and region, so two states never both build one deployment.

The ownership sweep (:mod:`neurondeploy.engine.ownership`) sees what another state has made. Two applies started
together both see nothing there, and both would create. The claim closes that window. Before its first create, an
apply writes ``s3://<shared bucket>/claims/<name>.json`` with a conditional PutObject (``If-None-Match: *``,
:func:`~neurondeploy.resources.s3.claim_request`). Of two writers exactly one succeeds; the other gets 412
Precondition Failed (https://docs.aws.amazon.com/AmazonS3/latest/userguide/conditional-writes.html). The object names
the state's lineage. An apply of another lineage is refused with nothing made. ``destroy`` deletes the claim with the
deployment. ``import`` rewrites it with the importing state's lineage: that is how a claim whose state is lost is
taken over.
"""

from __future__ import annotations

import json
import socket
import time

from neurondeploy.aws.errors import is_s3_condition_failed, is_s3_missing
from neurondeploy.aws.transport import AwsCallError, AwsTransport
from neurondeploy.engine.ownership import OwnedElsewhere
from neurondeploy.resources.model import PlanContext
from neurondeploy.resources.naming import bucket_name
from neurondeploy.resources.s3 import claim_key, claim_request

ATTEMPTS = 3  # a lost conditional write is read back; a claim deleted in between is written again


def shared_bucket_of(transport: AwsTransport) -> str:
    """The bucket that holds the claims of the transport's account and region (the shared bucket)."""
    account = transport.call("sts", "GetCallerIdentity", {})["Account"]
    return bucket_name(transport.region, PlanContext(account_id=account))


def read_claim(transport: AwsTransport, bucket: str, name: str) -> dict | None:
    """The claim on ``name``, or None when there is none (nor any bucket yet)."""
    try:
        body = transport.call("s3", "GetObject", {"Bucket": bucket, "Key": claim_key(name)})["Body"].read()
    except AwsCallError as exc:
        if is_s3_missing(exc):
            return None
        raise
    try:
        claim = json.loads(body)
    except ValueError:
        claim = None
    return claim if isinstance(claim, dict) else {"lineage": None}


def _put_claim(transport: AwsTransport, bucket: str, name: str, lineage: str, state: str, *, only_if_absent: bool):
    body = {"deployment": name, "lineage": lineage, "state": state, "host": socket.gethostname(), "since": time.time()}
    request = claim_request(bucket, name, json.dumps(body).encode(), only_if_absent=only_if_absent)
    transport.call(request.service, request.operation, request.params)


def take_claim(transport: AwsTransport, bucket: str, name: str, lineage: str, state: str) -> bool:
    """Claim ``name`` for the state of ``lineage`` (its location ``state``, shown to whoever is refused). True if
    this call wrote the claim, False if the state held it already; raises :class:`OwnedElsewhere` when another
    state holds it. Reads first, so an apply of a deployment it already claims writes nothing."""
    for _ in range(ATTEMPTS):
        claim = read_claim(transport, bucket, name)
        if claim is not None:
            if claim.get("lineage") == lineage:
                return False
            since = time.strftime("%Y-%m-%d %H:%M", time.gmtime(claim.get("since") or 0))
            raise OwnedElsewhere(
                f"deployment {name} is claimed by another state (lineage {claim.get('lineage')}, "
                f"{claim.get('state') or 'location unknown'}, on {claim.get('host') or 'an unknown host'} since "
                f"{since} UTC; s3://{bucket}/{claim_key(name)}): this apply changed nothing",
                f"apply with that state; if it is lost, take the deployment over with `neurondeploy import {name}`",
            )
        try:
            _put_claim(transport, bucket, name, lineage, state, only_if_absent=True)
            return True
        except AwsCallError as exc:
            if not is_s3_condition_failed(exc):
                raise
    raise OwnedElsewhere(
        f"deployment {name}: its claim kept changing while this apply read it (s3://{bucket}/{claim_key(name)})",
        "another apply of it is running: wait for it, then run this one again",
    )


def move_claim(transport: AwsTransport, bucket: str, name: str, lineage: str, state: str) -> None:
    """``import``: the deployment is this state's now, whoever claimed it."""
    _put_claim(transport, bucket, name, lineage, state, only_if_absent=False)


def release_claim(transport: AwsTransport, bucket: str, name: str, lineage: str) -> bool:
    """``destroy``: give the name back, when this state holds it. True if a claim was deleted."""
    claim = read_claim(transport, bucket, name)
    if claim is None or claim.get("lineage") != lineage:
        return False
    transport.call("s3", "DeleteObject", {"Bucket": bucket, "Key": claim_key(name)})
    return True
