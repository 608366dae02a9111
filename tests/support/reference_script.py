"""A training template beside its own copy of the reference script, for tests that change the job's code."""

from __future__ import annotations

import shutil
from pathlib import Path

from neurondeploy.specs.training import REFERENCE_SOURCE
from neurondeploy.training.entry import REFERENCE_DIR


def template_with_script_copy(template: Path, tmp_path: Path) -> Path:
    """``template`` written into ``tmp_path`` with source_dir ``training``, a copy of the reference script."""
    text = template.read_text()
    assert f"source_dir: {REFERENCE_SOURCE}" in text, template
    spec = tmp_path / template.name
    spec.write_text(text.replace(f"source_dir: {REFERENCE_SOURCE}", "source_dir: training", 1))
    shutil.copytree(REFERENCE_DIR, tmp_path / "training", ignore=shutil.ignore_patterns("__pycache__"))
    return spec
