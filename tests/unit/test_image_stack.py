"""The serving stack a replayed inference DLC runs (replay.image_stack): the image's own versions from its
catalogue row; the dev extras carry the newest image's, so its replay installs nothing."""

from __future__ import annotations

import re
from pathlib import Path

import tomllib

from neurondeploy import catalog
from neurondeploy.replay.hosting import stack_note
from neurondeploy.replay.image_stack import image_stack

REGISTRY = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-inference-neuronx"
INFERENCE = [row for row in catalog.dlc_releases() if row.repository == "pytorch-inference-neuronx"]


def _dev_pins() -> dict[str, str]:
    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"]
    pins = (re.fullmatch(r"([A-Za-z0-9_.-]+)==([\w.]+)", spec) for spec in project["optional-dependencies"]["dev"])
    return {found.group(1): found.group(2) for found in pins if found}


def test_each_image_gets_its_own_rows_versions():
    for row in INFERENCE:
        stack = image_stack(f"{REGISTRY}:{row.tag}")
        assert stack.versions == {
            "torchserve": row.torchserve,
            "torch-model-archiver": row.torchserve,  # the Dockerfile installs both at TORCHSERVE_VERSION
            "sagemaker-pytorch-inference": row.sagemaker_toolkit,
        }
        assert row.source in stack.source
    assert image_stack(f"{REGISTRY}:9.9.9-neuronx-py312-sdk9.9.9-ubuntu24.04") is None
    assert "this machine's versions" in stack_note(None)


def test_the_dev_extras_carry_the_newest_images_stack_so_its_replay_installs_nothing():
    newest = max(INFERENCE, key=lambda row: catalog.version_tuple(row.sdk))
    stack = image_stack(f"{REGISTRY}:{newest.tag}")
    pins = _dev_pins()
    assert {name: pins.get(name) for name in stack.versions} == stack.versions
    assert stack.missing_here() == {}  # installed as pinned
