"""model.tar.gz's code/ (what the DLC's toolkit installs) for a stand-in artifact: only its manifest, since the
install does not read the compiled modules."""

from __future__ import annotations

from pathlib import Path

from neurondeploy.engine.model_bundle import dlc_model_dir
from neurondeploy.resources.release import Piece
from neurondeploy.wheel import toolkit_wheel


def bundle_code(tmp_path: Path, image: Piece | None) -> Path:
    """The code/ directory apply would pack for ``image`` (the release's serving piece)."""
    artifact = tmp_path / "artifact"
    artifact.mkdir()
    (artifact / "manifest.json").write_text("{}")
    return dlc_model_dir(artifact, toolkit_wheel(), image) / "code"
