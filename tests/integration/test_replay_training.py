"""The training template's job, started with `neurondeploy train` against a moto server, then its CreateTrainingJob
(as sent: state records it) replayed as SageMaker and the PyTorch/Neuron training container run it
(replay.training): it trains under torchrun, checkpoints reach S3, and the next job, on a fresh host, resumes
from them and writes model.tar.gz."""

from __future__ import annotations

import io
import shutil
import tarfile
from pathlib import Path

import pytest
from support.ec2_deployment import transport

from neurondeploy.cli.main import main
from neurondeploy.engine.state import StateStore
from neurondeploy.replay.sandbox import ReplayError
from neurondeploy.replay.training import replay_training_job, to_cmd_args

pytestmark = [pytest.mark.integration, pytest.mark.slow]
REPO = Path(__file__).parents[2]
TEMPLATE = REPO / "templates" / "tiny-lm-train-local.yaml"
DATA_BUCKET = "my-training-bucket"  # the template's own S3 URIs


@pytest.fixture
def spec_file(tmp_path, aws) -> Path:
    """The template beside a copy of its source dir; its data bucket holds the corpus its channel names."""
    spec = tmp_path / TEMPLATE.name
    shutil.copy(TEMPLATE, spec)
    shutil.copytree(
        REPO / "templates" / "training", tmp_path / "training", ignore=shutil.ignore_patterns("__pycache__")
    )
    s3 = aws.client("s3")
    s3.create_bucket(Bucket=DATA_BUCKET)
    corpus = (REPO / "templates" / "training" / "data" / "tiny-corpus.txt").read_bytes()
    s3.put_object(Bucket=DATA_BUCKET, Key="datasets/tiny-corpus/tiny-corpus.txt", Body=corpus)
    return spec


def sent_job(state: Path) -> dict:
    (request,) = StateStore(state).get("tiny-lm").resources["training-job"].create_requests
    return request["params"]


def run_job(spec_file: Path, tmp_path: Path, max_steps: int, host: str):
    state = tmp_path / "state.db"
    code = main(
        ["train", str(spec_file), "--no-wait", "--yes", "--hp", f"max_steps={max_steps}", "--state", str(state)]
    )
    assert code == 0
    job = sent_job(state)
    return job, replay_training_job(transport(), job, tmp_path / host, timeout_s=300)


def test_to_cmd_args_is_the_toolkits():
    assert to_cmd_args({"lr": 0.1, "b": True, "a": "x", "m": {"k": 1}}) == [
        "-a",
        "x",
        "-b",
        "True",
        "--lr",
        "0.1",
        "-m",
        "k=1",
    ]


def test_the_jobs_train_checkpoint_to_s3_and_the_next_job_resumes_from_there(spec_file, tmp_path, aws):
    s3 = aws.client("s3")
    job, first = run_job(spec_file, tmp_path, 50, "host-1")
    assert first.exit_code == 0, first.output[-2000:]
    assert "--nproc_per_node" in first.command and first.command[first.command.index("--nproc_per_node") + 1] == "2"
    assert "step 50/50" in first.output and "resumed from checkpoint" not in first.output
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=DATA_BUCKET, Prefix="tiny-lm/checkpoints/")["Contents"]}
    assert any(k.startswith("tiny-lm/checkpoints/step_00000050/") and k.endswith("trainer.json") for k in keys), keys
    assert any(k.startswith("tiny-lm/checkpoints/step_00000025/") for k in keys)
    # model.tar.gz where SageMaker puts it: <S3OutputPath>/<job>/output/
    assert (
        first.model_artifacts
        == f"{job['OutputDataConfig']['S3OutputPath']}/{job['TrainingJobName']}/output/model.tar.gz"
    )
    bucket, key = first.model_artifacts.removeprefix("s3://").split("/", 1)
    with tarfile.open(fileobj=io.BytesIO(s3.get_object(Bucket=bucket, Key=key)["Body"].read())) as archive:
        assert archive.getnames()

    # A new job on a fresh host: SageMaker downloads the checkpoint URI first; the script resumes at step 50.
    _, second = run_job(spec_file, tmp_path, 75, "host-2")
    assert second.exit_code == 0, second.output[-2000:]
    assert second.checkpoints_downloaded > 0
    assert "resumed from checkpoint step 50" in second.output and "step 75/75" in second.output
    assert "step 10/75" not in second.output  # it did not start over
    assert any("step_00000075/" in k for k in second.checkpoints_uploaded)


def test_a_multi_host_or_parallel_compile_job_is_refused_with_the_reason(tmp_path):
    job = {"TrainingJobName": "j", "ResourceConfig": {"InstanceType": "ml.trn1.32xlarge", "InstanceCount": 2}}
    with pytest.raises(ReplayError, match="2 hosts"):
        replay_training_job(transport(), job, tmp_path)
    job["ResourceConfig"]["InstanceCount"] = 1
    job["Environment"] = {"RUN_NEURON_PARALLEL_COMPILE": "1"}
    with pytest.raises(ReplayError, match="only fills the compile cache"):
        replay_training_job(transport(), job, tmp_path)
