"""boto3 is reached only through neurondeploy.aws.transport: no other module imports it, so every call the cache,
`invoke` and the S3 state make is checked, logged and seen by the IAM policy scan."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from neurondeploy.aws.iam_policy import PACKAGE, _literal_calls, iam_action, render

REPO = Path(__file__).parents[2]


def allowed_actions() -> set[str]:
    return {action for statement in json.loads(render())["Statement"] for action in statement["Action"]}


def calls_in(relative: str) -> set[tuple[str, str]]:
    tree = ast.parse((PACKAGE / relative).read_text())
    return {(service, name) for kind, service, name in _literal_calls(tree) if kind == "operation"}


def test_only_the_transport_imports_boto3():
    importers = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            if any(name == "boto3" or name.startswith("boto3.") for name in names):
                importers.append(path.relative_to(PACKAGE).as_posix())
    assert sorted(set(importers)) == ["aws/transport.py"]


def test_invoke_endpoint_is_in_the_policy():
    assert ("sagemaker-runtime", "InvokeEndpoint") in calls_in("serving/client.py")
    assert "sagemaker:InvokeEndpoint" in allowed_actions()
    assert "sagemaker:InvokeEndpoint" in (REPO / "infra" / "iam-policy.json").read_text()


def test_the_cache_s3_calls_are_in_the_policy():
    cache_calls = calls_in("compiler/cache.py")
    assert {
        ("s3", op) for op in ("GetObject", "PutObject", "DeleteObject", "DeleteObjects", "ListObjectsV2")
    } <= cache_calls
    actions = {iam_action(service, operation) for service, operation in cache_calls}
    assert actions == {"s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:ListBucket"}
    assert actions <= allowed_actions()


def test_the_s3_state_calls_are_in_the_policy():
    actions = {iam_action(service, operation) for service, operation in calls_in("engine/state_s3.py")}
    assert actions == {"s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:ListBucket"}
    assert actions <= allowed_actions()


@pytest.fixture
def stubbed_runtime(monkeypatch):
    """The transport's sagemaker-runtime client, answering from a botocore Stubber (nothing is sent)."""
    import boto3
    from botocore.stub import Stubber

    from neurondeploy.aws.transport import AwsTransport

    client = boto3.client(
        "sagemaker-runtime", region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    stubber = Stubber(client)
    monkeypatch.setattr(AwsTransport, "client", lambda self, service: client)
    with stubber:
        yield stubber


def test_invoke_error_names_the_endpoint_with_aws_code_and_message(stubbed_runtime):
    from neurondeploy.serving.client import InvokeError, invoke

    stubbed_runtime.add_client_error(
        "invoke_endpoint",
        service_error_code="ValidationError",
        service_message="Endpoint e of account 1 not found.",
        http_status_code=400,
    )
    with pytest.raises(InvokeError) as caught:
        invoke("sagemaker:e", b'{"inputs": ["x"]}', region="us-east-1")
    assert caught.value.message == "sagemaker endpoint e: ValidationError: Endpoint e of account 1 not found."
    assert caught.value.hint == "check the endpoint name, region and that it is InService"


def test_invoke_without_any_region_says_so(monkeypatch, tmp_path):
    from neurondeploy.serving.client import InvokeError, invoke

    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_DEFAULT_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    with pytest.raises(InvokeError) as caught:
        invoke("sagemaker:e", b'{"inputs": ["x"]}')
    assert caught.value.message == "sagemaker endpoint e: You must specify a region."
    assert caught.value.hint == "check AWS credentials and region"
