"""scripts/install.sh prints one line per step (the reported install was silent for 71 s, then printed setuptools'
warning block) and stops at the first step that fails. pip is replaced by a stand-in that records its calls, so
nothing is installed; the real install runs in .ci/run on every clean clone."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).parents[2] / "scripts" / "install.sh"


def _run(tmp_path: Path, fail_on: str | None = None) -> tuple[subprocess.CompletedProcess, list[str]]:
    calls = tmp_path / "calls"
    stand_in = tmp_path / "bin" / "python"
    stand_in.parent.mkdir(exist_ok=True)
    stand_in.write_text(
        "#!/bin/sh\n"
        f'echo "PYTHONWARNINGS=$PYTHONWARNINGS $*" >> {calls}\n'
        + (f'case "$*" in *{fail_on}*) echo "ERROR: no such version" >&2; exit 1;; esac\n' if fail_on else "")
    )
    stand_in.chmod(0o755)
    env = {**os.environ, "PATH": f"{stand_in.parent}:/usr/bin:/bin"}
    result = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=env, timeout=60)
    return result, calls.read_text().splitlines() if calls.exists() else []


def test_each_step_is_one_line_with_its_time_in_order(tmp_path):
    result, calls = _run(tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [re.sub(r"\(\d+ s\)", "(N s)", line) for line in lines[:3]] == [
        "[1/3] pip ... done (N s)",
        "[2/3] torch 2.13.0, the CPU build (about 1 GB) ... done (N s)",
        "[3/3] neurondeploy, editable, with its test and bench tools ... done (N s)",
    ]
    # torch's CPU pin goes in before the package's range can pick another build
    assert [call.partition(" -m ")[2] for call in calls] == [
        "pip install --quiet --upgrade pip",
        "pip install --quiet torch==2.13.0",
        "pip install --quiet -e .[dev]",
    ]
    # setuptools' editable-install notice is filtered for these installs only
    assert all(call.startswith("PYTHONWARNINGS=ignore:Editable installation ") for call in calls)


def test_a_failing_step_says_failed_and_stops_there(tmp_path):
    result, calls = _run(tmp_path, fail_on="torch")
    assert result.returncode != 0
    assert result.stdout.splitlines()[-1] == "[2/3] torch 2.13.0, the CPU build (about 1 GB) ... failed"
    assert "no such version" in result.stderr and len(calls) == 2
