"""Fixtures the integration tests share (their helpers are in tests/support)."""

from __future__ import annotations

import pytest
from support import ec2_deployment, sagemaker


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    """A small CPU-compiled artifact (backend cpu, target inf2), built once per module."""
    return ec2_deployment.build_artifact(tmp_path_factory.mktemp("artifact"))


@pytest.fixture
def world(aws, tmp_path):
    """The EC2 + ALB + DNS + TLS template pointed at a new hosted zone, with a DLAMI parameter: (loaded, zone)."""
    return ec2_deployment.prepare_world(aws, tmp_path)


@pytest.fixture
def sagemaker_world(aws, monkeypatch):
    """moto patched for SageMaker endpoints on ml.inf2, our serving image in ECR; the ``aws`` fixture."""
    return sagemaker.prepare(aws, monkeypatch)
