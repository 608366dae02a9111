"""The vLLM Neuron DLC rows (data/vllm_releases.yaml): consistent with their own tags, the line each instance family
gets, the refusal of a release whose images do not serve the family; the file is what the DLC repository says where
NEURON_DLC_REPO names a clone of it; a README row whose Dockerfile is not at its tag is left out, and said."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from neurondeploy import catalog
from neurondeploy.catalog import dlc_releases_source
from neurondeploy.errors import CatalogError

DATA = Path(catalog.__file__).parent / "data" / "vllm_releases.yaml"
ROWS = catalog.vllm_releases()


@pytest.mark.parametrize("row", ROWS, ids=[row.tag for row in ROWS])
def test_each_row_agrees_with_its_own_image_tag(row):
    parsed = re.fullmatch(r"([\d.]+)-neuronx-py(\d)(\d+)-sdk([\d.]+)-ubuntu([\d.]+)", row.tag)
    assert parsed, row.tag
    vllm, major, minor, sdk, ubuntu = parsed.groups()
    assert (row.vllm, row.sdk, row.ubuntu, row.repository) == (vllm, sdk, ubuntu, catalog.VLLM_REPOSITORY)
    assert row.python.split(".")[:2] == [major, minor]
    assert row.source.startswith(f"vllm/inference/{row.vllm}/") or row.source.startswith("docker/vllm/inference/")
    assert row.source.endswith(f"@ {row.sdk}") and row.instances and row.neuron_runtime


def _newest(family: str) -> catalog.VllmRelease:
    return max((row for row in ROWS if row.serves(family)), key=lambda row: catalog.version_tuple(row.sdk))


def test_inf2_and_trn1_are_last_listed_by_the_0_16_line_and_trn2_by_the_newest():
    for family in ("inf2", "trn1", "trn1n"):
        last = _newest(family)
        assert last.sdk == _newest("inf2").sdk == _newest("trn1").sdk
        assert last.vllm == "0.16.0" and last.python.startswith("3.12.")  # the last Inf2/Trn1 line
        assert last.neuronx_distributed_inference  # on the NxD Inference backend
    trn2 = _newest("trn2")
    assert trn2.sdk == max((r.sdk for r in ROWS), key=catalog.version_tuple)
    assert "inf2" not in trn2.instances and trn2.python.startswith("3.13.")
    # no image after the 0.16.0 line serves Inf2
    assert all(r.vllm.startswith(("0.7.", "0.9.", "0.11.", "0.13.", "0.16.")) for r in ROWS if "inf2" in r.instances)


def _vllm_spec(instance: str, sdk: str | None = None) -> str:
    pin = f"neuron_sdk_version: {sdk}\n" if sdk else ""
    return f"""kind: inference
name: vn
region: us-east-1
task: text-generation
{pin}model: {{hf_model_id: meta-llama/Llama-3.1-8B-Instruct, dtype: bfloat16}}
compile: {{batch_sizes: [4], sequence_lengths: [4096]}}
deployment:
  platform: sagemaker
  instance_type: {instance}
  tensor_parallel: 2
  container: {{kind: vllm-neuron, image_uri: 123456789012.dkr.ecr.us-east-1.amazonaws.com/w:1, compile_at_start: true}}
  health_check_timeout_s: 3600
"""


def test_the_release_matrix_chooses_the_image_a_sagemaker_host_can_run_and_refuses_one_that_skips_the_family(
    tmp_path,
):
    from neurondeploy.resources.release import deployment_release
    from neurondeploy.specs import parse_spec

    def release(instance: str, sdk: str | None = None):
        return deployment_release(parse_spec(_vllm_spec(instance, sdk), path=tmp_path / "vn.yaml").spec)

    # SageMaker's host driver (2.19) takes no runtime of SDK 2.30+: the newest 0.16.0 image it can run is 2.29.1's,
    # not the table's newest Inf2 row
    chosen = release("ml.inf2.8xlarge")
    assert chosen.sdk == "2.29.1" != _newest("inf2").sdk
    assert chosen.piece("serving image").base == "0.16.0-neuronx-py312-sdk2.29.1-ubuntu24.04"
    trn2_only = _newest("trn2").sdk
    with pytest.raises(CatalogError) as refused:
        release("ml.inf2.8xlarge", trn2_only)
    assert f"{trn2_only}: its {catalog.VLLM_REPOSITORY} images do not list inf2 instances" in refused.value.message
    assert "2.29.1" in refused.value.hint


@pytest.mark.skipif(
    not os.environ.get("NEURON_DLC_REPO"), reason="NEURON_DLC_REPO names no clone of the DLC repository"
)
def test_the_file_is_what_the_repository_says():
    assert dlc_releases_source.render(Path(os.environ["NEURON_DLC_REPO"]), vllm=True) == DATA.read_text()


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def test_a_row_linking_a_dockerfile_its_tag_lacks_is_left_out_and_said(tmp_path):
    """The DLC README lists vLLM 0.13.0 at SDK 2.27.1 linking a Dockerfile that tag does not hold: a small
    repository with that shape, one row with its Dockerfile and one without."""
    repo = tmp_path / "dlc"
    (repo / "vllm" / "inference" / "0.11.0").mkdir(parents=True)
    (repo / "vllm" / "inference" / "0.11.0" / "Dockerfile.neuronx").write_text(
        "FROM public.ecr.aws/docker/library/ubuntu:24.04 AS base\nARG PYTHON_VERSION=3.12.11\n"
        "ARG NEURONX_RUNTIME_LIB_VERSION=2.29.40.0-f954cd7a5\n"
    )
    link = "https://github.com/aws-neuron/deep-learning-containers/blob/2.27.1/vllm/inference/{}/Dockerfile.neuronx"
    image = "public.ecr.aws/neuron/pytorch-inference-vllm-neuronx:{}-neuronx-py312-sdk2.27.1-ubuntu24.04"
    rows = [
        f"| [VLLM {v}]({link.format(v)}) | vllm | Neuron 2.27.1 | trn1,inf2 | 3.12 | {image.format(v)} |"
        for v in ("0.11.0", "0.13.0")
    ]
    (repo / "README.md").write_text("### vllm-inference-neuronx\n\n| h |\n|---|\n" + "\n".join(rows) + "\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "r")
    _git(repo, "tag", "2.27.1")
    rendered = dlc_releases_source.render(repo, vllm=True)
    assert "# left out, its README link names no Dockerfile: 0.13.0-neuronx-py312-sdk2.27.1-ubuntu24.04" in rendered
    assert "tag: 0.11.0-neuronx-py312-sdk2.27.1-ubuntu24.04" in rendered and "tag: 0.13.0-" not in rendered
