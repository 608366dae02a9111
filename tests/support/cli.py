"""The one way the tests run the CLI as a user does: a new process, ``python -m neurondeploy.cli``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run_cli(
    *args: str,
    env: dict[str, str] | None = None,
    state: Path | str | None = None,
    state_in_env: bool = False,
    cwd: Path | str | None = None,
    timeout: float = 600,
) -> subprocess.CompletedProcess:
    """``neurondeploy ARGS`` with this environment (or ``env``), no stdin (so never a prompt), output captured.
    ``state`` is given as ``--state`` (after the arguments), or as ``$NEURONDEPLOY_STATE`` with ``state_in_env``."""
    environment = dict(os.environ if env is None else env)
    argv = [sys.executable, "-m", "neurondeploy.cli", *args]
    if state is not None and state_in_env:
        environment["NEURONDEPLOY_STATE"] = str(state)
    elif state is not None:
        argv += ["--state", str(state)]
    return subprocess.run(
        argv, capture_output=True, text=True, env=environment, cwd=cwd, stdin=subprocess.DEVNULL, timeout=timeout
    )
