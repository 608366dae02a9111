"""The messages a first hour meets, each one line naming what is wrong and the fix that works (issue 48, item 7):
a misspelt region, a TP the model or the instance cannot take, a `--hp` typo. Through the CLI, no AWS."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

TEMPLATES = Path(__file__).parents[2] / "templates"


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
        "AWS_ACCESS_KEY_ID": "x",
        "AWS_SECRET_ACCESS_KEY": "x",
    }
    command = [sys.executable, "-m", "neurondeploy.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, cwd=cwd)


def errors(done: subprocess.CompletedProcess) -> list[str]:
    assert "Traceback" not in done.stderr
    return [line for line in done.stderr.splitlines() if line.startswith("error:")]


def with_changes(tmp_path: Path, template: str, **changes) -> Path:
    spec = yaml.safe_load((TEMPLATES / template).read_text())
    for dotted, value in changes.items():
        *parents, last = dotted.split("__")
        node = spec
        for part in parents:
            node = node[part]
        node[last] = value
    path = tmp_path / template
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def test_an_unknown_region_is_one_line_with_the_nearest_real_one(tmp_path):
    done = cli("validate", str(with_changes(tmp_path, "minilm-sagemaker.yaml", region="eu-west-7")))
    (line,) = errors(done)
    assert done.returncode == 2
    assert "region: unknown region 'eu-west-7'" in line and line.endswith("(fix: did you mean eu-west-1?)"), line


def test_a_region_botocore_knows_is_not_called_unknown(tmp_path):
    done = cli("validate", str(with_changes(tmp_path, "minilm-sagemaker.yaml", region="us-iso-east-1")))
    assert done.returncode == 2 and errors(done)  # nothing is offered there, and it says so
    assert not [line for line in errors(done) if "unknown region" in line]


def test_a_tp_refused_twice_offers_one_list(tmp_path):
    spec = with_changes(tmp_path, "llama3-70b-pretrain-trn1-nxdt.yaml", distribution__tensor_parallel=3)
    refusals = [line for line in errors(cli("validate", str(spec))) if "distribution.tensor_parallel" in line]
    assert len(refusals) == 2, refusals
    # legal on trn1 for training (1, 2, 8, 32) and splitting 64 heads, 8 KV heads (replicated by NxD above 8)
    assert all(line.endswith("(fix: use one of [1, 2, 8, 32])") for line in refusals), refusals


def test_a_hp_typo_is_blamed_on_the_flag_not_a_line_of_the_spec(tmp_path):
    spec = TEMPLATES / "llama3-70b-pretrain-trn1-nxdt.yaml"
    done = cli("train", str(spec), "--hp", "max_step=4", "--no-wait", "--yes")
    (line,) = errors(done)
    assert done.returncode != 0 and line.startswith("error: --hp max_step: hyperparameters.max_step: "), line
    assert f"{spec}:" not in line and "max_steps" in line
