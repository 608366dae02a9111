"""Shared fixtures.

AWS: tests talk to a real moto server over HTTP, never to in-process mocks.

* ``moto_server`` (session): one ``ThreadedMotoServer`` on 127.0.0.1 and a free port; yields its endpoint URL
  (``http://127.0.0.1:PORT``). Under pytest-xdist each worker gets its own server.
* ``aws`` (function): points boto3 at that server for one test and resets the server's state first, so every
  test starts from an empty account. It sets ``AWS_ENDPOINT_URL``, fake credentials, ``us-east-1`` and
  ``MOTO_ACM_VALIDATION_WAIT=0`` in ``os.environ`` (subprocesses the test starts inherit them), and returns an
  :class:`AwsEndpoint`::

      def test_bucket(aws):
          s3 = aws.client("s3")            # retries off: an emulator gap fails at once, not after backoff
          s3.create_bucket(Bucket="b")
          ec2 = aws.client("ec2", region_name="eu-west-1")

  Code under test that makes its own clients with ``boto3.client(...)`` reaches the same server through
  ``AWS_ENDPOINT_URL``. Known emulator gaps (moto 5.2.5) are patched in the fixtures of the tests that need them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

# moto reads this once, when it is imported (by the session's server): it must be set before that.
os.environ.setdefault("MOTO_ACM_VALIDATION_WAIT", "0")

AWS_TEST_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "MOTO_ACM_VALIDATION_WAIT": "0",
}
# A developer's real profile, session token or config must never leak into a test.
AWS_UNSET_ENV = (
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_REGION",
    "AWS_ROLE_ARN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
)


def _fixture_module(name: str):
    """A module of tests/fixtures (not a package: its modules are also put on a subprocess's PYTHONPATH)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parent / "fixtures" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def moto_server():
    """Endpoint URL of a moto server running in a thread of this test process for the whole session."""
    from moto.server import ThreadedMotoServer

    moto_gaps = _fixture_module("moto_gaps")
    moto_gaps.patch_all()  # where moto differs from AWS in what our defaults rely on (TLS-only bucket, default SG)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)  # port 0: the OS picks a free one
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@dataclass(frozen=True)
class AwsEndpoint:
    """What the ``aws`` fixture returns: the emulator's endpoint and a client factory for it."""

    endpoint_url: str
    region: str = "us-east-1"

    def client(self, service: str, **kwargs: Any):
        """A boto3 client for ``service`` on the emulator, retries off (one attempt per call)."""
        import boto3
        from botocore.config import Config

        kwargs.setdefault("region_name", self.region)
        kwargs.setdefault("endpoint_url", self.endpoint_url)
        kwargs.setdefault("config", Config(retries={"total_max_attempts": 1}))
        return boto3.client(service, **kwargs)

    def reset(self) -> None:
        """Forget every resource the emulator holds (done before each test already)."""
        import requests

        requests.post(f"{self.endpoint_url}/moto-api/reset", timeout=10).raise_for_status()

    def bootstrap(self) -> None:
        """What an administrator does once per account before anyone runs neurondeploy: create the permissions
        boundary every role neurondeploy makes carries (README, Security; apply refuses without it)."""
        boundary = Path(__file__).parents[1] / "infra" / "iam-boundary.json"
        self.client("iam").create_policy(
            PolicyName="neurondeploy-boundary", Path="/neurondeploy/", PolicyDocument=boundary.read_text()
        )


@pytest.fixture
def aws(moto_server, monkeypatch, tmp_path) -> AwsEndpoint:
    """A clean emulated AWS account for one test; env vars point boto3 (here and in subprocesses) at it."""
    for name in AWS_UNSET_ENV:
        monkeypatch.delenv(name, raising=False)
    for name, value in AWS_TEST_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    endpoint = AwsEndpoint(moto_server)
    endpoint.reset()
    endpoint.bootstrap()
    return endpoint


@pytest.fixture
def launch_template_tags(monkeypatch):
    """moto 5.2.5 gap (test-only workaround): a launch template keeps the tags it had when created, so
    DescribeLaunchTemplates does not show tags added later with CreateTags (AWS does). The moto server runs in
    this process, and the CLI subprocesses reach it over HTTP."""
    from moto.ec2.models.launch_templates import LaunchTemplate

    monkeypatch.setattr(
        LaunchTemplate, "tags", property(lambda self: self.get_tags(), lambda self, value: None), raising=False
    )


@pytest.fixture
def cpu_standin(monkeypatch):
    """Say, explicitly, that the CPU-traced artifacts of these tests stand in for NEFFs on Inf2 deployments.

    apply and serve refuse a CPU artifact for ml.inf2 / inf2 (it could never load there); tests that exercise
    the AWS flow with a CPU compile set ``NEURONDEPLOY_CPU_STANDIN=1`` through this fixture, never by default.
    Subprocesses the test starts inherit it."""
    monkeypatch.setenv("NEURONDEPLOY_CPU_STANDIN", "1")
