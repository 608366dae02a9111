"""One Neuron SDK release per deployment (resources.release): for every template, unpinned and pinned to the oldest
and newest release the matrix lists, the plan's images, the DLAMI, the artifact's SDK and the compile job's image
all come from one row, and each piece is a row of the catalogue's source data; a pin that lacks a piece is refused
by validate in one line that names releases which have them all."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from support.cli import run_cli

from neurondeploy import catalog
from neurondeploy.errors import CatalogError
from neurondeploy.planner.artifact_target import artifact_sdk
from neurondeploy.planner.plan import build_plan
from neurondeploy.resources.model import PlanContext
from neurondeploy.resources.release import deployment_release
from neurondeploy.resources.sagemaker_compile import CompileJob, compile_deployment, compile_job_resources
from neurondeploy.specs import LoadedSpec, load_spec

TEMPLATES = sorted((Path(__file__).parents[2] / "templates").glob("*.yaml"))
VERSIONS = sorted({row.sdk for row in catalog.dlc_releases()}, key=catalog.version_tuple)
PINS = [None, VERSIONS[0], VERSIONS[-1]]  # unpinned, the oldest and the newest release the matrix lists
DLC_TAG = re.compile(r"pytorch-(?:inference|training)-neuronx:([\w.-]+)")
CTX = PlanContext(account_id="123456789012", run_id="20261206-090000", source_digest="0123456789abcdef")


def pinned(template: Path, pin: str | None) -> LoadedSpec:
    loaded = load_spec(template)
    spec = loaded.spec.model_copy(update={"neuron_sdk_version": pin})
    return LoadedSpec(spec, loaded.source, loaded.path, loaded.digest)


def dlc_row(tag: str) -> catalog.DlcRelease:
    rows = [row for row in catalog.dlc_releases() if row.tag == tag]
    assert len(rows) <= 2, tag  # one inference and one training row may share a tag
    assert rows, f"{tag} is no row of data/dlc_releases.yaml"
    return rows[0]


@pytest.mark.parametrize("pin", PINS, ids=lambda p: p or "unpinned")
@pytest.mark.parametrize("template", TEMPLATES, ids=[t.name for t in TEMPLATES])
def test_every_piece_comes_from_one_release(template, pin):
    loaded = pinned(template, pin)
    try:
        release = deployment_release(loaded.spec)
    except CatalogError as refused:
        # Refused: the fix names releases that do have every piece, and each of them resolves.
        named = re.findall(r"\d+\.\d+\.\d+", refused.hint)
        assert named, refused.hint
        for version in named:
            assert deployment_release(loaded.spec.model_copy(update={"neuron_sdk_version": version})).sdk == version
        return
    if pin and len(catalog.version_tuple(pin)) == 3 and release.pieces:
        assert release.sdk == pin
    built = build_plan(loaded)
    assert built.release.neuron_sdk == release.sdk  # what plan shows
    assert [(p.role, p.name) for p in built.release.pieces] == [(p.role, p.name) for p in release.pieces]
    plan = json.dumps([r.model_dump() for r in built.resources])
    for tag in DLC_TAG.findall(plan):  # every DLC the plan names: the release's row
        assert dlc_row(tag).sdk == release.sdk, (tag, release.sdk)
    for piece in release.pieces:
        if piece.role == "instance DLAMI":
            assert f'"Name": "{piece.name}"' in plan  # the SSM lookup reads this parameter
            assert catalog.minor(catalog.dlami(piece.name).sdk) == catalog.minor(release.sdk)
        elif any(row.tag == piece.name for row in catalog.dlc_releases()):
            row = dlc_row(piece.name)
            assert (row.sdk, row.python) == (release.sdk, piece.python)
        else:  # a Hugging Face image of the catalogue built for this release, or the spec's image built FROM it
            purpose = loaded.spec.container.image_purpose
            base = piece.name
            if piece.name == loaded.spec.deployment.container.image_uri:
                base = re.match(r"built FROM (\S+) ", piece.source)[1]
            assert [t.sdk for t in catalog.known_tags(purpose) if t.tag == base] == [release.sdk]
            assert piece.name in plan
    spec = loaded.spec
    if spec.kind == "inference" and spec.container.ours:
        assert artifact_sdk(spec) == release.sdk
        if release.compile_image is not None:
            job_spec = compile_deployment(spec)
            job = compile_job_resources(job_spec, CTX, CompileJob("a" * 64, "s3://b/c/d", artifact_sdk(spec)))
            image = next(r for r in job if r.name == "compile-job").create[0].params["AlgorithmSpecification"]
            assert image["TrainingImage"].endswith(f":{release.compile_image.tag}")
            assert release.compile_image.sdk == release.sdk


def test_unpinned_picks_the_newest_release_where_compile_remote_runs_too():
    """Unpinned: the newest release whose serving image SageMaker's Neuron host can run (its driver), with
    compile --remote in its training DLC or, from 2.31, its inference DLC."""
    sagemaker = deployment_release(load_spec(TEMPLATES[0].parent / "minilm-sagemaker.yaml").spec)
    host = catalog.inference_ami()
    inference = [row for row in catalog.dlc_releases() if row.repository == "pytorch-inference-neuronx"]
    runnable = [row.sdk for row in inference if catalog.driver_refusal(row.neuron_runtime, host) is None]
    assert sagemaker.sdk == max(runnable, key=catalog.version_tuple)
    assert len(runnable) < len(inference)  # the newest images' runtime needs a newer driver than SageMaker's
    assert sagemaker.compile_image is not None and sagemaker.compile_image.sdk == sagemaker.sdk
    # The EC2 instances' DLAMI decides theirs: its SDK line, whatever the DLC images are.
    ec2 = deployment_release(load_spec(TEMPLATES[0].parent / "minilm-ec2-alb.yaml").spec)
    assert catalog.minor(ec2.sdk) == catalog.minor(catalog.dlami(catalog.DEFAULT_DLAMI_PARAMETER).sdk)
    # 2.31 has no training DLC: the job compiles in the release's own inference DLC, the serving image itself
    assert ec2.compile_image.tag == next(row.tag for row in inference if row.sdk == ec2.sdk)


def test_validate_refuses_a_pin_whose_pieces_disagree(tmp_path):
    text = (TEMPLATES[0].parent / "minilm-ec2-alb.yaml").read_text()
    spec = tmp_path / "ec2.yaml"
    spec.write_text(re.sub(r"^kind: inference$", "kind: inference\nneuron_sdk_version: 2.21.0", text, flags=re.M))
    result = run_cli("validate", str(spec))
    assert result.returncode != 0 and "Traceback" not in result.stderr
    out = result.stdout + result.stderr
    assert "neuron_sdk_version" in out and "DLAMI" in out and "2.31" in out


def test_a_tgi_endpoint_runs_the_release_its_optimum_neuron_is_built_for(tmp_path):
    """The TGI images' tags name no SDK: each is its optimum-neuron release's (version.py's __sdk_version__), so an
    hf-tgi spec resolves to one of them, and a pin between them is refused naming those that have an image."""
    text = (TEMPLATES[0].parent / "llama3-8b-vllm-sagemaker.yaml").read_text().replace("kind: hf-vllm", "kind: hf-tgi")
    text = re.sub(r"^\s+(image_uri|env|HF_TOKEN):.*\n", "", text, flags=re.M)
    (tmp_path / "tgi.yaml").write_text(text)
    spec = load_spec(tmp_path / "tgi.yaml").spec
    tags = {tag.sdk: tag.tag for tag in catalog.known_tags("tgi")}
    release = deployment_release(spec)
    assert release.sdk == max(tags, key=catalog.version_tuple)
    assert release.piece("serving image").name == tags[release.sdk]
    oldest = min(tags, key=catalog.version_tuple)
    assert (
        deployment_release(spec.model_copy(update={"neuron_sdk_version": oldest})).piece("serving image").name
        == (tags[oldest])
    )
    with pytest.raises(CatalogError) as refused:
        deployment_release(spec.model_copy(update={"neuron_sdk_version": "2.26.1"}))
    assert "huggingface-pytorch-tgi-inference" in refused.value.message
    assert set(re.findall(r"\d+\.\d+\.\d+", refused.value.hint)) == set(tags)


def test_the_secrets_wrapper_runs_the_release_of_the_image_it_is_built_from():
    """The vLLM template names its infra/hf-secrets image: built FROM the catalogue's hf-vllm image, so the
    deployment (its export's SDK, the host check) is that image's release, not the newest the path allows."""
    spec = load_spec(TEMPLATES[0].parent / "llama3-8b-vllm-sagemaker.yaml").spec
    release = deployment_release(spec)
    vllm = catalog.known_tags("vllm")[-1]  # the newest: what a deployment gets
    assert release.sdk == vllm.sdk
    assert release.piece("serving image").name == spec.deployment.container.image_uri
    assert f"built FROM {vllm.tag} " in release.piece("serving image").source
    assert release.host and catalog.SAGEMAKER_INFERENCE_AMI in release.host
