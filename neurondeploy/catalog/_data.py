"""Shared plumbing for the catalogue: read a data file once, suggest a fix for a misspelt key."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from functools import cache
from importlib import resources
from typing import Any

from neurondeploy.errors import CatalogError


@cache
def load(name: str) -> Any:
    """The parsed content of ``data/<name>.yaml`` (read once per process)."""
    import yaml  # deferred: keeps `import neurondeploy.catalog` cheap

    text = resources.files(__package__).joinpath("data", f"{name}.yaml").read_text(encoding="utf-8")
    # libyaml's loader when PyYAML was built with it: the catalogue is the largest YAML a plan reads (5x faster).
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """A hint naming the closest known values (or all of them when nothing is close)."""
    known = sorted(known)
    close = difflib.get_close_matches(word, known, n=3, cutoff=0.6)
    if close:
        return "did you mean " + " or ".join(repr(c) for c in close) + "?"
    return "known: " + ", ".join(known)


def unknown(kind: str, word: str, known: Iterable[str]) -> CatalogError:
    return CatalogError(f"unknown {kind} {word!r}", did_you_mean(word, known))


def version_tuple(version: str) -> tuple[int, ...]:
    """``"2.26.1"`` -> ``(2, 26, 1)``; raises CatalogError on anything else."""
    text = str(version).strip().removeprefix("v").removeprefix("sdk")
    try:
        parts = tuple(int(p) for p in text.split("."))
    except ValueError:
        parts = ()
    if not 2 <= len(parts) <= 3:
        raise CatalogError(f"not a Neuron SDK version: {version!r}", "write it as MAJOR.MINOR[.PATCH], e.g. 2.28.0")
    return parts


def minor(version: str) -> tuple[int, int]:
    major, min_, *_ = version_tuple(version)
    return (major, min_)
