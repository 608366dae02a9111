"""NxD Training's published trn1 layouts (catalog data/nxd_training_examples.yaml, read from its example configs),
written as our training specs with engine: nxd-training: validate accepts each and shows its memory per NeuronCore,
sized as NxD Training runs it (sequence parallel, selective or full checkpointing, the 1F1B schedule's micro-batches
in flight, ZeRO-1); layouts that cannot fit are refused in one line with the numbers.

Before engine nxd-training, every layout with PP > 1 was refused ("the reference training script does not pipeline
on Trainium") and sequence parallelism was not counted (the 405B layout was judged at 39.5 GiB per core).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml
from test_published_deployments import LLAMA_3_8B, LLAMA_3_70B, MIXTRAL_8X7B

from neurondeploy import catalog
from neurondeploy.planner.plan import build_plan
from neurondeploy.planner.sizing import architecture_from_config_values
from neurondeploy.planner.validate import validate_file
from neurondeploy.resources.sagemaker_training import job_files
from neurondeploy.specs import load_spec

LLAMA_3_1_405B = {  # meta-llama/Llama-3.1-405B/config.json
    "model_type": "llama",
    "num_hidden_layers": 126,
    "hidden_size": 16384,
    "num_attention_heads": 128,
    "num_key_value_heads": 8,
    "intermediate_size": 53248,
    "vocab_size": 128256,
    "tie_word_embeddings": False,
}
CONFIGS = {
    "meta-llama/Meta-Llama-3-8B": LLAMA_3_8B,
    "meta-llama/Meta-Llama-3-70B": LLAMA_3_70B,
    "meta-llama/Llama-3.1-405B": LLAMA_3_1_405B,
    "mistralai/Mixtral-8x7B-v0.1": MIXTRAL_8X7B,
}
RECOMPUTE = {"CoreAttention": "attention", "LlamaMLP": "mlp"}


def spec_of(example: dict, **change) -> dict:
    """The published example as our training spec (``change``: top-level or distribution keys to override)."""
    arch = architecture_from_config_values(CONFIGS[example["model"]])
    assert (arch.layers, arch.hidden_size) == (example["num_layers"], example["hidden_size"])  # the same model
    selective = example["activations_checkpoint_granularity"] == "selective"
    distribution = {
        "tensor_parallel": example["tensor_model_parallel_size"],
        "pipeline_parallel": example["pipeline_model_parallel_size"],
        "zero1": example["zero1"],
        "sequence_parallel": example["sequence_parallel"],
        "gradient_checkpointing": True,
        "checkpoint_granularity": example["activations_checkpoint_granularity"],
        "precision": {"mixed_precision": "bf16-mixed"}[example["precision_type"]],
    }
    if selective:
        distribution["recompute"] = [RECOMPUTE[name] for name in example["activations_checkpoint_recompute"]]
    if "capacity_factor" in example:
        distribution["expert_capacity_factor"] = example["capacity_factor"]
    spec = {
        "kind": "training",
        "engine": "nxd-training",
        "name": example["file"].removesuffix("_config.yaml").replace("_", "-").replace(".", "-").lower(),
        "entry_point": "training_orchestrator.py",
        "source_dir": "examples",
        "instance_type": "trn1.32xlarge",
        "instance_count": example["num_nodes"],
        "neuron_sdk_version": "2.27.1",
        "architecture": arch.model_dump(exclude_none=True, exclude={"parameters"}),
        "distribution": distribution,
        "inputs": {"train": {"s3_uri": "s3://my-training-bucket/tokenized/train", "format": "tokenized"}},
        "hyperparameters": {
            "sequence_length": example["encoder_seq_length"],
            "micro_batch_size": example["micro_batch_size"],
            "global_batch_size": example["global_batch_size"],
        },
    }
    for key, value in change.items():
        (spec["distribution"] if key in distribution else spec)[key] = value
    return spec


def write(tmp_path, spec: dict):
    """The spec beside a stand-in of NxD Training's examples directory (its entry and the module it imports)."""
    (tmp_path / "examples").mkdir(exist_ok=True)
    for name in ("training_orchestrator.py", "training.py"):
        (tmp_path / "examples" / name).write_text("# a stand-in of NxD Training's examples/" + name + "\n")
    path = tmp_path / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


EXAMPLES = catalog.nxd_training_examples()


def test_the_table_holds_the_four_published_trn1_layouts():
    assert [e["file"] for e in EXAMPLES] == [
        "hf_llama3_8B_config.yaml",
        "hf_llama3_70B_config.yaml",
        "hf_llama3.1_405B_trn1_config.yaml",
        "hf_mixtral_8x7b_config.yaml",
    ]
    assert "9169aa03f39efd4eb02da63891a7ed98defb1714" in catalog.nxd_training_examples_source()


