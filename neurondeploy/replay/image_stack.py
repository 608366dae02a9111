"""The serving stack a Neuron inference DLC runs, installed for its replay: the image's own TorchServe,
torch-model-archiver and sagemaker-pytorch-inference versions (its Dockerfile's ``TORCHSERVE_VERSION``, used for both
TorchServe packages, and ``SM_TOOLKIT_VERSION``: github.com/aws-neuron/deep-learning-containers, e.g.
pytorch/inference/2.9.0/Dockerfile.neuronx at 2.31.1), read from the catalogue's row for the image's tag.

What differs from this machine's installed versions is pip-installed once (``--no-deps``, from the package index, as
the image's own build did) into a cached directory that the replay puts ahead of this machine's packages. Torch and
Python stay this machine's: the image's torch-neuronx build and its Python (3.10 to 3.12) do not install here."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from neurondeploy import catalog
from neurondeploy.paths import default_cache_dir
from neurondeploy.replay.sandbox import ReplayError


@dataclass(frozen=True)
class ImageStack:
    """The image's serving packages (distribution -> version) and the catalogue row's source."""

    image: str
    versions: dict[str, str]
    source: str

    def missing_here(self) -> dict[str, str]:
        """The packages whose installed version here is not the image's."""
        return {name: version for name, version in self.versions.items() if _installed(name) != version}


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def image_stack(image: str) -> ImageStack | None:
    """The serving stack of the inference DLC ``image`` (``...pytorch-inference-neuronx:<tag>``), or None when the
    catalogue has no row with its tag."""
    tag = image.rsplit(":", 1)[-1]
    for row in catalog.dlc_releases():
        if row.tag == tag and row.torchserve and row.sagemaker_toolkit:
            versions = {
                "torchserve": row.torchserve,
                "torch-model-archiver": row.torchserve,
                "sagemaker-pytorch-inference": row.sagemaker_toolkit,
            }
            return ImageStack(image, versions, f"{catalog.DLC_REPOSITORY} {row.source}")
    return None


def installed_overlay(stack: ImageStack) -> Path | None:
    """A directory holding the image's packages that differ from this machine's (installed once, then cached), for
    the replay's Python to see ahead of this machine's; None when nothing differs."""
    pins = sorted(f"{name}=={version}" for name, version in stack.missing_here().items())
    if not pins:
        return None
    key = hashlib.sha256(f"{sys.version_info[:2]}\n{chr(10).join(pins)}".encode()).hexdigest()[:16]
    overlay = default_cache_dir() / "replay-packages" / key
    if overlay.is_dir():
        return overlay
    overlay.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=overlay.parent))
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(staging), *pins]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ReplayError(
            f"installing the image's serving stack ({', '.join(pins)}) for its replay failed: {last}",
            "check that the package index is reachable (pip config), then replay again",
        )
    try:
        os.rename(staging, overlay)  # atomic: a concurrent replay that won keeps its copy
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
    return overlay
