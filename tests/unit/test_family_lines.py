"""The late-2026 lines per instance family (data/sdk.yaml family_lines, from Neuron's announcements): a pin past
where AWS ended a path on the spec's family is refused at validate, in one line naming what replaces it there."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from support.cli import run_cli

TEMPLATES = Path(__file__).parents[2] / "templates"


def _errors(path: Path) -> list[str]:
    done = run_cli("validate", str(path))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    return [line for line in done.stderr.splitlines() if line.startswith("error:") and "neuron_sdk_version" in line]


def test_an_nxd_inference_route_on_trn2_pinned_to_2_34_is_refused_naming_vllm_neuron(tmp_path):
    spec = yaml.safe_load((TEMPLATES / "llama3-70b-vllm-neuron-trn2-sagemaker.yaml").read_text())
    spec["neuron_sdk_version"] = "2.34.0"
    path = tmp_path / "trn2-nxdi.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    (line,) = _errors(path)
    assert "Neuron SDK 2.34.0 has no nxdi-inference path on trn2" in line
    assert (
        "announce-no-support-nxdi-nxd-core-inference-trn" in line and "(fix: use vLLM Neuron, whose 0.24 line" in line
    )


def test_a_trn2_training_spec_on_the_xla_path_past_2_28_is_refused_naming_torchtitan(tmp_path):
    spec = yaml.safe_load((TEMPLATES / "llama-pretrain-trn1-multinode.yaml").read_text())
    spec.update(instance_type="ml.trn2.48xlarge", region="us-east-2", neuron_sdk_version="2.30.0")
    path = tmp_path / "trn2-training.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    (line,) = _errors(path)
    assert "Neuron SDK 2.30.0 has no training path on trn2" in line and "(fix: use TorchTitan Neuron" in line
    spec.update(instance_type="ml.trn1.32xlarge", region="us-east-1")  # Trn1: the 2.28 line is its last
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    (line,) = _errors(path)
    assert "no training path on trn1" in line and "(fix: use the 2.28 line, Trn1's last for training" in line


def test_the_templates_pins_are_on_lines_aws_still_supports():
    for template in sorted(TEMPLATES.glob("*.yaml")):
        done = run_cli("validate", str(template))
        assert not re.search(r"has no [\w-]+ path on ", done.stdout + done.stderr), template