@pytest.mark.parametrize("example", EXAMPLES, ids=[e["file"] for e in EXAMPLES])
def test_validate_accepts_each_published_layout_and_shows_its_memory_per_core(tmp_path, example):
    result = validate_file(str(write(tmp_path, spec_of(example))))
    assert result.ok, result.lines()
    (fits,) = [f for f in result.findings if f.level == "info" and f.message.startswith("fits: ")]
    per_core = float(fits.message.split()[1])
    assert 0 < per_core <= 16, fits.message  # trn1: 16 GiB of HBM per NeuronCore
    assert f"PP={example['pipeline_model_parallel_size']}" in fits.message


def test_sequence_parallel_and_the_1f1b_schedule_are_what_make_405b_fit(tmp_path):
    """The same 405B layout without sequence parallelism stores what TP replicates on every rank: it does not fit."""
    example = EXAMPLES[2]
    assert validate_file(str(write(tmp_path, spec_of(example)))).ok
    without = validate_file(str(write(tmp_path, spec_of(example, sequence_parallel=False))))
    errors = [line for line in without.lines() if line.startswith("error:")]
    assert len(errors) == 1 and "does not fit" in errors[0], without.lines()


@pytest.mark.parametrize(
    "example, nodes, pp, words",
    [(EXAMPLES[1], 1, 1, "70B on one node"), (EXAMPLES[2], 4, 4, "405B on four nodes")],
    ids=["70B on one node", "405B on four nodes"],
)
def test_a_large_model_on_too_few_nodes_is_refused_in_one_line_with_the_numbers(tmp_path, example, nodes, pp, words):
    path = write(tmp_path, spec_of(example, instance_count=nodes, pipeline_parallel=pp))
    run = subprocess.run(
        [sys.executable, "-m", "neurondeploy.cli", "validate", str(path)], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    (line,) = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert "distribution.tensor_parallel: does not fit: needs" in line and "GiB per NeuronCore" in line, line
    assert "trn1.32xlarge has 16 GiB" in line and "(fix: " in line, line


def test_the_reference_engine_refuses_what_only_nxd_training_does(tmp_path):
    spec = spec_of(EXAMPLES[0], engine="reference")
    result = validate_file(str(write(tmp_path, spec)))
    errors = [line for line in result.lines() if line.startswith("error:")]
    assert any("distribution.sequence_parallel: the reference training script does not split" in e for e in errors)
    assert any(
        "distribution.checkpoint_granularity: the reference training script checkpoints whole" in e for e in errors
    )


def test_plan_shows_the_launch_of_nxd_trainings_entry(tmp_path):
    plan = build_plan(load_spec(write(tmp_path, spec_of(EXAMPLES[1]))))
    (line,) = [step.what for step in plan.before_apply if step.what.startswith("engine nxd-training: ")]
    assert "torchrun --nnodes 16 --nproc_per_node 32 training_orchestrator.py" in line, line
    assert "--config-name nxd-training-config.yaml --config-path ." in line, line


# Where each published value sits in NxD Training's config (the table keeps the file's leaf names).
CONFIG_PATHS = {
    "num_nodes": "trainer.num_nodes",
    "devices": "trainer.devices",
    "tensor_model_parallel_size": "distributed_strategy.tensor_model_parallel_size",
    "pipeline_model_parallel_size": "distributed_strategy.pipeline_model_parallel_size",
    "virtual_pipeline_model_parallel_size": "distributed_strategy.virtual_pipeline_model_parallel_size",
    "zero1": "distributed_strategy.zero1",
    "sequence_parallel": "distributed_strategy.sequence_parallel",
    "kv_replicator": "distributed_strategy.kv_replicator",
    "micro_batch_size": "data.micro_batch_size",
    "global_batch_size": "data.global_batch_size",
    "encoder_seq_length": "model.encoder_seq_length",
    "num_layers": "model.num_layers",
    "hidden_size": "model.hidden_size",
    "activations_checkpoint_granularity": "model.activations_checkpoint_granularity",
    "activations_checkpoint_recompute": "model.activations_checkpoint_recompute",
    "precision_type": "precision.type",
    # not master_weights and fp32_grad_acc: NxD Training reads them for type manual only (config_overview.rst), and
    # the files, all mixed_precision, differ there (Llama false, Mixtral true); they are rendered as the type does
    "expert_model_parallel_size": "distributed_strategy.expert_model_parallel_size",
    "num_experts": "model.moe.num_experts",
    "top_k": "model.moe.top_k",
    "capacity_factor": "model.moe.capacity_factor",
    "dropless": "model.moe.dropless",
}
# The top-level keys NxD Training's config overview lists (docs/general/config_overview.rst at the same commit).
TOP_LEVEL = [
    "name", "model_source", "seed", "trainer", "exp_manager", "distributed_strategy", "data", "model", "precision",
    "compiler_flags", "compiler_cache_url", "aync_exec_max_inflight_requests", "bucket_size_collectives",
    "neuron_rt_exec_timeout", "neuron_experimental_compress_rg",
]  # fmt: skip
LLAMA = [e for e in EXAMPLES if e["model"].startswith("meta-llama/")]


def at(config: dict, path: str):
    for key in path.split("."):
        config = config[key]
    return config


def has(config: dict, path: str) -> bool:
    try:
        at(config, path)
    except KeyError:
        return False
    return True


@pytest.mark.parametrize("example", EXAMPLES, ids=[e["file"] for e in EXAMPLES])
def test_the_rendered_config_matches_the_published_file_key_by_key(tmp_path, example):
    """plan renders NxD Training's config from our spec: every published layout value lands on its key, and a key
    the file does not have (the Llama files' MoE block, the Mixtral file's KV replicator) is not rendered."""
    plan = build_plan(load_spec(write(tmp_path, spec_of(example))))
    config = plan.engine_config
    assert list(config) == TOP_LEVEL
    for key, path in CONFIG_PATHS.items():
        if key not in example:
            assert not has(config, path), (key, path)
        else:
            assert at(config, path) == example[key], (key, path, at(config, path), example[key])
    assert config["model"]["model_config"] == "/opt/ml/code/config.json"
    assert config["exp_manager"]["explicit_log_dir"] == "/opt/ml/checkpoints"  # synced with checkpoint.s3_uri
    # training.py builds HFMixtralModule for a name with "mixtral" in it, HFLLamaModule otherwise
    assert ("mixtral" in config["name"]) == example["model"].startswith("mistralai/Mixtral")


def test_a_mixture_of_experts_model_is_rendered_as_mixtral_with_its_config_json(tmp_path):
    from transformers import MixtralConfig

    loaded = load_spec(write(tmp_path, spec_of(EXAMPLES[3])))
    files = job_files(loaded.spec)
    (tmp_path / "config.json").write_bytes(files["config.json"])
    config = MixtralConfig.from_pretrained(tmp_path / "config.json")  # as mixtral_model.py reads it
    published = CONFIGS["mistralai/Mixtral-8x7B-v0.1"]
    for key in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_key_value_heads", "num_local_experts"):
        assert getattr(config, key) == published[key], key
    assert config.num_experts_per_tok == 2
    assert json.loads(files["config.json"])["rope_theta"] == 1e6  # Mixtral's (transformers 5 files it elsewhere)
    rendered = yaml.safe_load(files["nxd-training-config.yaml"])
    assert rendered["compiler_flags"] == "--model-type transformer --enable-saturate-infinity"  # the file's


def test_what_nxd_trainings_mixtral_module_cannot_build_is_refused(tmp_path):
    shared = spec_of(EXAMPLES[3])
    shared["architecture"]["shared_expert_intermediate_size"] = 4096
    dropless = spec_of(EXAMPLES[3])
    dropless["architecture"]["gated_mlp"] = False
    dropless["distribution"]["expert_capacity_factor"] = 0
    for spec, field in ((shared, "architecture.experts"), (dropless, "distribution.expert_capacity_factor")):
        result = validate_file(str(write(tmp_path, spec)))
        errors = [line for line in result.lines() if line.startswith("error:")]
        assert len(errors) == 1 and f": {field}: " in errors[0], result.lines()


PRECISIONS = {
    "fp32": "fp32",
    "bf16-autocast": "autocast",
    "bf16-stochastic-rounding": "bf16SR",
    "bf16-mixed": "mixed_precision",
    "bf16-mixed-stochastic-rounding": "mixed_precision_SR",
}


@pytest.mark.parametrize("precision", PRECISIONS)
def test_each_precision_is_nxd_trainings_type_of_the_same_numerics(tmp_path, precision):
    """training_orchestrator.py sets XLA_USE_BF16, XLA_DOWNCAST_BF16 and stochastic rounding from precision.type."""
    spec = spec_of(EXAMPLES[0])
    spec["distribution"]["precision"] = precision
    rendered = build_plan(load_spec(write(tmp_path, spec))).engine_config["precision"]
    assert rendered["type"] == PRECISIONS[precision]
    assert rendered["neuron_rt_stochastic_rounding_en"] == ("1" if "stochastic-rounding" in precision else "0")


def per_core(result) -> float:
    (fits,) = [f for f in result.findings if f.level == "info" and f.message.startswith("fits: ")]
    return float(fits.message.split()[1])


def test_mixed_precision_counts_its_fp32_master_copy_and_the_reference_script_refuses_it(tmp_path):
    mixed = spec_of(EXAMPLES[1])
    rounded = spec_of(EXAMPLES[1])
    rounded["distribution"]["precision"] = "bf16-stochastic-rounding"
    # 70B over TP 32 x PP 8: 276M parameters a core; fp32 gradients (+2 bytes) and the master copy (+4, over DP 2)
    assert per_core(validate_file(str(write(tmp_path, mixed)))) - per_core(
        validate_file(str(write(tmp_path, rounded)))
    ) == pytest.approx(276e6 * (2 + 4 / 2) / 2**30, abs=0.1)
    reference = spec_of(EXAMPLES[0], engine="reference", sequence_parallel=False, checkpoint_granularity="full")
    errors = [line for line in validate_file(str(write(tmp_path, reference))).lines() if line.startswith("error:")]
    assert any("distribution.precision: bf16-mixed is NxD Training's mixed precision" in e for e in errors), errors
