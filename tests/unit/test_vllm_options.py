"""vLLM options passed as SM_VLLM_* variables cannot move the server off the port its health check probes, by name
or by argparse abbreviation, nor slip another option in through a value starting with '-': validate refuses them
(through the CLI), and the container's launcher leaves out any that reach it another way."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from support.cli import run_cli

from neurondeploy.serving.sm_vllm import vllm_arguments

REPO = Path(__file__).parents[2]
TEMPLATE = REPO / "templates" / "llama3-8b-vllm-neuron-sagemaker.yaml"
REFUSED = {
    "SM_VLLM_POR": "9999",
    "SM_VLLM_PO": "9999",
    "SM_VLLM_PORT": "9999",
    "SM_VLLM_HOS": "0.0.0.0",
    "SM_VLLM_SERVED_MODEL_NAME": "--trust-remote-code",
    "SM_VLLM_MAX_MODEL_LEN": "-1",
}


@pytest.mark.parametrize("key", sorted(REFUSED))
def test_validate_refuses_an_option_that_moves_the_server_or_a_value_that_is_an_option(tmp_path, key):
    spec = yaml.safe_load(TEMPLATE.read_text())
    spec["deployment"]["container"].setdefault("env", {})[key] = REFUSED[key]
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    done = run_cli("validate", str(path))
    lines = [line for line in (done.stdout + done.stderr).splitlines() if key in line]
    assert done.returncode not in (0, 70) and "Traceback" not in done.stderr, done.stderr
    assert len(lines) == 1 and "deployment.container.env" in lines[0], done.stdout + done.stderr


def test_an_option_that_only_starts_like_port_passes(tmp_path):
    spec = yaml.safe_load(TEMPLATE.read_text())
    spec["deployment"]["container"].setdefault("env", {})["SM_VLLM_PORTS_EXTRA"] = "1"
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    done = run_cli("validate", str(path))
    assert "SM_VLLM_PORTS_EXTRA" not in done.stdout + done.stderr


def test_the_launcher_leaves_out_what_reaches_it_another_way():
    environ = {**REFUSED, "SM_VLLM_MAX_NUM_SEQS": "8"}
    assert vllm_arguments(environ) == ["--port", "8080", "--max-num-seqs", "8"]
