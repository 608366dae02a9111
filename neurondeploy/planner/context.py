"""TODO docstring."""

from __future__ import annotations

from __future__ import annotations
import dataclasses
from neurondeploy.archive import artifact_digest
from neurondeploy.resources.model import PlanContext


_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "fp8": 1}


def plan_context(loaded, **overrides) -> PlanContext:
    """The offline context for ``loaded``: run id from the spec's digest (an unchanged spec re-planned gets the
    same job name; pass ``run_id`` for a new run), model size from its architecture when known."""
    values = {"run_id": loaded.digest[:8], "model_size_gib": _model_size_gib(loaded)}
    if "source_digest" not in overrides:  # hashing a source tree is not free: a caller that has it passes it
        values["source_digest"] = _source_digest(loaded)
    values.update(overrides)
    return dataclasses.replace(PlanContext(), **values)


def _source_digest(loaded) -> str | None:
    """Training source is uploaded content-addressed, so plan shows the object train will send."""
    if loaded.spec.kind != "training":
        return None
    directory = loaded.base_dir / loaded.spec.source_dir
    return artifact_digest(directory)[:16] if directory.is_dir() else None


def _model_size_gib(loaded) -> float | None:
    spec = loaded.spec
    if spec.kind != "inference":
        return None
    try:
        from neurondeploy.planner.checks import model_architecture
        from neurondeploy.planner.sizing import parameter_count

        arch = model_architecture(loaded)
    except Exception:  # an unreadable model directory is reported by the checks, not here
        return None
    return None if arch is None else parameter_count(arch) * _DTYPE_BYTES[spec.model.dtype] / 2**30
