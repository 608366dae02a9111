"""The serving image's contract: SageMaker's `serve` argument becomes `neurondeploy serve /opt/ml/model` on :8080.

Docker cannot build images on this machine (no engine); the entrypoint script runs here for real, with a
recording `neurondeploy` first on PATH, and the Dockerfile's base is checked against the catalogue.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from neurondeploy import catalog

INFRA = Path(__file__).parents[2] / "infra" / "serving"


def run_entrypoint(tmp_path, *args, env=None):
    recorder = tmp_path / "bin" / "neurondeploy"
    recorder.parent.mkdir(exist_ok=True)
    recorder.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {tmp_path}/args\n')
    recorder.chmod(0o755)
    environment = {"PATH": f"{recorder.parent}:{os.environ['PATH']}"} | (env or {})
    subprocess.run(["sh", str(INFRA / "entrypoint.sh"), *args], env=environment, check=True)
    return (tmp_path / "args").read_text().split("\n")[:-1]


def test_sagemaker_serve_runs_our_server_on_8080(tmp_path):
    assert run_entrypoint(tmp_path, "serve") == [
        "serve",
        "/opt/ml/model",
        "--host",
        "0.0.0.0",
        "--port",
        "8080",
        "--log-level",
        "info",
    ]
    assert run_entrypoint(tmp_path) == run_entrypoint(tmp_path, "serve")


def test_port_and_artifact_follow_the_environment(tmp_path):
    args = run_entrypoint(
        tmp_path, "serve", env={"SAGEMAKER_BIND_TO_PORT": "9000", "NEURONDEPLOY_ARTIFACT": "/models/a"}
    )
    assert args[1] == "/models/a" and args[args.index("--port") + 1] == "9000"


def test_dockerfile_builds_on_the_catalogues_neuron_inference_image():
    base = re.search(r"^ARG BASE_IMAGE=(\S+)$", (INFRA / "Dockerfile").read_text(), re.M).group(1)
    assert base == catalog.neuron_image("inference", "us-east-1")
