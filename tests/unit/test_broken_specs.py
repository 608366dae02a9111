"""A corpus of broken specs: each must give a non-zero exit, one clear line per problem naming
file:line and the field, and never a traceback — through the real CLI entry point."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from neurondeploy.cli.main import main

INFERENCE = """\
kind: inference
name: minilm
task: feature-extraction
model:
  architecture: {layers: 6, hidden_size: 384, attention_heads: 12, vocab_size: 30522}
  factory: "my_models:build"
deployment:
  platform: sagemaker
  instance_type: inf2.xlarge
"""

TRAINING = """\
kind: training
name: pretrain
entry_point: train.py
instance_type: trn1.32xlarge
instance_count: 2
distribution:
  tensor_parallel: 8
"""

LLM = """\
kind: inference
name: llm
task: text-generation
model:
  hf_model_id: org/llm-8b
  architecture:
    layers: 32
    hidden_size: 4096
    attention_heads: 32
    kv_heads: 8
    vocab_size: 128256
    intermediate_size: 14336
    gated_mlp: true
compile: {batch_sizes: [1], sequence_lengths: [4096]}
deployment:
  platform: sagemaker
  instance_type: inf2.48xlarge
  container: {kind: hf-vllm}
  tensor_parallel: 8
"""

# (case id, spec text, substring the error must contain, line the error must point at or None)
CORPUS: list[tuple[str, str | bytes, str, int | None]] = [
    ("empty file", "", "empty", None),
    ("only a comment", "# nothing\n", "empty", None),
    ("a list not a mapping", "- a\n- b\n", "must be a mapping", 1),
    ("a scalar", "hello\n", "must be a mapping", 1),
    ("malformed yaml", "kind: inference\nname: [unclosed\n", "not valid YAML", None),
    ("bad indentation", "kind: inference\n  name: x\n bad: 1\n", "not valid YAML", None),
    ("tab indentation", "kind: inference\n\tname: x\n", "not valid YAML", None),
    ("two documents", INFERENCE + "---\nkind: training\n", "more than one YAML document", 11),
    ("duplicate key", INFERENCE + "name: again\n", "key given twice", 10),
    ("missing kind", INFERENCE.replace("kind: inference\n", ""), "kind: missing", None),
    ("kind typo", INFERENCE.replace("kind: inference", "kind: inferense"), "did you mean `kind: inference`", 1),
    ("missing name", INFERENCE.replace("name: minilm\n", ""), "name: required field is missing", None),
    ("missing task", INFERENCE.replace("task: feature-extraction\n", ""), "task: required field is missing", None),
    (
        "missing model",
        INFERENCE.split("model:")[0] + "deployment:\n  instance_type: inf2.xlarge\n",
        "model: required field",
        None,
    ),
    ("unknown top-level key", INFERENCE + "regoin: us-east-1\n", "did you mean `region`", 10),
    (
        "unknown nested key",
        INFERENCE.replace("  platform: sagemaker", "  platfrom: sagemaker"),
        "did you mean `platform`",
        8,
    ),
    ("name with capitals", INFERENCE.replace("name: minilm", "name: MiniLM"), "name:", 2),
    ("name too long", INFERENCE.replace("name: minilm", "name: " + "a" * 30), "name:", 2),
    ("name with underscore", INFERENCE.replace("name: minilm", "name: mini_lm"), "name:", 2),
    ("name is a number", INFERENCE.replace("name: minilm", "name: 123"), "name:", 2),
    ("bad region", INFERENCE + "region: mars-north-1x\n", "region:", 10),
    (
        "task not allowed",
        INFERENCE.replace("task: feature-extraction", "task: translation"),
        "'translation' is not allowed",
        3,
    ),
    (
        "two model sources",
        INFERENCE.replace('  factory: "my_models:build"', '  factory: "my_models:build"\n  path: ./model'),
        "exactly one of",
        4,
    ),
    ("no model source", INFERENCE.replace('  factory: "my_models:build"\n', ""), "exactly one of", 4),
    ("factory without function", INFERENCE.replace("my_models:build", "my_models"), "wrong form", 6),
    ("batch size zero", INFERENCE + "compile:\n  batch_sizes: [0]\n", "compile.batch_sizes[0]", 11),
    ("batch size as string", INFERENCE + "compile:\n  batch_sizes: ['8']\n", "compile.batch_sizes[0]", 11),
    ("duplicate buckets", INFERENCE + "compile:\n  batch_sizes: [4, 4]\n", "duplicates", 11),
    ("optlevel out of range", INFERENCE + "compile:\n  optlevel: 4\n", "compile.optlevel", 11),
    ("auto-cast type without auto-cast", INFERENCE + "compile:\n  auto_cast_type: fp16\n", "auto_cast_type", 11),
    ("unknown auto-cast", INFERENCE + "compile:\n  auto_cast: bf16\n", "compile.auto_cast", 11),
    ("health check over the AWS limit", INFERENCE + "  health_check_timeout_s: 7200\n", "health_check_timeout_s", 10),
    (
        "download timeout under the AWS limit",
        INFERENCE + "  model_download_timeout_s: 30\n",
        "model_download_timeout_s",
        10,
    ),
    ("instance count zero", INFERENCE + "  instance_count: 0\n", "instance_count", 10),
    ("unknown instance type", INFERENCE.replace("inf2.xlarge", "inf2.xlarg"), "did you mean", 9),
    ("inf1 refused", INFERENCE.replace("inf2.xlarge", "inf1.xlarge"), "Inferentia 1", 9),
    ("gpu instance", INFERENCE.replace("inf2.xlarge", "g5.xlarge"), "deployment.instance_type", 9),
    ("TP above the cores", INFERENCE + "  tensor_parallel: 4\n", "more than the 2 NeuronCores", 10),
    (
        "TP for a traced encoder",
        INFERENCE.replace("inf2.xlarge", "inf2.24xlarge") + "  tensor_parallel: 2\n",
        "not legal",
        10,
    ),
    (
        "autoscaling min above max",
        INFERENCE + "  autoscaling: {min_instances: 3, max_instances: 2}\n",
        "min_instances",
        10,
    ),
    (
        "count outside autoscaling",
        INFERENCE + "  instance_count: 5\n  autoscaling: {min_instances: 1, max_instances: 2}\n",
        "outside autoscaling",
        10,
    ),
    ("tls on sagemaker", INFERENCE + "tls: {enabled: true}\n", "apply to platform ec2", 10),
    (
        "tls without dns",
        INFERENCE.replace("platform: sagemaker", "platform: ec2") + "tls: {enabled: true}\n",
        "needs dns",
        10,
    ),
    (
        "dns record outside zone",
        INFERENCE.replace("platform: sagemaker", "platform: ec2")
        + "dns:\n  hosted_zone_id: Z123ABC\n  zone_name: example.com\n  record_name: api.example.org\n",
        "not inside zone",
        13,
    ),
    (
        "hf container on ec2",
        INFERENCE.replace("task: feature-extraction", "task: text-generation")
        .replace('  factory: "my_models:build"', "  hf_model_id: org/model")
        .replace("platform: sagemaker", "platform: ec2")
        + "  container: {kind: hf-vllm}\n",
        "runs on SageMaker only",
        10,
    ),
    (
        "one AZ behind an ALB",
        INFERENCE.replace("platform: sagemaker", "platform: ec2") + "network: {availability_zones: 1}\n",
        "2 or more availability zones",
        10,
    ),
    (
        "existing VPC with one public subnet",
        INFERENCE.replace("platform: sagemaker", "platform: ec2")
        + "network:\n  vpc_id: vpc-0123456789abcdef0\n  public_subnet_ids: [subnet-0123456789abcdef0]\n",
        "2 or more public subnets",
        12,
    ),
    (
        "VPC too small for the AZs",
        INFERENCE + "network: {vpc_cidr: 10.0.0.0/24, availability_zones: 6}\n",
        "too small",
        10,
    ),
    ("tag with forbidden characters", INFERENCE + "tags: {team: 'a;b'}\n", "tags", 10),
    (
        "Mixtral-8x7B (all 8 experts resident) on 32 GB",
        LLM.replace("inf2.48xlarge", "inf2.8xlarge")
        .replace("tensor_parallel: 8", "tensor_parallel: 2")
        .replace("    gated_mlp: true", "    gated_mlp: true\n    experts: 8\n    experts_per_token: 2")
        .replace("vocab_size: 128256", "vocab_size: 32000"),
        "does not fit: needs 45",
        19,
    ),
    (
        "weight quantization with our traced server",
        INFERENCE.replace('  factory: "my_models:build"', '  factory: "my_models:build"\n  quantization: int8'),
        "model.quantization",
        7,
    ),
    (
        "LLM KV cache does not fit",
        LLM.replace("inf2.48xlarge", "inf2.8xlarge")
        .replace("tensor_parallel: 8", "tensor_parallel: 2")
        .replace("batch_sizes: [1]", "batch_sizes: [64]"),
        "does not fit",
        17,
    ),
    ("instance not offered in the region", TRAINING + "region: eu-west-1\n", "not offered in eu-west-1", 4),
    ("image not published in the region", LLM + "region: eu-north-1\n", "eu-north-1", 18),
    ("reserved tag", INFERENCE + "tags: {'neurondeploy:deployment': x}\n", "reserved prefix", 10),
    ("bad vpc id", INFERENCE + "network:\n  vpc_id: vpc-XYZ\n", "network.vpc_id", 11),
    (
        "subnets without vpc",
        INFERENCE + "network:\n  public_subnet_ids: [subnet-0123456789abcdef0]\n",
        "without vpc_id",
        10,
    ),
    ("bad cidr", INFERENCE + "network:\n  allowed_cidrs: [10.0.0.0/33]\n", "not a CIDR", 11),
    ("bad role arn", INFERENCE + "iam:\n  role_arn: my-role\n", "iam.role_arn", 11),
    (
        "text generation with our container",
        INFERENCE.replace("task: feature-extraction", "task: text-generation") + "  container: {kind: neurondeploy}\n",
        "vllm-neuron",
        10,
    ),
    (
        "text generation of a factory (vllm-neuron by default)",
        INFERENCE.replace("task: feature-extraction", "task: text-generation"),
        "container vllm-neuron loads a Hugging Face model itself",
        4,
    ),
    ("trn1 volume on endpoint", INFERENCE.replace("inf2.xlarge", "trn1.2xlarge") + "  volume_gib: 100\n", "NVMe", 10),
    ("SDK without torch-neuronx", INFERENCE + "neuron_sdk_version: 2.32.0\n", "neuron_sdk_version", 10),
    (
        "model does not fit",
        INFERENCE.replace(
            "{layers: 6, hidden_size: 384, attention_heads: 12, vocab_size: 30522}",
            "{layers: 80, hidden_size: 8192, attention_heads: 64, vocab_size: 128256}",
        ),
        "does not fit",
        9,
    ),
    ("binary garbage", b"\x89PNG\r\n\x1a\n\xff\xfe\x00 binary", "not UTF-8", None),
    ("NUL bytes", "kind: inference\x00\n", "NUL", None),
    # training
    ("inf2 for training", TRAINING.replace("trn1.32xlarge", "inf2.48xlarge"), "inference chip", 4),
    (
        "multi-node without EFA",
        TRAINING.replace("trn1.32xlarge", "trn1.2xlarge").replace("tensor_parallel: 8", "tensor_parallel: 2"),
        "needs EFA",
        5,
    ),
    ("TP×PP×DP wrong", TRAINING + "  data_parallel: 4\n", "TP×PP×DP", 8),
    ("pre-compile job with no cache to fill", TRAINING + "parallel_compile: true\n", "compile_cache_uri is not set", 8),
    ("training TP illegal", TRAINING.replace("tensor_parallel: 8", "tensor_parallel: 4"), "not legal", 7),
    ("spot without checkpoints", TRAINING + "spot: {enabled: true, max_wait_s: 200000}\n", "checkpoint.s3_uri", 8),
    (
        "spot wait below runtime",
        TRAINING
        + "checkpoint: {s3_uri: 's3://bkt-a/ck'}\nspot: {enabled: true, max_wait_s: 60}\nmax_runtime_s: 3600\n",
        "below max_runtime_s",
        9,
    ),
    ("microbatches without PP", TRAINING + "  microbatches: 4\n", "needs pipeline_parallel", 8),
    ("bad s3 uri", TRAINING + "compile_cache_uri: /tmp/cache\n", "compile_cache_uri", 8),
    ("training on an old SDK path", TRAINING + "neuron_sdk_version: 2.30.0\n", "neuron_sdk_version", 8),
    ("hyperparameter as a list", TRAINING + "hyperparameters: {lr: [1, 2]}\n", "hyperparameters.lr", 8),
    (
        "training does not fit",
        TRAINING + "architecture: {layers: 80, hidden_size: 8192, attention_heads: 64, vocab_size: 128256}\n",
        "does not fit",
        7,
    ),
    (
        "training activations do not fit",
        TRAINING + "architecture: {layers: 32, hidden_size: 4096, attention_heads: 32, kv_heads: 8, vocab_size: 128256,"
        " intermediate_size: 14336, gated_mlp: true}\n"
        + "hyperparameters: {global_batch_size: 1024, sequence_length: 4096}\n",
        "activations (128 × 4096 tokens per micro-batch",
        7,
    ),
]


@pytest.mark.parametrize("text", [INFERENCE, TRAINING, LLM], ids=["inference", "training", "llm"])
def test_the_bases_the_corpus_breaks_are_valid(tmp_path, capsys, text):
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    assert main(["validate", str(spec)]) == 0, capsys.readouterr().err


def test_heads_not_divisible_by_tp_are_padded_with_a_warning_not_refused(tmp_path, capsys):
    # optimum-neuron benchmarks Llama-3.3-70B (64 heads) at TP 24 on inf2.48xlarge: NxD Inference pads the heads.
    spec = tmp_path / "spec.yaml"
    spec.write_text(LLM.replace("tensor_parallel: 8", "tensor_parallel: 24"))
    assert main(["validate", str(spec)]) == 0
    captured = capsys.readouterr()
    warnings = [row for row in (captured.out + captured.err).splitlines() if row.startswith("warning:")]
    assert any("32 attention heads padded to 48 for TP=24" in row and f"{spec}:19:" in row for row in warnings)
    assert any("more compute per token" in row for row in warnings), warnings


def test_corpus_is_large_enough():
    assert len(CORPUS) >= 40


@pytest.mark.parametrize(("text", "expected", "line"), [case[1:] for case in CORPUS], ids=[case[0] for case in CORPUS])
def test_broken_spec_is_refused_in_one_clear_line(tmp_path, capsys, text, expected, line):
    spec = tmp_path / "spec.yaml"
    spec.write_bytes(text.encode("utf-8", "surrogateescape") if isinstance(text, str) else text)
    code = main(["validate", str(spec)])
    captured = capsys.readouterr()
    errors = [row for row in captured.err.splitlines() if row.startswith("error:")]
    assert code != 0
    assert "Traceback" not in captured.err + captured.out
    assert errors, captured.err
    assert any(expected in row for row in errors), errors
    assert all(str(spec) in row for row in errors)
    if line is not None:
        assert any(f"{spec}:{line}:" in row for row in errors if expected in row), errors


def test_cli_process_prints_no_traceback_for_garbage(tmp_path):
    spec = tmp_path / "garbage.yaml"
    spec.write_bytes(bytes(range(256)) * 4)
    result = subprocess.run(
        [sys.executable, "-m", "neurondeploy.cli", "plan", str(spec)], capture_output=True, text=True
    )
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_missing_file_is_one_line(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "neurondeploy.cli", "validate", str(tmp_path / "nope.yaml")],
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0
    assert (
        result.stderr.strip()
        == f"error: {tmp_path / 'nope.yaml'}: no such file (fix: check the path; templates/ has examples)"
    )


yaml_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=12))
yaml_values = st.recursive(
    yaml_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12,
)
known_keys = st.sampled_from(
    [
        "kind",
        "name",
        "task",
        "model",
        "compile",
        "deployment",
        "network",
        "tls",
        "dns",
        "distribution",
        "instance_type",
        "entry_point",
        "spot",
        "checkpoint",
        "tags",
        "region",
        "path",
        "batch_sizes",
    ]
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    document=st.dictionaries(known_keys | st.text(max_size=6), yaml_values, max_size=6),
    kind=st.sampled_from(["inference", "training", None, 3]),
)
def test_random_yaml_never_raises_a_traceback(tmp_path, capsys, document, kind):
    import yaml

    if kind is not None:
        document["kind"] = kind
    spec = tmp_path / "random.yaml"
    spec.write_text(yaml.safe_dump(document))
    code = main(["validate", str(spec)])
    captured = capsys.readouterr()
    assert code in (0, 2)
    assert "internal error" not in captured.err
    assert "Traceback" not in captured.err


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_random_bytes_never_raise_a_traceback(tmp_path, capsys, raw):
    spec = tmp_path / "bytes.yaml"
    spec.write_bytes(raw)
    code = main(["validate", str(spec)])
    captured = capsys.readouterr()
    assert code == 2
    assert "internal error" not in captured.err
