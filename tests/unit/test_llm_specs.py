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


def test_an_architecture_that_is_not_the_models_config_is_refused_by_validate(tmp_path):
    """A copied LLM template pointed at a small model directory kept the 8B architecture: it would be sized,
    timed and priced as the 8B. validate names each figure that differs; without the architecture it passes."""
    import json
    import subprocess
    import sys

    model = tmp_path / "tiny-llama"
    model.mkdir()
    config = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "num_hidden_layers": 2,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 1000,
        "intermediate_size": 128,
    }
    (model / "config.json").write_text(json.dumps(config))
    template = (Path(__file__).parents[2] / "templates" / "llama3-8b-vllm-local.yaml").read_text()
    copied = tmp_path / "copied.yaml"
    copied.write_text(template.replace("hf_model_id: meta-llama/Llama-3.1-8B-Instruct", f"path: {model}"))
    validate = [sys.executable, "-m", "neurondeploy.cli", "validate", str(copied)]
    refused = subprocess.run(validate, capture_output=True, text=True)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    said = " ".join((refused.stdout + refused.stderr).split())
    assert "model.architecture is not the model at" in said
    for figure in ("layers 32 (config.json: 2)", "hidden_size 4096 (config.json: 64)", "kv_heads 8 (config.json: 2)"):
        assert figure in said
    assert "remove model.architecture" in said and f"{copied}:15" in said  # file:line of the field

    lines = template.replace("hf_model_id: meta-llama/Llama-3.1-8B-Instruct", f"path: {model}").splitlines()
    start = lines.index("  architecture:")
    copied.write_text("\n".join(lines[:start] + lines[start + 8 :]) + "\n")  # the architecture removed
    passed = subprocess.run(validate, capture_output=True, text=True)
    assert "model.architecture is not the model" not in passed.stdout + passed.stderr


def test_the_precompile_warning_names_a_model_that_is_not_on_the_hub():
    """It said "has None compiled" for a model given by path: it names the model as the spec gives it."""
    from neurondeploy.planner.checks import run_checks
    from neurondeploy.specs import load_spec

    loaded = load_spec(Path(__file__).parents[2] / "templates" / "llama3-8b-vllm-sagemaker.yaml")
    text = Path(loaded.source.file).read_text()
    for source, named in (
        ("s3_uri: s3://models/llama3-8b/model.tar.gz", "deploy the model at s3://models/llama3-8b/model.tar.gz until"),
        ("training_job: llama-pretrain-20261206", "deploy the model at training job llama-pretrain-20261206 until"),
    ):
        changed = parse_spec(text.replace("hf_model_id: meta-llama/Llama-3.1-8B-Instruct", source), file="s.yaml")
        said = [f.message for f in run_checks(changed) if f.field == "deployment.container"]
        assert said and named in said[0] and "None" not in said[0], said


def test_a_model_type_the_llm_image_does_not_serve_is_said_at_validate(tmp_path):
    """The hf-vllm image's optimum-neuron serves the text-generation model types it registers (catalogued from its
    source at that version): a GPT-2 (what the train -> serve template trains today) is said before anything runs,
    a Llama is not."""
    from transformers import GPT2Config, LlamaConfig

    from neurondeploy import catalog
    from neurondeploy.planner.checks import run_checks

    template = (Path(__file__).parents[2] / "templates" / "tiny-lm-serve-local.yaml").read_text()
    vllm = catalog.known_tags("vllm")[-1]  # the newest: what a deployment gets
    said = {}
    for name, config in (
        ("gpt2", GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=100, bos_token_id=1, eos_token_id=2)),
        ("llama", LlamaConfig(num_hidden_layers=1, hidden_size=32, num_attention_heads=2, intermediate_size=64)),
    ):
        config.save_pretrained(tmp_path / name)
        text = template.replace("path: ../.neurondeploy/train/tiny-lm/model", f"path: {tmp_path / name}")
        findings = run_checks(parse_spec(text, file="s.yaml", path=tmp_path / "s.yaml"))
        said[name] = [f.message for f in findings if f.field == "model.path" and "serves text-generation" in f.message]
    assert len(said["gpt2"]) == 1 and "is gpt2" in said["gpt2"][0] and vllm.tag in said["gpt2"][0]
    assert all(model_type in said["gpt2"][0] for model_type in vllm.text_generation_models)
    assert said["llama"] == []
    assert "llama" in vllm.text_generation_models and "gpt2" not in vllm.text_generation_models
