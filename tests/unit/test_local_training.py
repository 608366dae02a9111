"""The local training launcher's pure parts: layout scaling, the SageMaker environment, errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from neurondeploy.specs import load_spec
from neurondeploy.specs.training import REFERENCE_SOURCE
from neurondeploy.training.entry import REFERENCE_DIR
from neurondeploy.training.local import local_hyperparameters, local_layout, sagemaker_environment, script_arguments

REPO = Path(__file__).parents[2]


@pytest.mark.parametrize(
    ("tp", "pp", "processes", "expected"),
    [
        (1, 1, 2, (1, 1, 2)),
        (8, 1, 2, (2, 1, 1)),  # the multi-node template's TP=8 runs sharded, at degree 2
        (1, 2, 2, (1, 2, 1)),
        (2, 2, 2, (1, 2, 1)),  # pipeline first
        (2, 2, 4, (2, 2, 1)),
        (4, 1, 8, (4, 1, 2)),
        (3, 1, 2, (1, 1, 2)),  # no common divisor: data parallel only
    ],
)
def test_the_spec_layout_scales_down_to_the_local_processes(tp, pp, processes, expected):
    layout = local_layout(tp, pp, processes)
    assert (layout.tensor_parallel, layout.pipeline_parallel, layout.data_parallel) == expected
    assert layout.tensor_parallel * layout.pipeline_parallel * layout.data_parallel == processes


def test_the_script_gets_the_sagemaker_contract_with_local_directories(tmp_path):
    loaded = load_spec(REPO / "templates" / "llama-pretrain-trn1-multinode.yaml")
    layout = local_layout(8, 1, 2)
    hps = local_hyperparameters(loaded, layout)
    assert hps["tensor_parallel_size"] == 2 and hps["zero1"] is True and hps["max_steps"] == 10000
    assert not any(key.startswith("sagemaker_") for key in hps)
    channels = {"train": tmp_path}
    env = sagemaker_environment(loaded, work_dir=tmp_path / "w", processes=2, hyperparameters=hps, channels=channels)
    assert env["SM_CHANNEL_TRAIN"] == str(tmp_path) and json.loads(env["SM_CHANNELS"]) == ["train"]
    assert env["SM_MODEL_DIR"] == str(tmp_path / "w" / "model")
    assert env["SM_OUTPUT_DATA_DIR"] == str(tmp_path / "w" / "output" / "data")
    assert json.loads(env["SM_HPS"]) == hps and env["SM_NUM_NEURONS"] == "2"
    assert env["SM_HP_GLOBAL_BATCH_SIZE"] == "1024"
    assert env["NEURONDEPLOY_CHECKPOINT_DIR"] == str(tmp_path / "w" / "checkpoints")  # not /opt/ml/checkpoints
    assert env["NEURONDEPLOY_RESUME"] == "1"
    assert "FI_PROVIDER" not in env  # EFA settings mean nothing here
    # as sagemaker-training-toolkit's mapping.to_cmd_args passes them: sorted by key, str() of the decoded value
    assert script_arguments({"zero1": True, "max_steps": 5}) == ["--max_steps", "5", "--zero1", "True"]
    assert env["SM_CURRENT_INSTANCE_TYPE"] == "ml.trn1.32xlarge" and env["NEURON_CC_FLAGS"].startswith("--model-type")


def _train(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "neurondeploy.cli", "train", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_bad_local_runs_are_refused_in_one_line_before_anything_starts(tmp_path):
    spec = (REPO / "templates" / "tiny-lm-train-local.yaml").read_text()
    missing_script = tmp_path / "missing.yaml"
    missing_script.write_text(spec.replace(f"source_dir: {REFERENCE_SOURCE}", "source_dir: nowhere"))
    result = _train(str(missing_script), "--local", "--work-dir", str(tmp_path / "w"))
    assert result.returncode == 2 and "entry_point train.py is not in source_dir" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "w").exists()

    s3_only = tmp_path / "s3only.yaml"
    s3_only.write_text(spec.replace("    local_path: training/data\n", ""))
    result = _train(str(s3_only), "--local")
    assert result.returncode == 9 and "inputs.train.local_path" in result.stderr

    result = _train(str(REPO / "templates" / "tiny-lm-train-local.yaml"), "--local", "--hp", "max_steps")
    assert result.returncode == 1 and "is not KEY=VALUE" in result.stderr

    result = _train(str(REPO / "templates" / "tiny-lm-train-local.yaml"), "--local", "--hp", "tensor_parallel_size=2")
    assert result.returncode == 3 and "set by neurondeploy from the spec" in result.stderr

    result = _train(
        str(REPO / "templates" / "tiny-lm-train-local.yaml"),
        "--local",
        "--processes",
        "0",
        "--work-dir",
        str(tmp_path / "zero"),
    )
    assert (
        result.returncode == 9
        and "--processes 0 must be 1 or more" in result.stderr
        and not (tmp_path / "zero").exists()
    )

    (tmp_path / "a-file").write_text("")
    result = _train(
        str(REPO / "templates" / "tiny-lm-train-local.yaml"), "--local", "--work-dir", str(tmp_path / "a-file")
    )
    assert (
        result.returncode == 9 and "Not a directory" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    )

    result = _train(str(REPO / "templates" / "minilm-local.yaml"), "--local")
    assert result.returncode == 1 and "inference spec" in result.stderr


def test_the_flagship_layout_validates_clean_and_pipeline_parallel_with_the_reference_script_is_an_error(tmp_path):
    from neurondeploy.planner.checks import run_checks

    multinode = load_spec(REPO / "templates" / "llama-pretrain-trn1-multinode.yaml")  # TP=8 DP=8 ZeRO-1, NxD on XLA
    findings = run_checks(multinode)  # no error and no warning: the script runs this layout on Trainium
    assert [f.level for f in findings] == ["info"] and findings[0].message.startswith("fits: "), findings
    template = (REPO / "templates" / "llama-pretrain-trn1-multinode.yaml").read_text()
    piped = template.replace("data_parallel: 8", "data_parallel: 4").replace(
        "pipeline_parallel: 1", "pipeline_parallel: 2"
    )
    (tmp_path / "piped.yaml").write_text(piped)
    findings = run_checks(load_spec(tmp_path / "piped.yaml"))
    errors = [f for f in findings if f.level == "error"]
    assert [f.field for f in errors] == ["distribution.pipeline_parallel"]
    assert "does not pipeline on Trainium" in errors[0].message and "pipeline_parallel: 1" in errors[0].hint
    own = tmp_path / "own"
    own.mkdir()
    (own / "train.py").write_text("# my NxD Training script\n")
    (tmp_path / "spec.yaml").write_text(piped.replace(f"source_dir: {REFERENCE_SOURCE}", f"source_dir: {own}"))
    other = run_checks(load_spec(tmp_path / "spec.yaml"))
    assert not [f for f in other if f.level == "error"]  # another script: its layout is its own business


def test_torchruns_own_reports_are_held_back_once_its_workers_stopped_but_the_workers_output_never_is():
    from neurondeploy.training.local import TorchrunAgentOutput

    agent = TorchrunAgentOutput()
    lines = [
        "step 10/150 loss 3.88\n",
        "Traceback (most recent call last):\n",  # the user's script failing: theirs to read
        "ValueError: bad batch\n",
        "E1203 06:14:06.610000 32025 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 2) "
        "local_rank: 0 (pid: 32029) of binary: python\n",
        "Traceback (most recent call last):\n",  # torchrun's ChildFailedError from here on
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n",
        "W1203 06:14:07.000000 32025 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 1 SIGTERM\n",
    ]
    assert [agent.shown(line) for line in lines] == [True, True, True, False, False, False, False]
    assert agent.worker_exit == 2


def test_the_flagships_8b_model_is_scaled_for_this_cpu_and_said_and_a_small_one_is_not():
    from neurondeploy.training.local import local_model

    flagship = load_spec(REPO / "templates" / "llama-pretrain-trn1-multinode.yaml")
    layout = local_layout(8, 1, 2)
    model, said = local_model(flagship, layout)
    # the same kind of model: 4 query heads per KV head, 3.5 MLP units per hidden one, one KV head per TP rank
    assert model == {
        "layers": 2, "hidden_size": 128, "heads": 8, "kv_heads": 2, "intermediate_size": 448, "vocab_size": 256,
    }  # fmt: skip
    assert "instead of the spec's 32 × 4096 (8.0B parameters), which the job trains" in said
    assert (
        local_hyperparameters(load_spec(REPO / "templates" / "llama-pretrain-trn1-multinode.yaml"), layout)[
            "hidden_size"
        ]
        == 128
    )
    tiny = load_spec(REPO / "templates" / "tiny-lm-train-local.yaml")  # no architecture: the script's own
    assert local_model(tiny, local_layout(1, 1, 2)) == ({}, None)


def test_the_flagship_job_passes_the_scripts_own_check_at_its_full_world_and_heads_4_does_not(tmp_path):
    """The reference script's --check_layout with the flagship's exact hyperparameters, as the training toolkit
    passes them (to_cmd_args of the JSON-decoded values), at the job's world of 2 × 64 NeuronCores; then a copy
    with 4 heads, refused by the script in one line and by validate before any job."""
    from neurondeploy.resources.sagemaker_training import script_hyperparameters

    loaded = load_spec(REPO / "templates" / "llama-pretrain-trn1-multinode.yaml")
    arguments = script_arguments(script_hyperparameters(loaded.spec))

    def check(args: list[str]) -> subprocess.CompletedProcess:
        script = REFERENCE_DIR / "train.py"
        env = {"WORLD_SIZE": "128", "PATH": "/usr/bin:/bin"}
        return subprocess.run(
            [sys.executable, str(script), "--check_layout", *args], capture_output=True, text=True, env=env, timeout=120
        )

    passed = check(arguments)
    assert passed.returncode == 0, passed.stderr
    assert "layout ok: 8,030,261,248 parameters over 128 processes, TP=8 PP=1" in passed.stdout  # Llama-3.1-8B's
    heads = arguments.index("--heads") + 1
    refused = check([*arguments[:heads], "4", *arguments[heads + 1 :]])
    assert refused.returncode == 1 and refused.stderr.strip().splitlines() == [
        "error: heads 4 must divide by kv_heads 8; heads 4 must divide by tensor_parallel_size 8"
    ]

    text = loaded.path.read_text().replace("  attention_heads: 32\n", "  attention_heads: 4\n")
    text = text.replace("  kv_heads: 8\n", "  kv_heads: 4\n")
    (tmp_path / "pretrain.yaml").write_text(text)
    validated = subprocess.run(
        [sys.executable, "-m", "neurondeploy.cli", "validate", str(tmp_path / "pretrain.yaml")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    errors = [line for line in validated.stderr.splitlines() if line.startswith("error:")]
    assert validated.returncode == 2 and len(errors) == 1, validated.stderr
    assert "distribution.tensor_parallel: TP=8 cannot split the model: architecture attention_heads 4" in errors[0]
    assert "(fix: use one of [1, 2])" in errors[0]
