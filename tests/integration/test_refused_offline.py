"""A request AWS would refuse by a rule botocore does not model stops apply before its first change (through the CLI,
against a moto server): it used to be sent half-way through, after the VPC, subnets and gateways were made."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.cli import run_cli
from support.ec2_deployment import apply_args, counts

from neurondeploy.engine.state import StateStore

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("cpu_standin")]


def test_apply_of_a_load_balancer_named_internal_changes_nothing(aws, world, artifact, tmp_path):
    loaded, zone = world
    spec = tmp_path / "internal.yaml"
    spec.write_text(Path(loaded.source.file).read_text().replace("name: minilm-web", "name: internal-web"))
    args = apply_args(loaded, artifact)
    args[1] = str(spec)
    before = counts(aws, zone)
    run = run_cli(*args, state=tmp_path / "state.db")
    assert run.returncode == 3 and "Traceback" not in run.stderr, run.stderr
    (line,) = [line for line in run.stderr.strip().splitlines() if line.startswith("error")]
    assert "elbv2:CreateLoadBalancer refused offline" in line and "cannot begin with 'internal-'" in line, line
    assert counts(aws, zone) == before
    buckets = aws.client("s3").list_buckets()["Buckets"]
    assert buckets == []  # not even the shared bucket, the claim or the artifact
    assert StateStore(tmp_path / "state.db").get("internal-web") is None
