"""The README's library example, run as written: `from neurondeploy import apply, load_spec, plan, train`.

Against a moto server over HTTP (the SageMaker endpoint from the MiniLM template, its CPU trace standing in for
the NEFF as the other SageMaker tests say with ``cpu_standin``) and torchrun on this CPU (the tiny LM, 4 steps)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from support.sagemaker import queue_invocation_answer, served_answer

import neurondeploy
from neurondeploy.compiler.compile import compile_spec
from neurondeploy.ops import apply as ops_apply
from neurondeploy.ops import train as ops_train
from neurondeploy.specs import load_spec

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def readme_example() -> str:
    readme = (REPO / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, re.S)
    return next(block for block in blocks if "from neurondeploy import" in block)


def test_the_public_names_are_the_workflows():
    assert neurondeploy.apply is ops_apply.apply and neurondeploy.train is ops_train.train
    assert {"load_spec", "plan", "apply", "train", "compile_remote", "apply_local"} <= set(neurondeploy.__all__)
    with pytest.raises(AttributeError):
        neurondeploy.destroy_everything  # noqa: B018


def test_the_readme_example_runs_as_written(sagemaker_world, cpu_standin, tmp_path, monkeypatch, capsys):  # noqa: F811
    shutil.copytree(REPO / "templates", tmp_path / "templates")
    monkeypatch.chdir(tmp_path)  # the example's relative paths; local training writes under .neurondeploy/
    monkeypatch.setenv("NEURONDEPLOY_STATE", str(tmp_path / "state.db"))
    monkeypatch.setenv("NEURONDEPLOY_CACHE_DIR", str(tmp_path / "cache"))
    # The endpoint's smoke test goes through InvokeEndpoint: moto answers what our server computes for the artifact
    # the example's apply will build (compiled here first; its apply then finds every bucket in the cache).
    compiled = compile_spec(load_spec("templates/minilm-sagemaker.yaml"), out_dir=tmp_path / "precompiled")
    queue_invocation_answer(sagemaker_world, served_answer(compiled.artifact_dir))
    exec(compile(readme_example(), "README.md", "exec"), {})
    lines = capsys.readouterr().out.splitlines()
    assert float(lines[0]) > 0  # the hourly price of ml.inf2.xlarge
    created = next(line for line in lines if line.startswith("["))
    assert "'endpoint'" in created and "'model'" in created
    assert any(line.startswith("smoke test passed: sagemaker:minilm-embed answered embedding of 384") for line in lines)
    assert lines[-1] == "0 4"  # the local run's exit code and last step
    endpoints = sagemaker_world.client("sagemaker").list_endpoints()["Endpoints"]
    assert [e["EndpointName"] for e in endpoints] == ["minilm-embed"]
