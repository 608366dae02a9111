"""The Neuron DLC release rows (catalog/data/dlc_releases.yaml): each consistent with its own image tag, and, where
NEURON_DLC_REPO names a clone of github.com/aws-neuron/deep-learning-containers, exactly what the generator reads
from that repository's README tables and Dockerfiles."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from neurondeploy import catalog
from neurondeploy.catalog import dlc_releases_source

DATA = Path(catalog.__file__).parent / "data" / "dlc_releases.yaml"
ROWS = catalog.dlc_releases()


@pytest.mark.parametrize("row", ROWS, ids=[f"{r.repository}:{r.tag}" for r in ROWS])
def test_each_row_agrees_with_its_own_image_tag(row):
    parsed = re.fullmatch(r"([\d.]+)-neuronx-py(\d)(\d+)-sdk([\d.]+)-ubuntu([\d.]+)", row.tag)
    assert parsed, row.tag
    torch, major, minor, sdk, ubuntu = parsed.groups()
    assert (row.torch, row.sdk, row.ubuntu) == (torch, sdk, ubuntu)
    assert row.python.split(".")[:2] == [major, minor]  # py312 is Python 3.12.x
    assert row.torch_neuronx is None or row.torch_neuronx.startswith(row.torch)  # torch-neuronx <torch>.<neuron>
    assert (row.torchserve is not None) == (row.repository == "pytorch-inference-neuronx")
    assert row.instances and row.source.endswith(f"@ {row.sdk}")


def test_rows_are_unique_and_cover_both_repositories():
    keys = [(r.repository, r.tag) for r in ROWS]
    assert len(keys) == len(set(keys))
    assert {r.repository for r in ROWS} == set(dlc_releases_source.REPOSITORIES)


@pytest.mark.skipif(
    not os.environ.get("NEURON_DLC_REPO"), reason="NEURON_DLC_REPO names no clone of the DLC repository"
)
def test_the_file_is_what_the_repository_says():
    assert dlc_releases_source.render(Path(os.environ["NEURON_DLC_REPO"])) == DATA.read_text()


DOCKERFILE = """ARG TORCHSERVE_VERSION=0.11.0
RUN ${PIP} install --no-cache-dir -U \\
    boto3 \\
    "transformers==4.45.*" \\
    torchserve==${TORCHSERVE_VERSION} \\
 && rm -rf ~/.cache/pip/*
RUN pip install --no-cache-dir "sagemaker-pytorch-inference==2.0.25" \\
 # patch the handler: a comment line inside the RUN
 && sed -i "s/import torch/import torch, torch_neuronx/" handler.py
RUN ${PIP} install --no-cache-dir \\
   --index-url ${PIP_REPO_URL} --trusted-host ${NEURON_PIP_REPO} \\
   neuronx_cc==$NEURONX_CC_VERSION Torch-Neuronx
RUN ${PIP} install neuronx-cc
"""


def test_the_generator_reads_what_the_dockerfiles_pip_install_lines_name():
    args = {"TORCHSERVE_VERSION": "0.11.0", "NEURONX_CC_VERSION": "2.26.6360.0+6f180f47"}
    assert dlc_releases_source.pip_installed(DOCKERFILE, args) == [
        "boto3",
        "neuronx-cc==2.26.6360.0",  # the pinned line wins over a later bare name; the +build suffix dropped
        "sagemaker-pytorch-inference==2.0.25",
        "torch-neuronx",
        "torchserve==0.11.0",
        "transformers==4.45.*",
    ]
