"""The SM_VLLM_* convention as AWS's vLLM SageMaker images implement it: each case is one of AWS's own, from
aws/deep-learning-containers test/vllm/test_sagemaker_args.py at dceae13291323f0985f5e90923f4b332c387af6a (the
tests of scripts/docker/vllm/sagemaker_args.py), as an environment and the arguments vLLM gets. Our launcher
(neurondeploy/serving/sm_vllm.py) must build the same."""

from __future__ import annotations

import json

import pytest

from neurondeploy.serving.sm_vllm import vllm_arguments

ADAPTERS = [
    {"name": "translation-v1", "path": "/opt/ml/model/loras/translation-v1"},
    {"name": "translation-v2", "path": "/opt/ml/model/loras/translation-v2"},
]
SPECULATIVE = '{"method": "qwen3_5_mtp", "num_speculative_tokens": 1}'
TEMPLATE = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
ORIGINS = '["https://a.example","https://b.example"]'

# (environment, what follows --port 8080: the options in sorted order of their variables)
CASES = {
    "true is the flag alone (AWS's documented SM_VLLM_ENFORCE_EAGER=true)": (
        {"SM_VLLM_ENFORCE_EAGER": "true"},
        ["--enforce-eager"],
    ),
    "false leaves the flag out": ({"SM_VLLM_ENABLE_LORA": "false"}, []),
    "an empty value is the flag alone": ({"SM_VLLM_ENABLE_LORA": ""}, ["--enable-lora"]),
    "a JSON list is one value per element": (
        {"SM_VLLM_SERVED_MODEL_NAME": '["primary","alias"]'},
        ["--served-model-name", "primary", "alias"],
    ),
    "numbers in a list become text": (
        {"SM_VLLM_CUDAGRAPH_CAPTURE_SIZES": "[1, 2, 4]"},
        ["--cudagraph-capture-sizes", "1", "2", "4"],
    ),
    "a list of objects is one compact JSON value each": (
        {"SM_VLLM_LORA_MODULES": json.dumps(ADAPTERS)},
        ["--lora-modules", *[json.dumps(a, separators=(",", ":")) for a in ADAPTERS]],
    ),
    "whitespace-separated objects are one value each": (
        {"SM_VLLM_LORA_MODULES": '{"name":"a","path":"/loras/a"} {"name":"b","path":"/loras/b"}'},
        ["--lora-modules", '{"name":"a","path":"/loras/a"}', '{"name":"b","path":"/loras/b"}'],
    ),
    "one object stays as written": ({"SM_VLLM_SPECULATIVE_CONFIG": SPECULATIVE}, ["--speculative-config", SPECULATIVE]),
    "an empty list leaves the flag out": ({"SM_VLLM_CUSTOM_OPS": "[]"}, []),
    "a list vLLM reads as one value stays one": ({"SM_VLLM_ALLOWED_ORIGINS": ORIGINS}, ["--allowed-origins", ORIGINS]),
    "a Jinja template is not JSON": ({"SM_VLLM_CHAT_TEMPLATE": TEMPLATE}, ["--chat-template", TEMPLATE]),
    "malformed JSON passes as written": (
        {"SM_VLLM_LORA_MODULES": '[{"name":"a","path":}]'},
        ["--lora-modules", '[{"name":"a","path":}]'],
    ),
    "name=path passes as written": (
        {"SM_VLLM_LORA_MODULES": "translation-v1=/loras/translation-v1"},
        ["--lora-modules", "translation-v1=/loras/translation-v1"],
    ),
    "other variables are not options": (
        {"PATH": "/usr/bin", "HF_TOKEN": "x", "SM_VLLM_TENSOR_PARALLEL_SIZE": "8"},
        [
            "--tensor-parallel-size",
            "8",
        ],
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_options_are_built_as_aws_builds_them(case):
    environ, options = CASES[case]
    assert vllm_arguments(environ, model_dir="/nonexistent") == ["--port", "8080", *options]


def test_the_model_is_sm_vllm_model_else_the_model_directory_else_hf_model_id(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    explicit = vllm_arguments({"SM_VLLM_MODEL": "Qwen/Qwen3-8B", "HF_MODEL_ID": "x"}, model_dir=str(tmp_path))
    assert explicit == ["--port", "8080", "--model", "Qwen/Qwen3-8B"]
    assert vllm_arguments({"HF_MODEL_ID": "x"}, model_dir=str(tmp_path)) == ["--port", "8080", "--model", str(tmp_path)]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert vllm_arguments({"HF_MODEL_ID": "Qwen/Qwen3-8B"}, model_dir=str(empty)) == [
        "--port", "8080", "--model", "Qwen/Qwen3-8B",
    ]  # fmt: skip
