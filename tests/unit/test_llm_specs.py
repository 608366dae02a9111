"""Where an LLM spec's model comes from: an hf_model_id, a local directory, an S3 model.tar.gz or a training job;
what each means for the endpoint's model data and the container's SM_ON_MODEL."""

from __future__ import annotations

from pathlib import Path

import pytest

from neurondeploy.errors import NeurondeployError
from neurondeploy.planner.context import plan_context
from neurondeploy.resources.sagemaker_endpoint import create_model_request
from neurondeploy.specs import parse_spec

TEMPLATE = (Path(__file__).parents[2] / "templates" / "tiny-lm-serve-local.yaml").read_text()
LOCAL = "path: ../.neurondeploy/train/tiny-lm/model"


def spec_with(source: str, container: str = "hf-vllm"):
    text = TEMPLATE.replace(LOCAL, source).replace("kind: hf-vllm", f"kind: {container}")
    if container == "neurondeploy":
        text = text.replace("task: text-generation", "task: feature-extraction")
    return parse_spec(text, file="spec.yaml")


@pytest.mark.parametrize(
    ("source", "model_data", "sm_on_model"),
    [
        ("hf_model_id: meta-llama/Llama-3.1-8B-Instruct", None, "meta-llama/Llama-3.1-8B-Instruct"),
        ("s3_uri: s3://models-bucket/tiny/model.tar.gz", "s3://models-bucket/tiny/model.tar.gz", "/opt/ml/model"),
        (
            "training_job: tiny-lm-20261204T170000Z",
            "s3://resolved-at-apply/tiny-lm-20261204T170000Z/output/model.tar.gz",
            "/opt/ml/model",
        ),
    ],
)
def test_each_source_gives_the_container_its_model(source, model_data, sm_on_model):
    loaded = spec_with(source)
    container = create_model_request(loaded.spec, plan_context(loaded, account_id="123456789012"))["PrimaryContainer"]
    assert container.get("ModelDataUrl") == model_data and container["Environment"]["SM_ON_MODEL"] == sm_on_model


def test_a_local_directory_is_uploaded_as_model_data():
    loaded = spec_with(LOCAL)
    container = create_model_request(loaded.spec, plan_context(loaded, account_id="123456789012"))["PrimaryContainer"]
    assert container["ModelDataUrl"].startswith("s3://neurondeploy-123456789012-us-east-1/tiny-lm-serve/artifact/")
    assert container["Environment"]["SM_ON_MODEL"] == "/opt/ml/model"


@pytest.mark.parametrize(
    ("source", "container", "message"),
    [
        ("s3_uri: s3://models-bucket/tiny/model.tar.gz", "neurondeploy", "download it and give model.path"),
        ("training_job: job-1", "neurondeploy", "download it and give model.path"),
        ("s3_uri: s3://models-bucket/tiny/model.bin", "hf-vllm", "model.s3_uri"),
        ("training_job: not_a_job_name", "hf-vllm", "model.training_job"),
        ("factory: pkg.mod:fn", "hf-vllm", "loads a Hugging Face model itself"),
        (LOCAL + "\n  hf_model_id: meta-llama/x", "hf-vllm", "give exactly one of"),
    ],
)
def test_sources_a_container_cannot_take_are_refused_in_one_line(source, container, message):
    with pytest.raises(NeurondeployError, match=message):
        spec_with(source, container)
