"""A full disk through the CLI: `compile` with its cache, or its --out, on a tmpfs too small for the artifact.

It used to die with SIGABRT (exit 134, C++ frames from torch's serializer: "basic_ios::clear: iostream error") when
the cache filled, and with exit 70 when --out did. Now: one line naming the path, what is free and what is needed, a
non-zero exit, and nothing half-written left behind. The tmpfs is a real one, mounted in a private mount namespace
(``unshare -m``), so nothing outside the test sees it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
SPEC = (
    "kind: inference\nname: tiny\ntask: feature-extraction\n"
    "model: {factory: 'tiny_models:text_encoder', dtype: float32}\n"
    "compile: {batch_sizes: [1], sequence_lengths: [8]}\n"
)


def can_mount_tmpfs() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=4k tmpfs /mnt"], capture_output=True)
    return probe.returncode == 0


pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not can_mount_tmpfs(), reason="needs unshare -m and tmpfs mounts (root)"),
]


def compile_on_small_disk(
    tmp_path: Path, size: str, *, cache_on_disk: bool
) -> tuple[subprocess.CompletedProcess, Path]:
    """`neurondeploy compile` with a tmpfs of ``size`` mounted at tmp_path/disk, holding the cache or --out."""
    disk = tmp_path / "disk"
    disk.mkdir(exist_ok=True)
    (tmp_path / "s.yaml").write_text(SPEC)
    cache = disk / "cache" if cache_on_disk else tmp_path / "cache"
    out = tmp_path / "out" if cache_on_disk else disk / "out"
    env = {**os.environ, "PYTHONPATH": str(FIXTURES), "NEURONDEPLOY_CACHE_DIR": str(cache)}
    listing = tmp_path / "left.txt"  # what is left on the disk, read before the namespace (and its tmpfs) goes
    script = (
        f"mount -t tmpfs -o size={size} tmpfs {disk} && "
        f"{{ {sys.executable} -m neurondeploy.cli compile s.yaml --backend cpu --out {out}; code=$?; "
        f"find {disk} -type f > {listing}; exit $code; }}"
    )
    run = subprocess.run(
        ["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300
    )
    return run, listing


def one_line(run: subprocess.CompletedProcess) -> str:
    assert run.returncode not in (0, 70, 134, -6), (run.returncode, run.stderr[-2000:])
    assert "Traceback" not in run.stderr and "Aborted" not in run.stderr and "what():" not in run.stderr, run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, run.stderr
    return errors[0]


@pytest.mark.parametrize("size", ["8k", "24k"])
def test_compile_with_its_cache_on_a_full_disk_says_where_and_how_much(tmp_path, size):
    run, listing = compile_on_small_disk(tmp_path, size, cache_on_disk=True)
    line = one_line(run)
    assert "no space left" in line and str(tmp_path / "disk" / "cache") in line, line
    assert re.search(r"\d+(\.\d+)? [KMG]?i?B free", line) and "needed" in line and "NEURONDEPLOY_CACHE_DIR" in line, (
        line
    )
    cache = tmp_path / "disk" / "cache"
    left = [p for p in listing.read_text().split() if p.startswith((f"{cache}/tmp/", f"{cache}/entries/"))]
    assert left == [], left  # no half-written entry or build directory stays on the disk


def test_compile_with_its_out_on_a_full_disk_says_where_and_how_much(tmp_path):
    run, listing = compile_on_small_disk(tmp_path, "16k", cache_on_disk=False)
    line = one_line(run)
    assert "no space left" in line and str(tmp_path / "disk" / "out") in line and "--out" in line, line
    assert re.search(r"\d+(\.\d+)? [KMG]?i?B free", line) and "needed" in line, line
    assert listing.read_text().split() == []  # the half-copied artifact is removed
