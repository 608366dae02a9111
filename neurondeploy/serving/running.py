"""Local endpoints that run now: `apply --local` announces its URL under the spec's name while it serves, so
`invoke SPEC` reaches the endpoint on this machine before looking in AWS for the spec's deployment."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

from neurondeploy.paths import default_cache_dir


def record_path(name: str) -> Path:
    return default_cache_dir() / "local-endpoints" / f"{name}.json"


@contextlib.contextmanager
def announced(name: str, url: str) -> Iterator[Path]:
    """While inside: ``name`` is served at ``url`` by this process. The record goes when the endpoint stops (a
    record a killed process left is ignored: its pid is gone)."""
    path = record_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"url": url, "pid": os.getpid()}))
    try:
        yield path
    finally:
        with contextlib.suppress(FileNotFoundError, ValueError, OSError):
            if json.loads(path.read_text()).get("pid") == os.getpid():  # not a later run's record
                path.unlink()


def _record(name: str) -> dict | None:
    try:
        record = json.loads(record_path(name).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def recorded_url(name: str) -> str | None:
    """The URL ``name``'s local endpoint was announced at, running or not (a killed run leaves its record)."""
    record = _record(name)
    return record.get("url") if record else None


def running_url(name: str) -> str | None:
    """The URL of ``name``'s local endpoint if a process serving it is alive, else None."""
    record = _record(name)
    try:
        os.kill(int(record["pid"]), 0)  # signal 0: only whether the process exists
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return record.get("url")
