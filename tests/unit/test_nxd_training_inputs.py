"""An NxD Training spec cannot smuggle an interpolation into its config, nor start a job its numbers would break:
every string is escaped for OmegaConf (which NxD Training's Hydra config goes through), and every number is checked
offline, in one line each, through the CLI's validate and plan."""

from __future__ import annotations

import pytest
import yaml
from omegaconf import OmegaConf
from support.cli import run_cli
from test_nxd_training_layouts import EXAMPLES, spec_of, write

from neurondeploy.resources.sagemaker_training import job_files
from neurondeploy.specs import load_spec

LLAMA_8B = EXAMPLES[0]


def test_a_spec_string_reaches_the_job_as_written_never_resolved(tmp_path, monkeypatch):
    spec = spec_of(LLAMA_8B)
    spec["checkpoint"] = {"local_path": "/opt/ml/checkpoints/${oc.env:AWS_SECRET_ACCESS_KEY}", "every_steps": 10}
    spec["compile_cache_uri"] = "s3://my-training-bucket/cache/\\${oc.env:HOME}/x"
    loaded = load_spec(write(tmp_path, spec))
    text = job_files(loaded.spec)["nxd-training-config.yaml"]
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "a-secret-that-must-not-appear")
    # what NxD Training's orchestrator gets from Hydra: the config resolved by OmegaConf
    resolved = OmegaConf.to_container(OmegaConf.create(text.decode()), resolve=True)
    assert resolved["exp_manager"]["explicit_log_dir"] == spec["checkpoint"]["local_path"]
    assert resolved["compiler_cache_url"] == spec["compile_cache_uri"]
    assert "a-secret-that-must-not-appear" not in yaml.safe_dump(resolved)


BAD_NUMBERS = {
    "max_steps -1 (an unbounded run)": ({"max_steps": -1}, "hyperparameters.max_steps"),
    "a NaN learning rate": ({"learning_rate": float("nan")}, "hyperparameters.learning_rate"),
    "an infinite learning rate": ({"learning_rate": float("inf")}, "hyperparameters.learning_rate"),
    "a negative learning rate": ({"learning_rate": -0.1}, "hyperparameters.learning_rate"),
    "warmup longer than the run": ({"max_steps": 100, "warmup_steps": 200}, "hyperparameters.warmup_steps"),
    "a global batch micro-batch x DP does not divide": (
        {"global_batch_size": 1023},
        "hyperparameters.global_batch_size",
    ),
    "a string where a number goes": ({"micro_batch_size": "one"}, "hyperparameters.micro_batch_size"),
    "a string learning rate": ({"learning_rate": "fast"}, "hyperparameters.learning_rate"),
    "a fractional step count": ({"max_steps": 10.5}, "hyperparameters.max_steps"),
    "a boolean batch": ({"micro_batch_size": True}, "hyperparameters.micro_batch_size"),
}


@pytest.mark.parametrize("command", ["validate", "plan"])
@pytest.mark.parametrize("case", sorted(BAD_NUMBERS), ids=sorted(BAD_NUMBERS))
def test_a_number_nxd_training_would_break_on_is_refused_offline_in_one_line(tmp_path, case, command):
    change, field = BAD_NUMBERS[case]
    spec = spec_of(LLAMA_8B)
    spec["hyperparameters"].update(change)
    done = run_cli(command, str(write(tmp_path, spec)))
    assert done.returncode not in (0, 70) and "Traceback" not in done.stderr, done.stderr
    lines = [line for line in (done.stdout + done.stderr).splitlines() if field in line]
    assert len(lines) == 1 and "error" in lines[0], done.stdout + done.stderr
