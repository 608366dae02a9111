"""templates/llama3-70b-pretrain-trn1-nxdt.yaml through the CLI against a real moto server: `plan`, then `train
--no-wait`. The job is NxD Training's launch (the SageMaker SDK's for Trainium recipes): its CreateTrainingJob names
training_orchestrator.py and where the config is, and the source archive it names holds NxD Training's examples with
the config plan rendered and the model's config.json beside them. A second run of the same spec uploads nothing.

NxD Training's examples are stand-ins here (this machine has no copy of aws-neuron/neuronx-distributed-training, and
NxD Training needs torch-xla and Neuron devices to run)."""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from pathlib import Path

import pytest
import yaml
from support.account import provision

from neurondeploy.cli.main import main
from neurondeploy.engine.state import StateStore

pytestmark = pytest.mark.integration
REPO = Path(__file__).parents[2]
TEMPLATE = REPO / "templates" / "llama3-70b-pretrain-trn1-nxdt.yaml"
NAME = "llama3-70b-pretrain"
BUCKET = "neurondeploy-123456789012-us-east-1"  # moto's account
EXAMPLES = ("training_orchestrator.py", "training.py", "conf/hf_llama3_70B_config.yaml")


@pytest.fixture
def spec_file(tmp_path, aws) -> Path:
    """The template, unchanged, beside stand-ins of NxD Training's examples where its comment says to clone them."""
    spec = tmp_path / TEMPLATE.name
    shutil.copy(TEMPLATE, spec)
    examples = tmp_path / "neuronx-distributed-training" / "examples"
    for name in EXAMPLES:
        (examples / name).parent.mkdir(parents=True, exist_ok=True)
        (examples / name).write_text(f"# stand-in of NxD Training's examples/{name}\n")
    provision(aws, spec)
    return spec


def test_plan_then_train_sends_nxd_trainings_launch_with_the_config_it_planned(spec_file, tmp_path, aws, capsys):
    state = str(tmp_path / "state.db")
    assert main(["plan", str(spec_file), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    (planned,) = [
        request["params"]
        for resource in plan["resources"]
        for request in resource["requests"]
        if request["operation"] == "CreateTrainingJob"
    ]

    assert main(["train", str(spec_file), "--no-wait", "--yes", "--state", state]) == 0
    err = capsys.readouterr().err
    assert "uploaded " in err
    (sent,) = StateStore(state).get(NAME).resources["training-job"].create_requests
    job = aws.client("sagemaker").describe_training_job(TrainingJobName=sent["params"]["TrainingJobName"])
    hp = job["HyperParameters"]
    assert hp == sent["params"]["HyperParameters"]
    assert {key: json.loads(value) for key, value in hp.items() if not key.startswith("sagemaker_")} == {
        "config-path": ".",
        "config-name": "nxd-training-config.yaml",
    }
    assert json.loads(hp["sagemaker_program"]) == "training_orchestrator.py"
    assert json.loads(hp["sagemaker_torch_distributed_enabled"]) is True
    assert job["ResourceConfig"] == {"InstanceType": "ml.trn1.32xlarge", "InstanceCount": 16}
    # what plan showed is what was sent (the account is known only at train)
    assert json.loads(json.dumps(planned).replace("${account.Account}", "123456789012"))["HyperParameters"] == hp

    source = json.loads(hp["sagemaker_submit_directory"])
    body = aws.client("s3").get_object(Bucket=BUCKET, Key=source.removeprefix(f"s3://{BUCKET}/"))["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as archive:
        assert sorted(archive.getnames()) == sorted([*EXAMPLES, "nxd-training-config.yaml", "config.json"])
        config = yaml.safe_load(archive.extractfile("nxd-training-config.yaml"))
        model = json.load(archive.extractfile("config.json"))
    assert config == plan["engine_config"]
    layout = config["distributed_strategy"]
    assert (layout["tensor_model_parallel_size"], layout["pipeline_model_parallel_size"]) == (32, 8)
    assert (config["trainer"]["num_nodes"], config["trainer"]["devices"]) == (16, 32)
    assert config["data"]["train_dir"] == "/opt/ml/input/data/train"  # the channel, where SageMaker puts it
    assert config["model"]["model_config"] == "/opt/ml/code/config.json"  # the file beside the code
    assert (model["num_hidden_layers"], model["hidden_size"], model["num_key_value_heads"]) == (80, 8192, 8)
    assert config["exp_manager"]["explicit_log_dir"] == job["CheckpointConfig"]["LocalPath"]  # synced to S3

    # the same spec again: a new job, and the archive (examples, config, config.json) is not uploaded again
    assert main(["train", str(spec_file), "--no-wait", "--yes", "--state", state]) == 0
    err = capsys.readouterr().err
    assert f"unchanged, not uploaded again: {spec_file.parent}" in err, err
    jobs = aws.client("sagemaker").list_training_jobs()["TrainingJobSummaries"]
    assert len(jobs) == 2
