"""The artifact ↔ target gate: apply refuses an artifact the deployment's instances cannot run, in one line with
the fix, before anything is uploaded or created (against a moto server over HTTP, through the CLI)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from support.ec2_deployment import REPO

from neurondeploy.compiler.artifact import ArtifactError, read_manifest
from neurondeploy.planner.artifact_target import CPU_STANDIN_ENV, artifact_target, gate_artifact
from neurondeploy.specs import load_spec

pytestmark = pytest.mark.integration
SAGEMAKER = REPO / "templates" / "minilm-sagemaker.yaml"
EC2 = REPO / "templates" / "minilm-ec2-alb.yaml"


@pytest.mark.parametrize("template", [SAGEMAKER, EC2], ids=["ml.inf2", "inf2"])
def test_a_cpu_artifact_is_refused_for_inf2_before_anything_is_uploaded_or_created(
    aws, tmp_path, artifact, template, monkeypatch
):
    monkeypatch.delenv(CPU_STANDIN_ENV, raising=False)
    command = [sys.executable, "-m", "neurondeploy.cli", "apply", str(template), "--artifact", str(artifact), "--yes"]
    command += ["--state", str(tmp_path / "state.db")]
    done = subprocess.run(command, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert done.returncode == 3, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "is a cpu trace" in lines[0] and "runs only Neuron artifacts" in lines[0]
    assert f"fix: compile it on Neuron with `neurondeploy compile {template} --remote`" in lines[0]
    assert aws.client("s3").list_buckets()["Buckets"] == []
    assert aws.client("sagemaker").list_models()["Models"] == []
    assert (
        aws.client("ec2").describe_vpcs(Filters=[{"Name": "tag-key", "Values": ["neurondeploy:deployment"]}])["Vpcs"]
        == []
    )
    assert not (tmp_path / "state.db").exists() or "minilm" not in (tmp_path / "state.db").read_bytes().decode(
        "latin-1"
    )


def test_the_gate_checks_target_and_sdk_and_lets_a_declared_stand_in_through(artifact):
    spec = load_spec(SAGEMAKER).spec
    manifest = read_manifest(artifact)
    assert artifact_target(spec).runtime == "neuron" and artifact_target(spec).target == "inf2"
    notice = gate_artifact(spec, manifest, where="a", allow_cpu_standin=True)
    assert notice and CPU_STANDIN_ENV in notice
    neff = manifest.model_copy(update={"backend": "neuron"})
    assert gate_artifact(spec, neff, where="a", allow_cpu_standin=False) is None
    with pytest.raises(ArtifactError, match="compiled for target trn1, not inf2"):
        gate_artifact(spec, neff.model_copy(update={"target": "trn1"}), where="a", allow_cpu_standin=False)
    older = neff.model_copy(update={"versions": {**neff.versions, "neuron_sdk": "2.21.0"}})
    with pytest.raises(ArtifactError, match="Neuron SDK 2.21.0") as refused:
        gate_artifact(spec, older, where="a", allow_cpu_standin=False)
    assert "neuron_sdk_version" in refused.value.hint
    # the stand-in never excuses another target
    with pytest.raises(ArtifactError, match="target trn1"):
        gate_artifact(spec, manifest.model_copy(update={"target": "trn1"}), where="a", allow_cpu_standin=True)
