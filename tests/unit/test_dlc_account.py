"""An image tag SageMaker cannot pull (not in AWS's list of the DLC account's images, data/dlc_account_tags.yaml) is
refused for a SageMaker job or endpoint before anything runs, naming the nearest release whose tag is there; the
NxD Training examples' version is checked against the library the training image ships."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml
from support.cli import run_cli

from neurondeploy import catalog
from neurondeploy.catalog import account_tags
from neurondeploy.catalog.dlc_account_source import listed_tags

TEMPLATES = Path(__file__).parents[2] / "templates"
NXDT = TEMPLATES / "llama3-70b-pretrain-trn1-nxdt.yaml"


def _pinned(tmp_path: Path, sdk: str, examples_version: str | None = None) -> Path:
    spec = yaml.safe_load(NXDT.read_text())
    spec["neuron_sdk_version"] = sdk
    path = tmp_path / "nxdt.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    if examples_version:
        clone = tmp_path / "neuronx-distributed-training"
        (clone / "examples").mkdir(parents=True)
        (clone / "examples" / "training_orchestrator.py").write_text("# stand-in\n")
        version = clone / "src" / "neuronx_distributed_training" / "_version.py"
        version.parent.mkdir(parents=True)
        version.write_text(f'__version__ = "{examples_version}"\n')
    return path


def test_a_sagemaker_pin_whose_tag_is_not_in_the_dlc_account_is_refused_naming_the_nearest(tmp_path):
    done = run_cli("validate", str(_pinned(tmp_path, "2.27.0")))
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and len(errors) == 1, done.stderr
    assert "2.9.0-neuronx-py312-sdk2.27.0-ubuntu24.04 is not in the DLC account SageMaker pulls from" in errors[0]
    assert "(fix: set neuron_sdk_version to 2.27.1, the nearest release that has them all (of " in errors[0]


def test_the_nxd_training_template_validates_without_such_a_refusal():
    done = run_cli("validate", str(NXDT))
    assert done.returncode == 0 and "DLC account" not in done.stderr, done.stderr


def test_a_tag_older_than_the_list_is_neither_confirmed_nor_refused():
    assert (
        catalog.sagemaker_pull_problem("pytorch-training-neuronx", "2.5.1-neuronx-py310-sdk2.21.0-ubuntu22.04") is None
    )
    listed = account_tags.listed_tags("pytorch-training-neuronx")
    assert all(catalog.sagemaker_pull_problem("pytorch-training-neuronx", tag) is None for tag in listed)


def test_examples_of_another_nxd_training_version_than_the_image_ships_are_said(tmp_path):
    older = _pinned(tmp_path, "2.27.1", examples_version="1.6.0")
    done = run_cli("validate", str(older))
    (line,) = [line for line in (done.stdout + done.stderr).splitlines() if "source_dir:" in line]
    assert (
        line.startswith("warning:")
        and "examples in source_dir are 1.6.0" in line
        and "ships NxD Training 1.7.0" in line
    )
    assert "pin neuron_sdk_version: 2.26.1 (its image ships 1.6.0)" in line
    matching = _pinned(tmp_path, "2.26.1")
    again = run_cli("validate", str(matching))
    assert again.returncode == 0 and "source_dir:" not in again.stdout + again.stderr


@pytest.mark.skipif(
    not os.environ.get("AWS_DLC_REPO"), reason="AWS_DLC_REPO names no clone of aws/deep-learning-containers"
)
def test_the_listed_tags_are_the_repositorys():
    repo = Path(os.environ["AWS_DLC_REPO"])
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    data = yaml.safe_load((Path(catalog.__file__).parent / "data" / "dlc_account_tags.yaml").read_text())
    if head == data["commit"]:
        assert listed_tags(repo) == data
