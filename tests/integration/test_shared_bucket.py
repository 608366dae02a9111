"""The shared bucket as apply makes it in the emulator: private, TLS only, versioned; and its policy refuses a
plain-HTTP request (moto judges the policy; see tests/fixtures/moto_gaps.py for what the harness adds to it)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from neurondeploy.aws.transport import AwsTransport
from neurondeploy.engine.uploads import ensure_bucket
from neurondeploy.resources.model import PlanContext

BUCKET = "neurondeploy-123456789012-eu-west-1"


@pytest.fixture
def moto_tls():
    path = Path(__file__).parents[1] / "fixtures" / "moto_gaps.py"
    spec = importlib.util.spec_from_file_location("moto_gaps", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    module.patch(secure=True)


def test_the_bucket_is_made_tls_only_and_versioned_and_refuses_plain_http(aws, moto_tls):
    name = ensure_bucket(AwsTransport("eu-west-1"), "eu-west-1", PlanContext(account_id="123456789012"))
    assert name == BUCKET
    s3 = aws.client("s3", region_name="eu-west-1")
    s3.put_object(Bucket=BUCKET, Key="a/model.tar.gz", Body=b"v1")
    s3.put_object(Bucket=BUCKET, Key="a/model.tar.gz", Body=b"v2")
    versions = s3.list_object_versions(Bucket=BUCKET, Prefix="a/")["Versions"]
    assert len(versions) == 2  # an overwrite keeps the old version, for the lifecycle rule to expire
    assert s3.get_object(Bucket=BUCKET, Key="a/model.tar.gz")["Body"].read() == b"v2"

    moto_tls.patch(secure=False)  # the same request as if sent without TLS
    with pytest.raises(ClientError) as refused:
        s3.get_object(Bucket=BUCKET, Key="a/model.tar.gz")
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403


def test_an_existing_bucket_is_left_as_it_is(aws):
    s3 = aws.client("s3", region_name="eu-west-1")
    s3.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
    ensure_bucket(AwsTransport("eu-west-1"), "eu-west-1", PlanContext(account_id="123456789012"))
    with pytest.raises(ClientError, match="NoSuchBucketPolicy"):
        s3.get_bucket_policy(Bucket=BUCKET)
