"""Specs that try to hurt: each is refused by the CLI (a real subprocess) with one line and a non-zero exit, without
hanging and without a large memory footprint (the child's peak RSS is read from the kernel after it ends)."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time

import pytest

BASE = "kind: inference\nname: web\ntask: feature-extraction\nmodel: {path: m}\n"
RSS_LIMIT_MB = 200
HANG_S = 20  # a process still running by then hangs: the bound catches a FIFO read, not slowness


def billion_laughs(levels: int = 9, width: int = 9) -> str:
    lines = ['a0: &a0 ["lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [{', '.join(f'*a{i - 1}' for _ in range(width))}]")
    return BASE + "tags:\n" + "\n".join("  " + line for line in lines) + "\n"


CASES = {
    "alias bomb (9x9)": (billion_laughs(), "more than 20000 values"),
    "recursive alias": (BASE + "tags: &loop {x: *loop}\n", "nested too deep"),
    "5000-deep nesting": (BASE + "tags: " + "[" * 5000 + "]" * 5000 + "\n", "nested too deep"),
    "5000-digit integer": (BASE + "deployment: {instance_count: " + "9" * 5000 + "}\n", "a 5000-digit number"),
}


def run_cli(*args: str) -> tuple[subprocess.CompletedProcess, float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "neurondeploy.cli", *args], capture_output=True, text=True, timeout=HANG_S
    )
    seconds = time.perf_counter() - started
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    # ru_maxrss of children is the largest of any child so far: only meaningful when it grew in this call.
    return result, seconds, peak_mb if peak_mb * 1024 > before else 0.0


def assert_refused(result, expected: str) -> None:
    lines = result.stderr.strip().splitlines()
    assert result.returncode not in (0, 70), result.stderr
    assert len(lines) == 1 and expected in lines[0] and "Traceback" not in result.stderr, result.stderr


@pytest.mark.parametrize("command", ["validate", "plan"])
@pytest.mark.parametrize("case", list(CASES))
def test_hostile_text_is_one_line_quickly_and_small(tmp_path, case, command):
    text, expected = CASES[case]
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    result, seconds, peak_mb = run_cli(command, str(spec))
    assert_refused(result, expected)
    assert peak_mb < RSS_LIMIT_MB, f"{case}: peak RSS {peak_mb:.0f} MB"
    print(f"{case} ({command}): refused in {seconds:.2f} s, peak RSS {peak_mb:.0f} MB")


def test_a_link_to_a_device_is_refused_before_reading(tmp_path):
    link = tmp_path / "spec.yaml"
    link.symlink_to("/dev/zero")
    result, seconds, peak_mb = run_cli("validate", str(link))
    assert_refused(result, "not a regular file")
    assert peak_mb < RSS_LIMIT_MB


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "spec.yaml"
    os.mkfifo(fifo)
    result, seconds, _ = run_cli("plan", str(fifo))  # opening it to read would block until HANG_S
    assert_refused(result, "not a regular file")


def test_a_file_over_the_limit_is_refused_by_its_size(tmp_path):
    big = tmp_path / "spec.yaml"
    with big.open("wb") as handle:
        handle.truncate(50 << 30)  # sparse: 50 GB by size, nothing on disk
    result, _, peak_mb = run_cli("validate", str(big))
    assert_refused(result, "bytes is too large for a spec")
    assert peak_mb < RSS_LIMIT_MB
