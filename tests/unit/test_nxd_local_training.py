"""`train --local` of an engine nxd-training spec (issue 31, item 4): NxD Training does not run here (no torch-xla, no
Neuron devices), so the reference script stands in for it on the spec's layout rules and its tokenized channel at a
scaled-down size, and says so. The stand-in spec is checked here; tests/integration/test_nxd_local_training_run.py runs
it under torchrun through the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from neurondeploy.planner.checks import PlanRefused
from neurondeploy.specs import load_spec
from neurondeploy.specs.training import REFERENCE_SOURCE
from neurondeploy.training.local import LocalTrainingError, local_hyperparameters, local_layout
from neurondeploy.training.nxd_stand_in import reference_stand_in

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "templates" / "llama3-70b-pretrain-trn1-nxdt.yaml"


def template_with_local_data(tmp_path: Path, vocab_size: int | None = 30522, **change) -> Path:
    """The 70B template with a local copy of its channel (a dataset record as `neurondeploy data` writes it)."""
    spec = yaml.safe_load(TEMPLATE.read_text())
    spec["inputs"]["train"]["local_path"] = "data/train"
    spec.update(change)
    (tmp_path / "data" / "train").mkdir(parents=True)
    (tmp_path / "data" / "train" / "state.json").write_text(json.dumps({"_data_files": []}))
    if vocab_size:
        record = {"format": 1, "digest": "0" * 64, "sequence_length": 8192, "rows": 1, "tokens_dropped": 0}
        record |= {"documents": 1, "vocab_size": vocab_size, "files": []}
        (tmp_path / "data" / "train" / "neurondeploy-data.json").write_text(json.dumps(record))
    path = tmp_path / "nxdt.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def test_the_stand_in_is_the_reference_script_on_the_specs_layout_scaled_down(tmp_path):
    stand_in, lines = reference_stand_in(load_spec(template_with_local_data(tmp_path)), processes=2, overrides={})
    spec = stand_in.spec
    assert (spec.engine, spec.entry_point, spec.source_dir) == ("reference", "train.py", REFERENCE_SOURCE)
    assert spec.architecture == load_spec(TEMPLATE).spec.architecture  # --local scales it, as for any spec
    # TP=32 PP=8 on 2 processes: 2 pipeline stages of one tensor shard; the model scaled to them, with the 70B's
    # 8 query heads per KV head and its MLP ratio, on the dataset's vocabulary (the tokenizer's, not 128256)
    assert (spec.distribution.tensor_parallel, spec.distribution.pipeline_parallel) == (32, 8)
    scaled = local_hyperparameters(stand_in, local_layout(32, 8, 2))
    assert (scaled["layers"], scaled["heads"], scaled["kv_heads"], scaled["hidden_size"]) == (2, 8, 1, 128)
    assert scaled["intermediate_size"] == 448 and scaled["vocab_size"] == 30522
    assert (scaled["tensor_parallel_size"], scaled["pipeline_parallel_size"]) == (1, 2)
    assert spec.distribution.microbatches == 2 and spec.distribution.precision == "bf16-autocast"
    assert not spec.distribution.sequence_parallel and spec.distribution.checkpoint_granularity == "full"
    hp = spec.hyperparameters
    assert hp["max_steps"] == 20 and hp["sequence_length"] == 128 and hp["global_batch_size"] == 4
    assert hp["warmup_steps"] == 2 and hp["learning_rate"] == 0.000015  # 2000 of 30000 steps: the same share
    assert hp["pipeline_schedule"] == "1f1b" and "micro_batch_size" not in hp
    assert list(spec.inputs) == ["train"] and spec.inputs["train"].local_path == "data/train"
    said = "\n".join(lines)
    assert "NxD Training does not run on this machine" in said and "reference script stands in" in said
    assert "precision bf16-mixed runs as bf16-autocast" in said and "no sequence parallel" in said
    assert "selective recomputation (attention, mlp) runs as whole-layer checkpointing" in said
    assert "not read: micro_batch_size" in said and "rope_theta" not in said  # only what the spec sets
    assert "max_steps 20 (the spec's 30000)" in said and "sequence_length 128 (the spec's 8192)" in said


def test_hp_overrides_win_over_the_scaling_and_are_checked_as_nxd_trainings_settings(tmp_path):
    loaded = load_spec(template_with_local_data(tmp_path))
    stand_in, lines = reference_stand_in(loaded, processes=2, overrides={"max_steps": "3", "gradient_clip": "0.5"})
    assert stand_in.spec.hyperparameters["max_steps"] == 3 and stand_in.spec.hyperparameters["max_grad_norm"] == 0.5
    assert stand_in.spec.hyperparameters["warmup_steps"] == 1  # 2000 of 30000 steps: the same share of 3
    assert "max_steps" not in "".join(line for line in lines if "run scaled down" in line)
    with pytest.raises(PlanRefused) as refused:
        reference_stand_in(loaded, processes=2, overrides={"zero1": "true"})
    assert "hyperparameters.zero1" in str(refused.value)


def test_without_a_dataset_record_the_models_vocabulary_is_used(tmp_path):
    stand_in, _ = reference_stand_in(load_spec(template_with_local_data(tmp_path, None)), processes=2, overrides={})
    assert local_hyperparameters(stand_in, local_layout(32, 8, 2))["vocab_size"] == 128256


def _train_local(spec: Path, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "neurondeploy.cli", "train", str(spec), "--local", "--work-dir", str(cwd / "w")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


def test_a_channel_only_on_s3_is_one_line_naming_neurondeploy_data(tmp_path):
    spec = tmp_path / TEMPLATE.name
    spec.write_text(TEMPLATE.read_text())
    run = _train_local(spec, tmp_path)
    assert run.returncode == LocalTrainingError.exit_code and "Traceback" not in run.stderr, run.stderr
    (line,) = run.stderr.strip().splitlines()
    assert "input channel train has only s3_uri" in line and "--no-upload" in line, line
    assert not (tmp_path / "w").exists()


def test_a_local_path_without_a_dataset_is_one_line_naming_neurondeploy_data(tmp_path):
    spec = template_with_local_data(tmp_path)
    (tmp_path / "data" / "train" / "state.json").unlink()
    run = _train_local(spec, tmp_path)
    assert run.returncode == LocalTrainingError.exit_code and "Traceback" not in run.stderr, run.stderr
    (line,) = run.stderr.strip().splitlines()
    assert "holds no tokenized dataset" in line and "neurondeploy data" in line and "--no-upload" in line, line


def test_a_mixture_of_experts_spec_is_refused_in_one_line(tmp_path):
    mixtral = {"layers": 32, "hidden_size": 4096, "attention_heads": 32, "kv_heads": 8, "vocab_size": 32000}
    mixtral |= {"intermediate_size": 14336, "experts": 8, "experts_per_token": 2}  # Mixtral-8x7B's config.json
    distribution = yaml.safe_load(TEMPLATE.read_text())["distribution"] | {"pipeline_parallel": 4}
    spec = template_with_local_data(tmp_path, architecture=mixtral, instance_count=8, distribution=distribution)
    run = _train_local(spec, tmp_path)
    assert run.returncode == LocalTrainingError.exit_code and "Traceback" not in run.stderr, run.stderr
    (line,) = run.stderr.strip().splitlines()
    assert "mixture-of-experts" in line and "nothing was started" in line, line
    assert not (tmp_path / "w").exists()


def test_the_reference_script_reads_a_tokenized_channel_as_its_token_stream(tmp_path, monkeypatch):
    """What `neurondeploy data` writes (datasets' save_to_disk layout, several shards) is read back by the script as
    the blocks' input_ids in order: the corpus's token stream."""
    import importlib.util

    from neurondeploy.training import token_dataset
    from neurondeploy.training.entry import REFERENCE_DIR

    monkeypatch.setattr(token_dataset, "SHARD_BYTES", 64)  # a few rows per shard: the order across shards counts
    rows = [[row * 10 + i for i in range(8)] for row in range(20)]
    (tmp_path / "train").mkdir()
    token_dataset.write_dataset(iter(rows), tmp_path / "train", 8)
    assert len(list((tmp_path / "train").glob("*.arrow"))) > 1
    monkeypatch.setenv("SM_CHANNEL_TRAIN", str(tmp_path / "train"))
    monkeypatch.syspath_prepend(str(REFERENCE_DIR))
    spec = importlib.util.spec_from_file_location("reference_train", REFERENCE_DIR / "train.py")
    script = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "reference_train", script)  # its dataclasses look their module up
    spec.loader.exec_module(script)
    tokens, tokenized = script.load_corpus()
    assert tokenized and tokens.tolist() == [token for row in rows for token in row]


def test_token_ids_beyond_the_models_vocabulary_are_one_line_from_the_script(tmp_path):
    """A dataset made with a larger tokenizer than the model's vocabulary stops the script before its first step."""
    from neurondeploy.training import token_dataset
    from neurondeploy.training.entry import REFERENCE_DIR

    (tmp_path / "train").mkdir()
    token_dataset.write_dataset(iter([[300 + i for i in range(16)]] * 4), tmp_path / "train", 16)
    env = {"PATH": "/usr/bin:/bin", "SM_CHANNEL_TRAIN": str(tmp_path / "train"), "SM_MODEL_DIR": str(tmp_path / "m")}
    env |= {"NEURONDEPLOY_CHECKPOINT_DIR": str(tmp_path / "c"), "SM_OUTPUT_DATA_DIR": str(tmp_path / "o")}
    run = subprocess.run(
        [sys.executable, str(REFERENCE_DIR / "train.py"), "--vocab_size", "256", "--max_steps", "1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
    assert run.stderr.strip().splitlines() == [
        "error: the train channel holds token id 315, beyond vocab_size 256; tokenize it with the model's tokenizer"
    ]
    assert not (tmp_path / "m").exists()
