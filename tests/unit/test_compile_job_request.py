"""The `compile --remote` job as pure data: the CreateTrainingJob request and its role, checked strictly against
botocore; a CPU instance cross-compiles (cpu_backend) and a Neuron one does not."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest
import torch

from neurondeploy.compiler.backends import NeuronBackend
from neurondeploy.errors import CatalogError
from neurondeploy.resources.model import PlanContext
from neurondeploy.resources.sagemaker_compile import (
    CROSS_COMPILE_ENV,
    CompileJob,
    compile_deployment,
    compile_job_resources,
)
from neurondeploy.resources.validation import check_request
from neurondeploy.specs import load_spec

REPO = Path(__file__).parents[2]
CTX = PlanContext(account_id="123456789012", run_id="20261204-170000", source_digest="0123456789abcdef")
KEY = "a" * 64
CACHE = "s3://neurondeploy-123456789012-us-east-1/compile-cache"


def job_and_role(instance_type: str, sdk: str = "2.21.0"):
    spec = compile_deployment(load_spec(REPO / "templates" / "minilm-sagemaker.yaml").spec)
    spec = spec.model_copy(update={"neuron_sdk_version": sdk})
    resources = compile_job_resources(spec, CTX, CompileJob(KEY, CACHE, sdk, instance_type))
    by_name = {r.name: r for r in resources}
    return by_name["compile-job"].create[0].params, by_name["execution-role"]


@pytest.mark.parametrize("instance_type", ["ml.trn1.2xlarge", "ml.c5.4xlarge"])
def test_the_request_is_valid_and_the_role_reads_the_source_and_writes_only_the_cache(instance_type):
    job, role = job_and_role(instance_type)
    check_request("sagemaker", "CreateTrainingJob", {**job, "RoleArn": "arn:aws:iam::123456789012:role/r"})
    assert job["TrainingJobName"] == "minilm-embed-compile-20261204-170000"
    hps = {k: json.loads(v) for k, v in job["HyperParameters"].items()}
    assert hps["sagemaker_program"] == "neurondeploy_compile_job.py"
    assert hps["sagemaker_submit_directory"] == (
        "s3://neurondeploy-123456789012-us-east-1/minilm-embed-compile/compile-source/sourcedir-0123456789abcdef.tar.gz"
    )
    assert hps["artifact_key"] == KEY and hps["cache_s3"] == CACHE
    cross = instance_type.startswith("ml.c5")
    assert (job["Environment"].get(CROSS_COMPILE_ENV) == "1") is cross
    assert ("VolumeSizeInGB" in job["ResourceConfig"]) is cross  # trn1 has NVMe and refuses it
    policy = json.loads(role.create[1].params["PolicyDocument"])
    writes = [s for s in policy["Statement"] if "s3:PutObject" in s["Action"]]
    assert writes and all("compile-cache/*" in r or "/output/*" in r for s in writes for r in s["Resource"])


def test_a_release_without_a_training_dlc_compiles_in_its_inference_dlc_with_its_own_steps():
    """No pytorch-training-neuronx is published after 2.30: the 2.31 job runs the 2.31 inference DLC (same
    neuronx-cc), with no training toolkit, so it unpacks the source from its channel, installs the requirements
    and runs the entry itself. The job's values are arguments, never part of the shell script."""
    job, role = job_and_role("ml.trn1.2xlarge", sdk="2.31.0")
    check_request("sagemaker", "CreateTrainingJob", {**job, "RoleArn": "arn:aws:iam::123456789012:role/r"})
    algorithm = job["AlgorithmSpecification"]
    assert algorithm["TrainingImage"].endswith("/pytorch-inference-neuronx:2.9.0-neuronx-py312-sdk2.31.0-ubuntu24.04")
    entrypoint, arguments = algorithm["ContainerEntrypoint"], algorithm["ContainerArguments"]
    assert entrypoint[:2] == ["/bin/bash", "-c"] and arguments == ["--artifact_key", KEY, "--cache_s3", CACHE]
    assert KEY not in entrypoint[2] and CACHE not in entrypoint[2] and '"$@"' in entrypoint[2]
    (channel,) = job["InputDataConfig"]
    assert channel["ChannelName"] == "code" and channel["DataSource"]["S3DataSource"]["S3Uri"].endswith(
        "/compile-source/sourcedir-0123456789abcdef.tar.gz"
    )
    assert "HyperParameters" not in job and job["Environment"]["SM_MODEL_DIR"] == "/opt/ml/model"
    policy = json.loads(role.create[1].params["PolicyDocument"])
    reads = [r for s in policy["Statement"] if "s3:GetObject" in s["Action"] for r in s["Resource"]]
    assert any("/compile-source/" in r for r in reads)
    # a release with a training DLC keeps the toolkit's contract
    trained, _ = job_and_role("ml.trn1.2xlarge", sdk="2.30.0")
    assert "ContainerEntrypoint" not in trained["AlgorithmSpecification"] and "HyperParameters" in trained


def test_a_release_without_any_dlc_is_refused_with_the_fix():
    with pytest.raises(CatalogError, match="compile --remote needs a Neuron DLC of SDK 2.32.0") as refused:
        job_and_role("ml.trn1.2xlarge", sdk="2.32.0")
    assert "neurondeploy compile" in refused.value.hint


def test_cross_compile_passes_cpu_backend_to_torch_neuronx(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "tests" / "fixtures" / "fake_neuron"))
    sys.modules.pop("torch_neuronx", None)
    fake = importlib.import_module("torch_neuronx")
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("FAKE_NEURON_LOG", str(log))
    backend = NeuronBackend(fake)
    module, inputs = torch.nn.Linear(4, 2), (torch.ones(1, 4),)
    backend.trace(module, inputs, ["--target", "inf2"], tmp_path)
    monkeypatch.setenv(CROSS_COMPILE_ENV, "1")
    backend.trace(module, inputs, ["--target", "inf2"], tmp_path)
    sys.modules.pop("torch_neuronx", None)
    assert [json.loads(line)["cpu_backend"] for line in log.read_text().splitlines()] == [False, True]
