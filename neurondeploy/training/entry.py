"""What local and SageMaker training runs share about a spec: its entry script and ``--hp`` overrides."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from neurondeploy.errors import SpecError
from neurondeploy.planner.checks import source_dir_problem
from neurondeploy.specs.training import TrainingSpec

# The reference training script (train.py, tiny_lm.py), which specs name as pkg://neurondeploy/training/reference.
REFERENCE_DIR = Path(__file__).resolve().parent / "reference"


def parse_override(value: Any) -> Any:
    """``--hp`` values as a SageMaker SDK user writes them: numbers and booleans are JSON, anything else a string
    (the CLI passes them as typed; Python callers may pass typed values; lists, objects and null stay as their JSON text)."""
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            return value
        return parsed if isinstance(parsed, (bool, int, float, str)) else value
    return value if isinstance(value, (bool, int, float)) else json.dumps(value)


def with_overrides(loaded, overrides: dict[str, Any]):
    """The loaded spec with ``--hp`` overrides merged into its hyperparameters."""
    if not overrides:
        return loaded
    merged = {**loaded.spec.hyperparameters, **{key: parse_override(value) for key, value in overrides.items()}}
    try:
        TrainingSpec._hyperparameters(merged)
    except ValueError as exc:
        message = str(exc)  # the screening's refusals name their own fix; the rest get the syntax
        raise SpecError(f"--hp: {message}", None if "(fix: " in message else "e.g. --hp max_steps=20") from None
    overridden = tuple(sorted(set(loaded.overrides) | set(overrides)))
    spec = loaded.spec.model_copy(update={"hyperparameters": merged})
    return dataclasses.replace(loaded, spec=spec, overrides=overridden)


def source_directory(loaded) -> Path:
    """The spec's source_dir (relative to the spec file), refused unless it holds the entry point."""
    spec = loaded.spec
    problem = source_dir_problem(loaded)
    if problem:
        raise SpecError(f"{loaded.source.file}: {problem[0]}", problem[1])
    directory = spec.resolved_source_dir(loaded.base_dir).resolve()
    if not (directory / spec.entry_point).is_file():
        raise SpecError(
            f"{loaded.source.file}: entry_point {spec.entry_point} is not in source_dir {directory}",
            "fix source_dir (relative to the spec file) or entry_point",
        )
    return directory
