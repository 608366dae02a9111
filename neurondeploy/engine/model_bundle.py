"""model.tar.gz for an encoder on AWS's Neuron inference DLC: the compiled artifact, plus ``code/`` as the DLC's
PyTorch inference toolkit reads it: ``inference.py`` (``SAGEMAKER_PROGRAM``: neurondeploy's handler functions),
``requirements.txt`` (installed when the container starts: this toolkit's exact wheel, shipped beside it, with the
constraints of its runtime dependencies)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from neurondeploy.archive import packed_files
from neurondeploy.resources.compute import CONSTRAINTS_FILE
from neurondeploy.resources.release import Piece, target_constraints
from neurondeploy.resources.sagemaker_endpoint import DLC_CODE_DIR, DLC_PROGRAM
from neurondeploy.wheel import ToolkitWheel

HANDLER = "from neurondeploy.serving.sagemaker_handler import model_fn, transform_fn  # noqa: F401\n"
# TorchServe's own handler for the model directory (its ModelArchive reads MAR-INF/MANIFEST.json there before the
# default service handler the toolkit configures): ours, which batches (serving/sagemaker_handler.handle). Version
# 1.0 is the one the toolkit's per-model config names (sagemaker_pytorch_serving_container/torchserve.py).
TORCHSERVE_MANIFEST = {
    "createdOn": "01/01/2026 00:00:00",
    "runtime": "python",
    "model": {"modelName": "model", "handler": "neurondeploy.serving.sagemaker_handler:handle", "modelVersion": "1.0"},
    "archiverVersion": "0.11.0",
}


def requirements(wheel: ToolkitWheel) -> str:
    # -c is read relative to this file; the wheel by the path SageMaker unpacks the model to.
    return f"-c {CONSTRAINTS_FILE}\n{DLC_CODE_DIR}/{wheel.filename}\n"


def link_or_copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)  # compiled modules are large: no second copy on disk
    except OSError:
        shutil.copy2(source, target)


def dlc_model_dir(artifact_dir: Path, wheel: ToolkitWheel, image: Piece | None) -> Path:
    """``<artifact>.sagemaker/`` beside the artifact: its files (hard links) and ``code/``, rebuilt each time (the
    same inputs give the same files, so the same digest and no second upload). ``image`` is the release's serving
    piece: code/constraints.txt keeps only pins its Python can install, and none of what it has; None (an image the
    spec names, which the catalogue does not know) keeps this machine's."""
    artifact_dir = Path(artifact_dir)
    target = artifact_dir.parent / f"{artifact_dir.name}.sagemaker"
    shutil.rmtree(target, ignore_errors=True)
    for path in packed_files(artifact_dir):
        link_or_copy(path, target / path.relative_to(artifact_dir))
    code = target / "code"
    code.mkdir(parents=True, exist_ok=True)
    (code / DLC_PROGRAM).write_text(HANDLER)
    (code / "requirements.txt").write_text(requirements(wheel))
    (code / CONSTRAINTS_FILE).write_text(target_constraints(wheel.constraints, image))
    (code / wheel.filename).write_bytes(wheel.data)
    manifest = target / "MAR-INF" / "MANIFEST.json"
    manifest.parent.mkdir(exist_ok=True)  # there already when the artifact given is itself such a directory
    manifest.unlink(missing_ok=True)  # a hard link to the given directory's own: never written through
    manifest.write_text(json.dumps(TORCHSERVE_MANIFEST, indent=2))
    return target
