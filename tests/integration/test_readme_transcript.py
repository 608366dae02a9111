"""The README's first-hour transcript is what the CLI prints: each command of the README's block is run through the
CLI, as written, against the moto server (the account the tests use), and every line the README shows of its output
must be in what the command printed, in that order ("…" alone marks lines left out; inside a line, a part that
varies from run to run: a hash, a time)."""

from __future__ import annotations

import os
import re
import shlex

import pytest
from support.cli import run_cli
from support.ec2_deployment import REPO

pytestmark = pytest.mark.integration
BLOCK = re.compile(r"<!-- transcript: first-hour -->\s*```console\n(.*?)```", re.S)


def transcript() -> list[tuple[str, int, list[str]]]:
    """(command, exit status, output lines) for each ``$ neurondeploy ...`` of the README's block; a command's
    status is written after it as ``# exit N`` (0 when absent)."""
    (block,) = BLOCK.findall((REPO / "README.md").read_text())
    steps: list[tuple[str, int, list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            command, _, status = line[2:].partition("  # exit ")
            steps.append((command.strip(), int(status or 0), []))
        elif steps and line.strip() and line.strip() != "…":
            steps[-1][2].append(line)
    return steps


def _words(text: str) -> str:
    return " ".join(text.split())


def test_the_readme_transcript_is_what_the_cli_prints(sagemaker_world, tmp_path):
    aws = sagemaker_world
    env = os.environ | {"NEURONDEPLOY_CACHE_DIR": str(tmp_path / "cache"), "COLUMNS": "120"}
    env["NEURONDEPLOY_STATE"] = str(tmp_path / "state.db")
    steps = transcript()
    assert [command.split()[:2] for command, _, _ in steps] == [
        ["neurondeploy", "init"],
        ["neurondeploy", "validate"],
        ["neurondeploy", "plan"],
        ["neurondeploy", "compile"],
        ["neurondeploy", "compile"],
    ]
    for command, status, shown in steps:
        result = run_cli(*shlex.split(command)[1:], env=env, cwd=tmp_path)
        printed = _words(result.stdout + "\n" + result.stderr)
        assert result.returncode == status, f"{command}: exit {result.returncode}\n{result.stdout}{result.stderr}"
        at = 0
        for line in shown:
            for piece in filter(None, map(_words, line.split("…"))):  # "…" inside a line: a name's varying part
                found = printed.find(piece, at)
                assert found >= 0, (
                    f"{command}: the README shows {line!r}, the CLI printed:\n{result.stdout}{result.stderr}"
                )
                at = found + len(piece)
        if command.endswith("--remote"):  # asked, with no terminal to answer: nothing was created
            assert aws.client("sagemaker").list_training_jobs()["TrainingJobSummaries"] == []
            assert aws.client("s3").list_buckets()["Buckets"] == []
    (job,) = aws.client("sagemaker").list_training_jobs()["TrainingJobSummaries"]
    assert job["TrainingJobName"].startswith("embed-compile-")
