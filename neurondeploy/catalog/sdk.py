"""Neuron SDK releases and lifecycle (data/sdk.yaml): which toolkit path works on which release."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from neurondeploy.catalog._data import load, minor, unknown
from neurondeploy.errors import CatalogError


@dataclass(frozen=True)
class SdkRelease:
    version: str  # "2.28.0"; stands for the whole 2.28.x line
    released: str | None
    torch_version: str | None  # PyTorch of the torch-neuronx (XLA) path in this release
    torch_neuronx: bool
    xla_training: bool
    nxd_training: bool
    nxdi: bool
    training_dlc: bool
    inference_dlc: bool
    notes: str
    source: str
    transformers_neuronx: bool = False
    xla_bf16_env: bool = False
    auto_cast_default: str = "none"  # neuronx-cc --auto-cast default
    confirmed: bool = True


@dataclass(frozen=True)
class Component:
    key: str
    name: str
    last: str  # last minor line ("2.28") that ships / supports it
    maintenance_from: str | None
    fact: str
    source: str


@cache
def components() -> dict[str, Component]:
    return {
        key: Component(key, c["name"], c["last"], c.get("maintenance_from"), c["fact"], c["source"])
        for key, c in load("sdk")["components"].items()
    }


def _has(component: str, version: str) -> bool:
    return minor(version) <= minor(components()[component].last)


def _auto_cast(version: str) -> str:
    rule = load("sdk")["auto_cast_default"]
    return rule["from"] if minor(version) >= minor(rule["changed_in"]) else rule["before"]


@cache
def sdk_releases() -> dict[str, SdkRelease]:
    """Catalogued releases by version ("2.20.0" ... "2.32.0"), oldest first."""
    out = {}
    for row in load("sdk")["releases"]:
        v = row["version"]
        out[v] = SdkRelease(
            version=v,
            released=row["released"],
            torch_version=row["torch_version"],
            torch_neuronx=_has("torch_neuronx", v),
            xla_training=_has("xla_training", v),
            nxd_training=_has("nxd_training", v),
            nxdi=_has("nxdi", v),
            training_dlc=_has("training_dlc", v),
            inference_dlc=_has("inference_dlc", v),
            notes=row.get("notes", ""),
            source=row["source"],
            transformers_neuronx=_has("transformers_neuronx", v),
            xla_bf16_env=_has("xla_bf16_env", v),
            auto_cast_default=_auto_cast(v),
            confirmed=row["confirmed"],
        )
    return out


def get_sdk(version: str) -> SdkRelease:
    """The release line of ``version`` ("2.26", "2.26.0" and "2.26.1" all give the 2.26.0 row)."""
    wanted = minor(version)
    for release in sdk_releases().values():
        if minor(release.version) == wanted:
            return release
    known = list(sdk_releases())
    raise CatalogError(
        f"unknown Neuron SDK version {version!r}",
        f"the catalogue knows Neuron SDK {known[0]} to {known[-1]} (data/sdk.yaml)",
    )


def default_auto_cast(version: str) -> str:
    """neuronx-cc's ``--auto-cast`` default in ``version``: "none" from 2.27, "matmult" before."""
    return get_sdk(version).auto_cast_default


def sdk_paths() -> tuple[str, ...]:
    return tuple(load("sdk")["paths"])


def _requirements(path: str) -> list[Component]:
    try:
        keys = load("sdk")["paths"][path]
    except KeyError:
        raise unknown("toolkit path", path, sdk_paths()) from None
    return [components()[k] for k in keys]


def latest_sdk_for(path: str) -> str:
    """The newest catalogued SDK version on which ``path`` works."""
    needs = _requirements(path)
    working = [v for v in sdk_releases() if all(_has(c.key, v) for c in needs)]
    if not working:
        raise CatalogError(f"no catalogued Neuron SDK release supports {path!r}", "check data/sdk.yaml")
    return max(working, key=minor)


def check_sdk_for(path: str, version: str) -> None:
    """Raise CatalogError if ``path`` (training, trace-inference, nxdi-inference) does not work on ``version``."""
    release = get_sdk(version)
    missing = [c for c in _requirements(path) if not _has(c.key, release.version)]
    if missing:
        first = min(missing, key=lambda c: minor(c.last))  # the earliest end explains the last working release
        also = "".join(f"; also {c.name} ended after {c.last}" for c in missing if c is not first)
        last = latest_sdk_for(path)
        raise CatalogError(
            f"Neuron SDK {version} cannot run the {path} path: {first.fact} (source: {first.source}){also}",
            f"pin Neuron SDK {last} or earlier, the last release where {path} works",
        )


def maintenance_warnings(path: str, version: str) -> tuple[str, ...]:
    """Components of ``path`` that still work on ``version`` but only get security and bug fixes."""
    release = get_sdk(version)
    return tuple(
        f"{c.name} is in maintenance mode from SDK {c.maintenance_from} ({c.source})"
        for c in _requirements(path)
        if c.maintenance_from and minor(c.maintenance_from) <= minor(release.version) and _has(c.key, release.version)
    )


def family_line_end(family: str, path: str, version: str) -> dict | None:
    """The row of data/sdk.yaml's ``family_lines`` that ends ``path`` on ``family`` before ``version``, if any: a
    combination AWS no longer supports, with what replaces it."""
    for row in load("sdk").get("family_lines", []):
        if family in row["families"] and row["path"] == path and minor(version) > minor(row["last"]):
            return dict(row)
    return None
