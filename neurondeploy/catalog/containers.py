"""Serving containers (data/containers.yaml): one row per ``deployment.container.kind``, read by the specs, the
planner, the request builders and serving instead of a switch on the kind's name."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from neurondeploy.catalog._data import load, unknown

# The spec values an environment row may name (data/containers.yaml, "environment").
ENVIRONMENT_VALUES = (
    "model",
    "tensor_parallel",
    "max_batch",
    "max_sequence",
    "half_sequence",
    "port",
    "weights_cast",
    "task",
    "serving",
)


@dataclass(frozen=True)
class ContainerKind:
    name: str
    description: str
    image_purpose: str
    ours: bool
    llm: bool
    runtime: str
    platforms: tuple[str, ...]
    model_sources: tuple[str, ...]
    quantization: bool
    secret_env: bool
    buckets: str
    apis: tuple[str, ...]  # the request bodies it answers besides /ping and /invocations
    environment: tuple[tuple[str, str], ...]  # (variable, the spec value it carries), in the table's order
    obsolete_env: tuple[tuple[str, str], ...]  # (variable an older image read, what replaced it)
    source: str
    wrapper: str = "none"  # none | for-secrets | required (data/containers.yaml)
    wrapper_entrypoint: str | None = None  # what the wrapper execs; None: the base image's own entrypoint
    compiles_at_start: bool = False  # with no compiled artifacts it compiles when it starts (else it refuses to)
    compiled_artifacts_env: str | None = None  # the variable naming the directory it loads compiled artifacts from

    @property
    def model_variable(self) -> str | None:
        """The environment variable that names the model (a Hub id or the directory SageMaker fills)."""
        return next((name for name, value in self.environment if value == "model"), None)


@cache
def _kinds() -> dict[str, ContainerKind]:
    rows = load("containers")["containers"]
    return {
        name: ContainerKind(
            name=name,
            description=row["description"],
            image_purpose=row["image_purpose"],
            ours=bool(row["ours"]),
            llm=bool(row["llm"]),
            runtime=row["runtime"],
            platforms=tuple(row["platforms"]),
            model_sources=tuple(row["model_sources"]),
            quantization=bool(row["quantization"]),
            secret_env=bool(row["secret_env"]),
            buckets=row["buckets"],
            apis=tuple(row["apis"]),
            environment=tuple((row["environment"] or {}).items()),
            obsolete_env=tuple((row["obsolete_env"] or {}).items()),
            source=row["source"],
            wrapper=row["wrapper"],
            wrapper_entrypoint=row["wrapper_entrypoint"],
            compiles_at_start=bool(row.get("compiles_at_start", False)),
            compiled_artifacts_env=row.get("compiled_artifacts_env"),
        )
        for name, row in rows.items()
    }


def container_kinds() -> tuple[str, ...]:
    return tuple(_kinds())


def container_kind(name: str) -> ContainerKind:
    try:
        return _kinds()[name]
    except KeyError:
        raise unknown("container kind", name, _kinds()) from None


def llm_container_kinds() -> tuple[str, ...]:
    return tuple(name for name, kind in _kinds().items() if kind.llm)
