"""Nothing paid starts on what a read-only call finds missing: `train`, `compile --remote` and `apply` through the
CLI against the moto server, each refused in one line per missing piece naming the spec field and its fix, before
any Create* request (the emulator holds no job, endpoint or neurondeploy bucket afterwards)."""

from __future__ import annotations

import shutil

import pytest
import yaml
from support.account import provision
from support.cli import run_cli
from support.sagemaker import push_image

from neurondeploy.engine.state import StateStore

pytestmark = pytest.mark.integration
from support.ec2_deployment import REPO  # noqa: E402

NXDT = REPO / "templates" / "llama3-70b-pretrain-trn1-nxdt.yaml"
VLLM_NEURON = REPO / "templates" / "llama3-8b-vllm-neuron-sagemaker.yaml"
EXAMPLES = ("training_orchestrator.py", "training.py")


@pytest.fixture
def nxdt(tmp_path, aws):
    spec = tmp_path / NXDT.name
    shutil.copy(NXDT, spec)
    examples = tmp_path / "neuronx-distributed-training" / "examples"
    examples.mkdir(parents=True)
    for name in EXAMPLES:
        (examples / name).write_text(f"# stand-in of NxD Training's examples/{name}\n")
    return spec


def nothing_started(aws, state) -> None:
    assert aws.client("sagemaker").list_training_jobs()["TrainingJobSummaries"] == []
    assert aws.client("sagemaker").list_endpoints()["Endpoints"] == []
    assert aws.client("sagemaker").list_models()["Models"] == []
    buckets = [b["Name"] for b in aws.client("s3").list_buckets()["Buckets"]]
    assert not [name for name in buckets if name.startswith("neurondeploy-")], buckets
    assert StateStore(state).names() == []


def refused(done, field: str) -> str:
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    about = [line for line in lines if f"error: {field}:" in line]
    assert len(about) == 1 and "(fix: " in about[0], done.stderr
    return about[0]


def test_train_refuses_a_channel_whose_bucket_does_not_exist(nxdt, aws, tmp_path):
    state = tmp_path / "state.db"
    done = run_cli("train", str(nxdt), "--no-wait", "--yes", state=state)
    line = refused(done, "inputs.train.s3_uri")
    assert "bucket my-training-bucket does not exist" in line
    nothing_started(aws, state)


def test_train_refuses_an_empty_channel_and_names_neurondeploy_data(nxdt, aws, tmp_path):
    aws.client("s3").create_bucket(Bucket="my-training-bucket")
    state = tmp_path / "state.db"
    line = refused(run_cli("train", str(nxdt), "--no-wait", "--yes", state=state), "inputs.train.s3_uri")
    assert "holds no objects" in line and "neurondeploy data SPEC" in line
    nothing_started(aws, state)


def test_train_refuses_a_role_that_does_not_exist_or_does_not_trust_sagemaker(nxdt, aws, tmp_path):
    spec = yaml.safe_load(nxdt.read_text())
    spec["iam"] = {"role_arn": "arn:aws:iam::123456789012:role/TrainingRole"}
    nxdt.write_text(yaml.safe_dump(spec))
    provision(aws, nxdt)
    aws.client("iam").delete_role(RoleName="TrainingRole")
    state = tmp_path / "state.db"
    line = refused(run_cli("train", str(nxdt), "--no-wait", "--yes", state=state), "iam.role_arn")
    assert "role arn:aws:iam::123456789012:role/TrainingRole does not exist" in line
    lambda_trust = '{"Statement": [{"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}, '
    lambda_trust += '"Action": "sts:AssumeRole"}]}'
    aws.client("iam").create_role(RoleName="TrainingRole", AssumeRolePolicyDocument=lambda_trust)
    line = refused(run_cli("train", str(nxdt), "--no-wait", "--yes", state=state), "iam.role_arn")
    assert "does not trust sagemaker.amazonaws.com" in line
    nothing_started(aws, state)


def test_train_says_every_missing_piece_at_once_then_starts_once_they_exist(nxdt, aws, tmp_path):
    spec = yaml.safe_load(nxdt.read_text())
    spec["iam"] = {"role_arn": "arn:aws:iam::123456789012:role/TrainingRole"}
    nxdt.write_text(yaml.safe_dump(spec))
    state = tmp_path / "state.db"
    done = run_cli("train", str(nxdt), "--no-wait", "--yes", state=state)
    refused(done, "inputs.train.s3_uri")
    refused(done, "iam.role_arn")
    nothing_started(aws, state)
    provision(aws, nxdt)
    assert run_cli("train", str(nxdt), "--no-wait", "--yes", state=state).returncode == 0
    assert len(aws.client("sagemaker").list_training_jobs()["TrainingJobSummaries"]) == 1


def _vllm_neuron(tmp_path, *, compile_at_start: bool = True):
    spec = tmp_path / VLLM_NEURON.name
    text = VLLM_NEURON.read_text()
    if compile_at_start:  # apply needs no compile --remote first
        text = text.replace("    kind: vllm-neuron\n", "    kind: vllm-neuron\n    compile_at_start: true\n")
    spec.write_text(text)
    return spec


def _push_wrapper(aws, spec) -> None:
    image = yaml.safe_load(spec.read_text())["deployment"]["container"]["image_uri"]
    push_image(aws, image.split("/", 1)[1].rsplit(":", 1)[0], image.rsplit(":", 1)[1])


def test_compile_remote_refuses_the_wrapper_image_missing_and_the_secret_missing(aws, tmp_path):
    spec = _vllm_neuron(tmp_path, compile_at_start=False)
    state = tmp_path / "state.db"
    done = run_cli("compile", str(spec), "--remote", "--yes", state=state)
    line = refused(done, "deployment.container.image_uri")
    assert "neurondeploy-vllm-neuron:0.1.0 is not in ECR" in line and "docker push" in line
    refused(done, "deployment.container.env.HF_TOKEN")
    _push_wrapper(aws, spec)
    done = run_cli("compile", str(spec), "--remote", "--yes", state=state)
    assert "deployment.container.image_uri" not in done.stderr
    refused(done, "deployment.container.env.HF_TOKEN")
    nothing_started(aws, state)


def test_apply_refuses_a_secret_that_does_not_exist_before_creating_the_model(sagemaker_world, tmp_path):
    aws = sagemaker_world
    spec = _vllm_neuron(tmp_path)
    _push_wrapper(aws, spec)
    state = tmp_path / "state.db"
    done = run_cli("apply", str(spec), "--yes", state=state)
    line = refused(done, "deployment.container.env.HF_TOKEN")
    assert "secret arn:aws:secretsmanager:us-east-1:123456789012:secret:hf-token does not exist" in line
    assert "aws secretsmanager create-secret --name hf-token" in line
    nothing_started(aws, state)


def test_apply_refuses_without_the_permissions_boundary(sagemaker_world, tmp_path):
    aws = sagemaker_world
    spec = _vllm_neuron(tmp_path)
    _push_wrapper(aws, spec)
    provision(aws, spec)
    iam = aws.client("iam")
    iam.delete_policy(PolicyArn="arn:aws:iam::123456789012:policy/neurondeploy/neurondeploy-boundary")
    state = tmp_path / "state.db"
    line = refused(run_cli("apply", str(spec), "--yes", state=state), "iam")
    assert "permissions boundary" in line and "file://infra/iam-boundary.json" in line
    nothing_started(aws, state)
    assert [r for r in iam.list_roles()["Roles"] if r["Path"] == "/neurondeploy/"] == []
