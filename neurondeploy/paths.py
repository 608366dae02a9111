"""Where neurondeploy keeps files between runs on this machine (not state: see engine.state for that)."""

from __future__ import annotations

import os
from pathlib import Path


def default_cache_dir() -> Path:
    """``$NEURONDEPLOY_CACHE_DIR``, else ``$XDG_CACHE_HOME/neurondeploy``, else ``~/.cache/neurondeploy``."""
    if os.environ.get("NEURONDEPLOY_CACHE_DIR"):
        return Path(os.environ["NEURONDEPLOY_CACHE_DIR"]).expanduser()
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "neurondeploy"
    return Path.home() / ".cache" / "neurondeploy"


def default_state_path() -> Path:
    """``$NEURONDEPLOY_STATE``, else ``~/.neurondeploy/state.db``: the SQLite state commands use by default."""
    return Path(os.environ.get("NEURONDEPLOY_STATE", Path.home() / ".neurondeploy" / "state.db"))


def file_in_the_way(directory: Path) -> Path | None:
    """The first of ``directory`` and its parents that exists and is not a directory: what stops making it."""
    return next((p for p in (directory, *directory.parents) if p.exists() and not p.is_dir()), None)
