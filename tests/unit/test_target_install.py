"""What we install on a target is installable on the target's Python, not this interpreter's (issue 22).

The reported failure: model.tar.gz's code/constraints.txt pinned what this machine has (starlette 1.10.0 and
uvicorn 0.55.0, which need Python >= 3.11) while the 2.21 inference DLC runs Python 3.10.12 (its Dockerfile): the
toolkit's requirements install fails and the container exits. Each pin's Requires-Python is read from the
distribution installed here, the same metadata pip reads on the target."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
from pathlib import Path

import pytest
from support.bundle import bundle_code

from neurondeploy import catalog
from neurondeploy.compiler.remote import stage_job_source
from neurondeploy.planner.context import plan_context, toolkit_values
from neurondeploy.planner.plan import build_plan
from neurondeploy.resources.model import DLAMI_SSM_PARAMETER
from neurondeploy.resources.release import deployment_release, instance_piece
from neurondeploy.specs import LoadedSpec, load_spec
from neurondeploy.wheel import constraints_for, held_names, toolkit_wheel, version_admits

TEMPLATE = Path(__file__).parents[2] / "templates" / "minilm-sagemaker.yaml"


def serving_image(pin: str | None):
    spec = load_spec(TEMPLATE).spec.model_copy(update={"neuron_sdk_version": pin})
    return deployment_release(spec).piece("serving image")


@pytest.mark.parametrize("pin", ["2.21.0", None], ids=["2.21 (Python 3.10)", "unpinned"])
def test_the_bundles_constraints_install_on_the_images_python(tmp_path, pin):
    image = serving_image(pin)
    python = image.python
    code = bundle_code(tmp_path, image)
    pins = [line.split("==") for line in (code / "constraints.txt").read_text().splitlines() if "==" in line]
    assert pins
    for name, version in pins:
        requires_python = importlib.metadata.metadata(name)["Requires-Python"]
        assert importlib.metadata.version(name) == version
        assert version_admits(requires_python, python), (
            f"{name}=={version} needs Python {requires_python}, not {python}"
        )


@pytest.mark.parametrize(
    ("requires", "python", "admits"),
    [
        (">=3.11", "3.10.12", False),
        (">=3.11", "3.12.11", True),
        (">=3.10", "3.10", True),
        (">=3.8,<3.11", "3.12", False),
        ("!=3.0.*,!=3.1.*,>=2.7", "3.10.12", True),
        ("~=3.10", "3.12.1", True),
        ("==3.10.*", "3.11.2", False),
        (None, "3.10", True),
        ("", "3.10", True),
    ],
)
def test_requires_python_is_read_as_pip_reads_it(requires, python, admits):
    assert version_admits(requires, python) is admits


def staged_requirements(tmp_path, pin: str | None) -> list[str]:
    loaded = load_spec(TEMPLATE)
    spec = loaded.spec.model_copy(update={"neuron_sdk_version": pin})
    stage_job_source(LoadedSpec(spec, loaded.source, loaded.path, loaded.digest), tmp_path / "job")
    return (tmp_path / "job" / "requirements.txt").read_text().splitlines()


def test_the_compile_job_keeps_transformers_4_where_the_images_torch_is_older_than_2_6(tmp_path):
    """The reported failure: the job asked for transformers>=4.40 uncapped; on the 2.21 training DLC's Python 3.10
    pip takes transformers 5.20.2, which turns PyTorch off below 2.6, and that image's torch is 2.5.1."""
    spec = load_spec(TEMPLATE).spec.model_copy(update={"neuron_sdk_version": "2.21.0"})
    assert deployment_release(spec).compile_image.torch == "2.5.1"
    (transformers,) = [r for r in staged_requirements(tmp_path, "2.21.0") if r.startswith("transformers")]
    wanted = transformers.removeprefix("transformers")
    assert not version_admits(wanted, "5.20.2") and version_admits(wanted, "4.57.1")
    # torch 2.9 (the newest training DLC) takes transformers 5 within the compile extra's range
    (newest,) = [r for r in staged_requirements(tmp_path / "new", None) if r.startswith("transformers")]
    assert version_admits(newest.removeprefix("transformers"), "5.20.2")


def test_ec2_instances_get_the_constraints_for_their_dlamis_python():
    """What the plan's user data checks (the constraints' sha256) is this machine's pins as the DLAMI's Python can
    install them; a DLAMI the catalogue does not know keeps this machine's."""
    loaded = load_spec(TEMPLATE.parent / "minilm-ec2-alb.yaml")
    instances = instance_piece(loaded.spec, DLAMI_SSM_PARAMETER)
    assert instances.python == catalog.dlami(DLAMI_SSM_PARAMETER).python
    constraints = toolkit_wheel().constraints
    expected = hashlib.sha256(constraints_for(constraints, instances.python).text.encode()).hexdigest()
    assert plan_context(loaded).toolkit_constraints_sha256 == expected
    unknown = plan_context(loaded, ami_ssm_parameter="/my/ami").toolkit_constraints_sha256
    assert unknown == hashlib.sha256(constraints.encode()).hexdigest()
    # a Python that cannot take every pin gets fewer: the hash follows the target
    older = dataclasses.replace(instances, python="3.10.12")
    assert toolkit_values(older)["toolkit_constraints_sha256"] != toolkit_values(None)["toolkit_constraints_sha256"]


def test_what_a_held_package_requires_is_held_only_for_the_version_installed_here():
    """The 2.21 image's transformers is 4.45.*: what another version (this machine's) requires says nothing of it."""
    here = importlib.metadata.version("transformers")
    assert "huggingface-hub" in held_names(["transformers"])
    assert held_names([f"transformers=={here}"]) == held_names(["transformers"])
    assert held_names([f"transformers!={here}"]) == {"transformers"} != held_names(["transformers"])


@pytest.mark.parametrize("pin", ["2.21.0", None], ids=["2.21", "unpinned"])
def test_the_bundle_pins_nothing_the_image_has(tmp_path, pin):
    """What the image's Dockerfile pip-installs (boto3, six, ...), its torch, and what those require as installed
    here, is the image's: the bundle's constraints leave it as it is there, and plan says so."""
    image = serving_image(pin)
    assert {"boto3", "six", "torch", "torchserve==0.11.0"} <= set(image.held)
    constraints = (bundle_code(tmp_path, image) / "constraints.txt").read_text()
    pinned = {line.partition("==")[0] for line in constraints.splitlines()}
    theirs = held_names(image.held)
    assert {"boto3", "botocore", "s3transfer", "six", "typing-extensions"} <= theirs
    assert pinned & theirs == set()
    assert {"starlette", "uvicorn", "pydantic"} & pinned  # what the image lacks stays pinned where it can be
    spec = load_spec(TEMPLATE).spec.model_copy(update={"neuron_sdk_version": pin})
    loaded = load_spec(TEMPLATE)
    planned = build_plan(LoadedSpec(spec, loaded.source, loaded.path, loaded.digest)).release
    (note,) = [note for note in planned.notes if note.startswith("the serving image has ")]
    assert "boto3" in note and "six" in note
    (piece,) = [piece for piece in planned.pieces if piece.role == "serving image"]
    assert piece.held == list(image.held)
