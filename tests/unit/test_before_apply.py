"""`plan`'s "before apply" lines (planner/before_apply.py): what a newcomer otherwise meets as one failed apply after
another: where the Neuron artifact comes from on this machine and what the job that makes it costs, the Service
Quotas the account needs, and what apply uploads."""

from __future__ import annotations

from pathlib import Path

from support.cli import run_cli

from neurondeploy import catalog
from neurondeploy.planner.plan import build_plan
from neurondeploy.planner.quotas import quota_needs
from neurondeploy.specs import load_spec

TEMPLATES = Path(__file__).parents[2] / "templates"
FAKE_NEURON = Path(__file__).parents[1] / "fixtures" / "fake_neuron"


def test_an_encoder_on_sagemaker_says_compile_remote_its_price_quotas_and_the_upload():
    loaded = load_spec(TEMPLATES / "minilm-sagemaker.yaml")
    lines = [step.what for step in build_plan(loaded).before_apply]
    price = catalog.price_per_hour(catalog.get_instance("ml.trn1.2xlarge"), platform="sagemaker")
    (job,) = [line for line in lines if "compile --remote" in line and "runs a SageMaker job" in line]
    assert "this machine has no Neuron SDK" in job and f"${price:,.2f}/hour" in job and "ml.trn1.2xlarge" in job
    assert any('"ml.trn1.2xlarge for training job usage"' in line for line in lines)  # the compile job's quota
    for need in quota_needs(loaded.spec):  # the endpoint's, as apply's pre-flight reads it
        assert any(need.quota_name in line and f"needs {need.need} {need.unit}" in line for line in lines)
    assert any(line.startswith("apply uploads model.tar.gz") for line in lines)


def test_with_the_neuron_sdk_here_the_artifact_is_compiled_here(monkeypatch):
    monkeypatch.syspath_prepend(str(FAKE_NEURON))  # torch_neuronx importable, as on a Neuron host
    lines = [step.what for step in build_plan(load_spec(TEMPLATES / "minilm-ec2-alb.yaml")).before_apply]
    assert any(line.startswith("the Neuron artifact: compiled here") for line in lines)
    assert not any("runs a SageMaker job" in line for line in lines)
    assert any("Running On-Demand Inf instances" in line and "vCPUs" in line for line in lines)
    assert any("the instances download them at boot" in line for line in lines)


def test_an_llm_names_its_export_host_and_training_names_train():
    llm = [step.what for step in build_plan(load_spec(TEMPLATES / "llama3-8b-vllm-sagemaker.yaml")).before_apply]
    assert any(line.startswith("the exported model:") and "ml.trn1.32xlarge" in line for line in llm)
    training = build_plan(load_spec(TEMPLATES / "llama-pretrain-trn1-multinode.yaml")).before_apply
    (quota,) = [step for step in training if step.check == "quota"]
    assert "spot training job usage" in quota.what and "train checks it first" in quota.what
    assert "request-service-quota-increase --service-code sagemaker" in quota.commands[0]
    (channel,) = [step for step in training if step.check == "channel"]  # its data, with the command that puts it
    assert channel.field == "inputs.train.s3_uri" and channel.commands[0].startswith("aws s3 sync DIR s3://")


def test_plan_prints_them_before_the_resources():
    result = run_cli("plan", str(TEMPLATES / "minilm-sagemaker.yaml"))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.index("before apply:") < out.index("+ execution-role") and "compile --remote" in out
