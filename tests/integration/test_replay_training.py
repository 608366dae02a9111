"""The training template's job, started with `neurondeploy train` against a moto server, then its CreateTrainingJob
(as sent: state records it) replayed as SageMaker and the PyTorch/Neuron training container run it
(replay.training): it trains under torchrun, checkpoints reach S3, and the next job, on a fresh host, resumes
from them and writes model.tar.gz."""

from __future__ import annotations

import io
import re
import tarfile
from pathlib import Path

import pytest
from support.ec2_deployment import transport
from support.reference_script import template_with_script_copy

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
    spec = template_with_script_copy(TEMPLATE, tmp_path)
    s3 = aws.client("s3")
    s3.create_bucket(Bucket=DATA_BUCKET)
    corpus = (REPO / "templates" / "training" / "data" / "tiny-corpus.txt").read_bytes()
    s3.put_object(Bucket=DATA_BUCKET, Key="datasets/tiny-corpus/tiny-corpus.txt", Body=corpus)
    return spec


def sent_job(state: Path) -> dict:
    (request,) = StateStore(state).get("tiny-lm").resources["training-job"].create_requests
    return request["params"]


def run_job(spec_file: Path, tmp_path: Path, max_steps: int, host: str, **replay):
    state = tmp_path / "state.db"
    code = main(
        ["train", str(spec_file), "--no-wait", "--yes", "--hp", f"max_steps={max_steps}", "--state", str(state)]
    )
    assert code == 0
    job = sent_job(state)
    return job, replay_training_job(transport(), job, tmp_path / host, timeout_s=300, **replay)


def losses(output: str) -> list[float]:
    return [float(match) for match in re.findall(r"step \d+/\d+ loss ([0-9.]+)", output)]


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
    # the source's requirements.txt, which the image's toolkit installs before it launches (already satisfied here)
    (tmp_path / "training" / "requirements.txt").write_text("torch\n")
    job, first = run_job(spec_file, tmp_path, 50, "host-1")
    assert first.exit_code == 0, first.output[-2000:]
    assert "Installing dependencies from requirements.txt" in first.output
    assert "Requirement already satisfied: torch" in first.output
    # the image's toolkit derived the launch: torchrun on one node, a process per NeuronCore of trn1.2xlarge
    assert first.command[-1].endswith("/bin/train")
    assert "Invoking script with the following command:\n\ntorchrun --nnodes 1 --nproc_per_node 2 train.py" in (
        first.output
    )
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


def test_a_parallel_compile_job_or_an_image_without_a_known_toolkit_is_refused_with_the_reason(tmp_path):
    job = {"TrainingJobName": "j", "ResourceConfig": {"InstanceType": "ml.trn1.32xlarge", "InstanceCount": 1}}
    job["Environment"] = {"RUN_NEURON_PARALLEL_COMPILE": "1"}
    with pytest.raises(ReplayError, match="only fills the compile cache"):
        replay_training_job(transport(), job, tmp_path)
    job["Environment"] = {}
    job["AlgorithmSpecification"] = {"TrainingImage": "123456789012.dkr.ecr.us-east-1.amazonaws.com/mine:1"}
    with pytest.raises(ReplayError, match="training toolkit the catalogue does not know"):
        replay_training_job(transport(), job, tmp_path)


def test_a_two_host_job_trains_as_algo_1_and_algo_2_and_a_fresh_pair_resumes(spec_file, tmp_path, aws):
    """2 × ml.trn1.32xlarge (multi-node needs EFA): each host's toolkit launches its torchrun with the rendezvous
    it derives (algo-1:7777, node ranks 0 and 1), the 4 processes train one model (neuron-ls reports 2 NeuronCores
    per host here: 32 processes per host do not fit this machine), each host's checkpoint files reach the one S3
    URI, and the next job, on a fresh pair of hosts, downloads them to both and resumes."""
    from neurondeploy.replay.host_names import unshare_command

    if unshare_command() is None:
        pytest.skip("this machine allows no mount namespace, through which the replay names its hosts")
    text = spec_file.read_text().replace("instance_type: ml.trn1.2xlarge", "instance_type: ml.trn1.32xlarge")
    spec_file.write_text(text.replace("instance_count: 1", "instance_count: 2"))
    s3 = aws.client("s3")
    job, first = run_job(spec_file, tmp_path, 50, "pair-1", neuron_cores=2)
    assert job["ResourceConfig"]["InstanceCount"] == 2
    assert first.exit_code == 0, first.output[-3000:]
    for rank, host in enumerate(("algo-1", "algo-2")):
        log = first.output.split(f"=== {host}\n", 1)[1].split("\n=== ", 1)[0]
        assert f'"current_host": "{host}"' in log
        assert (
            "torchrun --nnodes 2 --nproc_per_node 2 --master_addr algo-1 --master_port 7777 "
            f"--node_rank {rank} train.py"
        ) in log
    falling = losses(first.output)
    assert len(falling) >= 3 and falling[-1] < falling[0], falling  # one model over 4 ranks: DP=4 in its banner
    assert "DP=4" in first.output
    by_host = {host: [k for k in keys if "/step_00000050/" in k] for host, keys in first.uploads_by_host.items()}
    assert all(by_host.values()), first.uploads_by_host  # each host wrote part of the checkpoint
    assert any(k.endswith(".distcp") for k in by_host["algo-2"]), by_host["algo-2"]
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=DATA_BUCKET, Prefix="tiny-lm/checkpoints/")["Contents"]}
    assert {k for keys_of in by_host.values() for k in keys_of} <= {f"s3://{DATA_BUCKET}/{k}" for k in keys}

    _, second = run_job(spec_file, tmp_path, 75, "pair-2", neuron_cores=2)
    assert second.exit_code == 0, second.output[-3000:]
    for host in ("algo-1", "algo-2"):
        log = second.output.split(f"=== {host}\n", 1)[1].split("\n=== ", 1)[0]
        assert "resumed from checkpoint step 50" in log  # both hosts got every host's files
    assert "step 75/75" in second.output and "step 10/75" not in second.output
