"""Archives uploaded to S3 (compiled artifacts, training source): reproducible, and without local debris."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

from neurondeploy.archive import artifact_digest, pack_artifact
from neurondeploy.training.entry import REFERENCE_DIR

REPO = Path(__file__).parents[2]


def names_in(archive: bytes) -> list[str]:
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        return tar.getnames()


def test_archives_are_reproducible_and_skip_caches_vcs_and_local_run_directories(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "train.py").write_text("print('hi')\n")
    (tmp_path / "data" / "corpus.txt").write_text("text\n")
    first, digest = pack_artifact(tmp_path), artifact_digest(tmp_path)
    for debris in (
        "__pycache__/train.cpython-311.pyc",
        ".git/HEAD",
        ".neurondeploy/train/x/checkpoints/step_1/a.distcp",
        "data/stale.pyc",
    ):
        (tmp_path / debris).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / debris).write_bytes(b"\0" * 64)
    os.utime(tmp_path / "train.py", (0, 0))  # times and owners are not recorded either
    assert pack_artifact(tmp_path) == first and artifact_digest(tmp_path) == digest
    assert names_in(first) == ["data/corpus.txt", "train.py"]
    (tmp_path / "train.py").write_text("print('changed')\n")
    assert artifact_digest(tmp_path) != digest


def test_plan_shows_the_source_object_train_uploads():
    """Content-addressed: the plan (offline) and `train` (which uploads) name the same object."""
    import json

    from neurondeploy.planner.plan import build_plan
    from neurondeploy.specs import load_spec

    plan = build_plan(load_spec(REPO / "templates" / "tiny-lm-train-local.yaml")).model_dump(mode="json")
    jobs = [r for resource in plan["resources"] for r in resource["requests"] if r["operation"] == "CreateTrainingJob"]
    submitted = json.loads(jobs[0]["params"]["HyperParameters"]["sagemaker_submit_directory"])
    digest = artifact_digest(REFERENCE_DIR)[:16]
    assert submitted.endswith(f"/tiny-lm/source/sourcedir-{digest}.tar.gz")
