"""A file where compile needs a directory (the cache directory, or a parent of it or of --out) is one line naming
it, with the fix: not exit 70 with NotADirectoryError or FileExistsError. Real compiles of the tiny model."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).parents[2]
SPEC = (
    "kind: inference\nname: tiny\ntask: feature-extraction\n"
    "model: {factory: 'tiny_models:text_encoder', dtype: float32}\n"
    "compile: {batch_sizes: [1], sequence_lengths: [8]}\n"
)


def compile_cli(tmp_path: Path, *args: str, cache: Path) -> subprocess.CompletedProcess:
    spec = tmp_path / "tiny.yaml"
    spec.write_text(SPEC)
    env = {**os.environ, "PYTHONPATH": str(REPO / "tests" / "fixtures"), "NEURONDEPLOY_CACHE_DIR": str(cache)}
    return subprocess.run(
        [sys.executable, "-m", "neurondeploy.cli", "compile", str(spec), "--backend", "cpu", *args],
        capture_output=True,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=300,
    )


def error_lines(done: subprocess.CompletedProcess) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.startswith(("error", "internal error"))]


@pytest.mark.parametrize("under", ["", "sub"], ids=["is-a-file", "under-a-file"])
def test_a_cache_directory_that_is_a_file_is_one_line(tmp_path, under):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    done = compile_cli(tmp_path, "--out", str(tmp_path / "artifact"), cache=blocker / under if under else blocker)
    (line,) = error_lines(done)
    assert done.returncode not in (0, 70) and "Traceback" not in done.stderr, done.stderr
    assert f"{blocker} is a file, not a directory" in line and "NEURONDEPLOY_CACHE_DIR" in line, line


def test_an_out_directory_under_a_file_is_one_line(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    done = compile_cli(tmp_path, "--out", str(blocker / "artifact"), cache=tmp_path / "cache")
    (line,) = error_lines(done)
    assert done.returncode not in (0, 70) and "Traceback" not in done.stderr, done.stderr
    assert f"{blocker} is a file, not a directory" in line and "--out" in line, line
