"""The DLC's install of our server, resolved by pip for the image's own Python (issue 22's first failure, for real):
``pip install --dry-run`` with ``--python-version`` of the image, manylinux wheels only, reads code/requirements.txt's
constraints and our wheel the way the image's pip will. This machine's pins cannot be installed on the 2.21 image's
Python 3.10 (starlette and uvicorn need 3.11); the bundle's can. Needs the package index (the registry), as the
container's own install does."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.bundle import bundle_code

from neurondeploy.compiler.remote import stage_job_source
from neurondeploy.resources.release import deployment_release, serving_piece
from neurondeploy.specs import LoadedSpec, load_spec
from neurondeploy.wheel import toolkit_wheel

pytestmark = pytest.mark.integration
TEMPLATE = Path(__file__).parents[2] / "templates" / "minilm-sagemaker.yaml"
# Ubuntu 22.04 / 24.04 (the DLCs' bases) have glibc 2.35 / 2.39: manylinux wheels up to those
PLATFORMS = ["manylinux_2_35_x86_64", "manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"]


def resolve(code: Path, constraints: Path, python: str, *image_has: str) -> subprocess.CompletedProcess:
    """pip's resolution of the bundle's install on ``python``, with ``image_has`` ("name==version") standing for
    what the image has installed (held: the resolution must keep them)."""
    major_minor = ".".join(python.split(".")[:2])
    platforms = [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--ignore-installed"]
    command += ["--report", str(code.parent / "report.json"), "--only-binary=:all:", "--implementation", "cp"]
    command += [
        "--python-version",
        major_minor,
        *platforms,
        "-c",
        str(constraints),
        str(code / toolkit_wheel().filename),
        *image_has,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.parametrize("pin", ["2.21.0", None], ids=["2.21 (Python 3.10)", "unpinned"])
def test_the_bundles_install_resolves_on_the_images_python(tmp_path, pin):
    spec = load_spec(TEMPLATE).spec.model_copy(update={"neuron_sdk_version": pin})
    image = serving_piece(spec)
    python = image.python
    code = bundle_code(tmp_path, image)
    resolved = resolve(code, code / "constraints.txt", python)
    assert resolved.returncode == 0, resolved.stderr[-2000:]
    installed = {
        item["metadata"]["name"].lower() for item in json.loads((code.parent / "report.json").read_text())["install"]
    }
    assert {"neurondeploy", "starlette", "uvicorn", "pydantic"} <= installed
    if python.startswith("3.10"):  # the control: this machine's own pins are what the image could not install
        mine = tmp_path / "mine.txt"
        mine.write_text(toolkit_wheel().constraints)
        refused = resolve(code, mine, python)
        assert refused.returncode != 0 and "ResolutionImpossible" in refused.stderr


# What an image built before this machine's pins has of the packages its Dockerfile installs unpinned (boto3, six):
# older releases within neurondeploy's ranges (boto3>=1.35). Not the images' exact versions (their Dockerfiles do
# not pin them): any the ranges admit must stay.
IMAGE_HAS = ("boto3==1.35.0", "six==1.16.0")


@pytest.mark.parametrize("pin", ["2.21.0", None], ids=["2.21 (Python 3.10)", "unpinned"])
def test_the_bundles_install_keeps_the_packages_the_image_has(tmp_path, pin):
    """The image's own boto3 and six are never upgraded or downgraded by our install: pip, holding them, resolves
    the bundle and keeps them; this machine's pins (boto3==<newest>) would replace them, and cannot hold them."""
    spec = load_spec(TEMPLATE).spec.model_copy(update={"neuron_sdk_version": pin})
    image = serving_piece(spec)
    code = bundle_code(tmp_path, image)
    resolved = resolve(code, code / "constraints.txt", image.python, *IMAGE_HAS)
    assert resolved.returncode == 0, resolved.stderr[-2000:]
    versions = {
        item["metadata"]["name"].lower(): item["metadata"]["version"]
        for item in json.loads((code.parent / "report.json").read_text())["install"]
    }
    assert {f"{name}=={versions[name]}" for name in ("boto3", "six")} == set(IMAGE_HAS)
    mine = tmp_path / "mine.txt"
    mine.write_text(toolkit_wheel().constraints)
    refused = resolve(code, mine, image.python, *IMAGE_HAS)
    assert refused.returncode != 0 and "ResolutionImpossible" in refused.stderr


def test_the_compile_jobs_requirements_resolve_to_transformers_4_on_the_2_21_image(tmp_path):
    """The training DLC of 2.21 runs Python 3.10.12 and torch 2.5.1: pip, asked for what the job's requirements.txt
    asks, takes a transformers 4 there (uncapped it took 5.20.2, which turns torch < 2.6 off)."""
    loaded = load_spec(TEMPLATE)
    spec = loaded.spec.model_copy(update={"neuron_sdk_version": "2.21.0"})
    stage_job_source(LoadedSpec(spec, loaded.source, loaded.path, loaded.digest), tmp_path / "job")
    python = deployment_release(spec).compile_image.python
    platforms = [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    report = tmp_path / "report.json"
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--ignore-installed", "--report"]
    command += [str(report), "--only-binary=:all:", "--implementation", "cp", "--python-version", python[:4]]
    command += [*platforms, "-r", str(tmp_path / "job" / "requirements.txt")]
    resolved = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert resolved.returncode == 0, resolved.stderr[-2000:]
    versions = {
        item["metadata"]["name"].lower(): item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }
    assert versions["transformers"].startswith("4."), versions["transformers"]
