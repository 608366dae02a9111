"""Nothing paid starts on what a read-only call finds missing: `train`, `compile --remote` and `apply` through the
CLI against the moto server, each refused in one line per missing piece naming the spec field and its fix, before
any Create* request (the emulator holds no job, endpoint or neurondeploy bucket afterwards)."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml
from support.account import provision
from support.cli import run_cli
from support.sagemaker import push_image

from integration.test_quotas import quotas  # noqa: F401 (a fixture)
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


QUOTAS = (
    ("L-0000000A", "ml.trn1.32xlarge for training job usage"),
    ("L-0000000B", "ml.inf2.8xlarge for endpoint usage"),
)


def _steps(done) -> dict[str, dict]:
    plan = json.loads(done.stdout)
    return {step["check"]: step for step in plan["before_apply"] if step["check"]}, plan


def test_plan_check_lists_what_is_missing_with_its_command_then_done_once_made(aws, quotas, tmp_path, monkeypatch):
    """`plan --check` of the vLLM Neuron template, in an empty account: the wrapper image, the token secret, both
    quotas (the compile job's and the endpoint's) and compile --remote's model are missing, each with the command
    that makes it; the licence is not checked (it lives in a Hugging Face account). Once each exists (pushed, created,
    raised, built into the compile cache by the job's own last step), each is done and the exit is 0. Read-only."""
    from neurondeploy.compiler.llm_export import build_into_cache
    from neurondeploy.ops.compile_remote import llm_export
    from neurondeploy.specs import load_spec

    monkeypatch.setenv("NEURONDEPLOY_CACHE_DIR", str(tmp_path / "job-cache"))  # the job's own, empty, local cache
    spec = _vllm_neuron(tmp_path, compile_at_start=False)
    for code, name in QUOTAS:
        quotas.default("sagemaker", code, name, 0)
    done = run_cli("plan", str(spec), "--check", "--json")
    assert done.returncode == 2 and "5 missing before apply" in done.stderr, done.stderr
    steps, plan = _steps(done)
    assert steps["image"]["status"] == "missing" and "is not in ECR" in steps["image"]["detail"]
    assert any(c.startswith("docker build -f infra/hf-secrets/Dockerfile") for c in steps["image"]["commands"])
    assert steps["image"]["commands"][-1] == f"docker push {steps['image']['subject']}"
    assert steps["secret"]["status"] == "missing"
    assert steps["secret"]["commands"] == [
        "aws secretsmanager create-secret --name hf-token --secret-string file://VALUE --region us-east-1"
    ]
    assert steps["compiled"]["status"] == "missing" and steps["compiled"]["commands"] == [
        f"neurondeploy compile {spec} --remote"
    ]
    quota_steps = [s for s in plan["before_apply"] if s["check"] == "quota"]
    assert len(quota_steps) == 2 and all(s["status"] == "missing" for s in quota_steps)
    assert all("request-service-quota-increase" in s["commands"][0] for s in quota_steps)
    assert steps["licence"]["status"] == "not checked" and steps["boundary"]["status"] == "done"
    nothing_started(aws, tmp_path / "no-state.db")

    _push_wrapper(aws, spec)
    provision(aws, spec)  # the secret
    for code, name in QUOTAS:
        quotas.default("sagemaker", code, name, 1)
    loaded = load_spec(spec)
    cache_uri = "s3://neurondeploy-123456789012-us-east-1/compile-cache"
    aws.client("s3").create_bucket(Bucket="neurondeploy-123456789012-us-east-1")

    def build(directory):
        (directory / "model").mkdir(parents=True)
        (directory / "model" / "config.json").write_text("{}")
        return {}

    assert build_into_cache(llm_export(loaded, cache_uri).key, cache_uri, build) == 0
    done = run_cli("plan", str(spec), "--check", "--json")
    assert done.returncode == 0, done.stderr
    steps, plan = _steps(done)
    checked = [s for s in plan["before_apply"] if s["check"] and s["check"] != "licence"]
    assert {s["check"] for s in checked} == {"image", "secret", "boundary", "compiled", "quota"}
    assert all(s["status"] == "done" for s in checked), [(s["check"], s["status"], s["detail"]) for s in checked]
    assert plan["check_problems"] == []


def _with_role(nxdt, aws, policy: dict | None) -> str:
    spec = yaml.safe_load(nxdt.read_text())
    role = "arn:aws:iam::123456789012:role/TrainingRole"
    spec["iam"] = {"role_arn": role}
    nxdt.write_text(yaml.safe_dump(spec))
    provision(aws, nxdt)
    if policy is not None:
        aws.client("iam").put_role_policy(RoleName="TrainingRole", PolicyName="job", PolicyDocument=json.dumps(policy))
    return role


def test_train_refuses_a_role_that_may_not_read_the_channel_or_write_the_output(nxdt, aws, tmp_path, monkeypatch):
    """IAM's policy simulator (moto lacks it: tests/support/iam_simulator.py stands in) on the spec's role: each use
    the job makes of what the spec names that the role may not, one line naming the action, the resource and the
    fix; granted, the job starts."""
    from support import iam_simulator

    asked = iam_simulator.install(monkeypatch)
    read_only = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": ["s3:GetObject", "s3:ListBucket"], "Resource": "*"}],
    }
    role = _with_role(nxdt, aws, read_only)
    state = tmp_path / "state.db"
    done = run_cli("train", str(nxdt), "--no-wait", "--yes", state=state)
    lines = [line for line in done.stderr.splitlines() if line.startswith("error: iam.role_arn:")]
    assert done.returncode == 2 and lines, done.stderr
    assert all(f"role {role} may not s3:PutObject on arn:aws:s3:::" in line for line in lines), lines
    assert all("(implicitDeny)" in line and "(fix: grant the role s3:PutObject on" in line for line in lines)
    assert {a["PolicySourceArn"] for a in asked} == {role}
    assert {"s3:GetObject", "s3:ListBucket", "s3:PutObject"} <= {n for a in asked for n in a["ActionNames"]}
    nothing_started(aws, state)
    read_only["Statement"][0]["Action"].append("s3:PutObject")
    aws.client("iam").put_role_policy(RoleName="TrainingRole", PolicyName="job", PolicyDocument=json.dumps(read_only))
    assert run_cli("train", str(nxdt), "--no-wait", "--yes", state=state).returncode == 0


def test_a_role_the_simulator_cannot_judge_is_said_not_checked_and_the_job_starts(nxdt, aws, tmp_path):
    """moto's own IAM (no SimulatePrincipalPolicy): the preflight says the role's permissions were not checked, in
    one line, and goes on, as with an identity that may not simulate."""
    _with_role(nxdt, aws, None)
    done = run_cli("train", str(nxdt), "--no-wait", "--yes", state=tmp_path / "state.db")
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stderr.splitlines() if "permissions: not checked" in line]
    assert len(said) == 1 and "iam.role_arn" in said[0], done.stderr
