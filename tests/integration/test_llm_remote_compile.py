"""`compile --remote` of the vLLM template: optimum-neuron's own export as a SageMaker job, its request built,
validated strictly against botocore, sent to a moto server over HTTP, then its entry run here as SageMaker runs an
image whose entrypoint the request overrides (replay/training_container.py): the wrapper's secret resolver reads
the gated model's HF_TOKEN from moto's Secrets Manager, then the export module runs a stand-in of ``optimum-cli``
(tests/fixtures/fake_optimum: real argparse flags, records its arguments, writes an exported layout), and the
output lands in moto S3 under the content key. A second compile finds it and sends no CreateTrainingJob; apply
then points the endpoint at the S3 prefix, with no Hub id, no token and the startup budget loading needs."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest
from support.cli import run_cli
from support.ec2_deployment import FIXTURES, REPO
from support.sagemaker import queue_invocation_answer

from neurondeploy.aws.transport import AwsTransport
from neurondeploy.engine.state import StateStore
from neurondeploy.replay.training_container import run_training_container
from neurondeploy.resources.precompiled import load_budget
from neurondeploy.resources.validation import check_request

pytestmark = pytest.mark.integration
TEMPLATE = REPO / "templates" / "llama3-8b-vllm-sagemaker.yaml"
TEMPLATE_ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:hf-token"
TOKEN = "hf_" + "x" * 34  # what the secret holds: never in a request, state or the CLI's output
BUCKET = "neurondeploy-123456789012-us-east-1"
EXPORT = [
    "export",
    "neuron",
    "--model",
    "meta-llama/Llama-3.1-8B-Instruct",
    "--task",
    "text-generation",
    "--batch_size",
    "4",
    "--sequence_length",
    "4096",
    "--tensor_parallel_size",
    "2",
    "--torch_dtype",
    "bfloat16",
    "--instance_type",
    "inf2",
]


def create_training_job_calls(aws) -> int:
    return len(aws.client("sagemaker").list_training_jobs()["TrainingJobSummaries"])


def vllm_spec(aws, tmp_path):
    """The template with its token in moto's Secrets Manager: the spec file, the secret's ARN, the CLI's
    environment (a local compile cache of its own) and a state file."""
    arn = aws.client("secretsmanager").create_secret(Name="hf-token", SecretString=TOKEN)["ARN"]
    spec = tmp_path / "llama3-8b.yaml"
    spec.write_text(TEMPLATE.read_text().replace(TEMPLATE_ARN, arn))
    env = {**os.environ, "NEURONDEPLOY_CACHE_DIR": str(tmp_path / "laptop-cache")}
    return spec, arn, env, str(tmp_path / "state.db")


def test_llm_compile_remote_exports_in_a_job_caches_in_s3_and_apply_loads_it(sagemaker_world, tmp_path):  # noqa: F811
    aws = sagemaker_world
    spec, arn, env, state = vllm_spec(aws, tmp_path)

    started = run_cli("compile", str(spec), "--remote", "--no-wait", "--yes", "--json", "--state", state, env=env)
    assert started.returncode == 0, started.stderr
    summary = json.loads(started.stdout)
    key = summary["artifact_key"]
    assert summary["status"] == "started" and summary["job_name"].startswith("llama3-8b-compile-2")
    # host RAM 3 × 15 GiB of bf16 weights rules out trn1.2xlarge's 32 GiB; trn1.32xlarge is the next Neuron host
    assert summary["instance_type"] == "ml.trn1.32xlarge"
    assert "not trn1.2xlarge: host RAM 32 GiB < 45 GiB" in started.stderr
    assert summary["model_uri"] == f"s3://{BUCKET}/compile-cache/{key}/model/"
    assert TOKEN not in started.stdout + started.stderr
    assert create_training_job_calls(aws) == 1

    # the request as sent (state records it), strictly valid, and what moto holds
    recorded = StateStore(tmp_path / "state.db").get("llama3-8b-compile")
    params = next(
        r["params"] for r in recorded.resources["compile-job"].create_requests if r["operation"] == "CreateTrainingJob"
    )
    check_request("sagemaker", "CreateTrainingJob", params)
    algorithm = params["AlgorithmSpecification"]
    assert algorithm["TrainingImage"].endswith("/neurondeploy-hf-vllm:0.1.0")  # the spec's image: its SDK pin
    assert algorithm["ContainerEntrypoint"][:4] == ["python3", "-m", "neurondeploy.aws.secrets", "--"]
    assert algorithm["ContainerArguments"][-len(EXPORT) - 1 :] == ["optimum-cli", *EXPORT]
    assert params["Environment"] == {
        "AWS_DEFAULT_REGION": "us-east-1",
        "HF_HOME": "/opt/ml/output/work/hf",  # on the job's ML storage volume, not the container's root filesystem
        "NEURONDEPLOY_CACHE_DIR": "/opt/ml/output/work/cache",
        "NEURON_COMPILE_CACHE_URL": "/opt/ml/output/work/neuron-cache",
        "NEURONDEPLOY_SECRET_ENV": json.dumps({"HF_TOKEN": {"secret": arn}}, separators=(",", ":")),
    }
    assert TOKEN not in json.dumps(params) and "HyperParameters" not in params
    assert params["ResourceConfig"] == {"InstanceType": "ml.trn1.32xlarge", "InstanceCount": 1}
    described = aws.client("sagemaker").describe_training_job(TrainingJobName=summary["job_name"])
    assert described["AlgorithmSpecification"]["TrainingImage"] == algorithm["TrainingImage"]
    policy = json.dumps(recorded.resources["execution-role"].create_requests[-1]["params"])
    assert "secretsmanager:GetSecretValue" in policy and arn in policy

    # what SageMaker runs, run here: resolver -> export module -> the optimum-cli stand-in on PATH
    log = tmp_path / "optimum-calls.jsonl"
    job_env = {
        **env,
        "PATH": f"{FIXTURES / 'fake_optimum'}{os.pathsep}{os.environ['PATH']}",
        "NEURONDEPLOY_CACHE_DIR": str(tmp_path / "job-cache"),
        "FAKE_OPTIMUM_LOG": str(log),
    }
    job_env.pop("HF_TOKEN", None)
    ran = run_training_container(params, AwsTransport("us-east-1"), tmp_path / "job", env=job_env)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert (tmp_path / "job" / "output" / "work" / "cache" / "entries" / key).is_dir()  # /opt/ml mapped to the job dir
    (call,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert call["argv"][:-1] == EXPORT  # the spec's batch, sequence, TP, dtype and target; then the output dir
    assert call["hf_token_sha256"] == hashlib.sha256(TOKEN.encode()).hexdigest()  # read from Secrets Manager
    assert TOKEN not in ran.stdout + ran.stderr
    s3 = aws.client("s3")
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix=f"compile-cache/{key}/")["Contents"]}
    prefix = f"compile-cache/{key}/model/"
    assert {f"compile-cache/{key}/entry.json", f"{prefix}neuron_config.json", f"{prefix}model.pt"} <= keys
    assert {
        f"{prefix}weights/tp0_sharded_checkpoint.safetensors",
        f"{prefix}weights/tp1_sharded_checkpoint.safetensors",
    } <= keys
    neuron_config = json.loads(s3.get_object(Bucket=BUCKET, Key=f"{prefix}neuron_config.json")["Body"].read())
    assert neuron_config == {
        "batch_size": 4,
        "sequence_length": 4096,
        "tp_degree": 2,
        "torch_dtype": "bfloat16",
        "target": "inf2",
    }

    # the same key again: found in S3, no CreateTrainingJob sent
    again = run_cli("compile", str(spec), "--remote", "--json", "--state", state, env=env)
    assert again.returncode == 0, again.stderr
    cached = json.loads(again.stdout)
    assert cached["status"] == "cached" and cached["job_name"] is None and cached["artifact_key"] == key
    assert create_training_job_calls(aws) == 1
    size = cached["size_bytes"]
    assert size == sum(o["Size"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix)["Contents"])

    # apply: the endpoint loads the exported model from S3, without the Hub, its token or a compile; its smoke test
    # is a short chat through InvokeEndpoint (moto answers the completion queued here, in vLLM's OpenAI shape)
    completion = {"model": "llama3-8b", "choices": [{"message": {"content": "Hello!"}, "finish_reason": "stop"}]}
    queue_invocation_answer(aws, completion)
    applied = run_cli("apply", str(spec), "--yes", "--json", "--state", state, env=env)
    assert applied.returncode == 0, applied.stderr
    assert (
        "smoke test passed: sagemaker:llama3-8b completed 'Say hello from Inferentia2.' with 'Hello!'" in applied.stderr
    )
    sm = aws.client("sagemaker")
    (variant,) = sm.describe_endpoint_config(
        EndpointConfigName=sm.list_endpoint_configs()["EndpointConfigs"][0]["EndpointConfigName"]
    )["ProductionVariants"]
    budget, why = load_budget(size, variant["VolumeSizeInGB"])  # read at that gp2 volume's throughput
    assert f"startup health-check budget {budget} s ({why}), was 3600 s" in applied.stderr
    assert f"a {variant['VolumeSizeInGB']} GiB gp2 volume" in why
    (model,) = sm.list_models()["Models"]
    sent = next(
        r["params"]
        for r in StateStore(tmp_path / "state.db").get("llama3-8b").resources["model"].create_requests
        if r["operation"] == "CreateModel"
    )
    check_request("sagemaker", "CreateModel", sent)
    container = sm.describe_model(ModelName=model["ModelName"])["PrimaryContainer"]
    for held in (sent["PrimaryContainer"], container):
        assert held["Environment"] == {
            "SM_ON_MODEL": "/opt/ml/model",
            "SM_ON_TENSOR_PARALLEL_SIZE": "2",
            "SM_ON_BATCH_SIZE": "4",
            "SM_ON_SEQUENCE_LENGTH": "4096",
            "SM_ON_PORT": "8080",
        }
    source = {"S3DataSource": {"S3Uri": f"s3://{BUCKET}/{prefix}", "S3DataType": "S3Prefix", "CompressionType": "None"}}
    assert sent["PrimaryContainer"]["ModelDataSource"] == container["ModelDataSource"] == source
    assert "ModelDataUrl" not in container
    assert variant["ContainerStartupHealthCheckTimeoutInSeconds"] == budget < 3600
    role_policy = json.dumps(
        StateStore(tmp_path / "state.db").get("llama3-8b").resources["execution-role"].create_requests[-1]["params"]
    )
    assert "secretsmanager" not in role_policy and prefix in role_policy  # no token to read; the model's prefix


def test_an_export_that_fails_stores_nothing_and_the_job_fails(aws, tmp_path):
    """The gated model without its token: the stand-in answers 401 as the Hub does; the job exits non-zero with the
    export's last lines, and the cache has no entry (a later compile starts a job again)."""
    aws.client("s3").create_bucket(Bucket=BUCKET)
    key = "f" * 64
    env = {
        **os.environ,
        "PATH": f"{FIXTURES / 'fake_optimum'}{os.pathsep}{os.environ['PATH']}",
        "NEURONDEPLOY_CACHE_DIR": str(tmp_path / "job-cache"),
        "FAKE_OPTIMUM_LOG": str(tmp_path / "calls.jsonl"),
    }
    env.pop("HF_TOKEN", None)
    cache = f"s3://{BUCKET}/compile-cache"
    ran = subprocess.run(
        [sys.executable, "-m", "neurondeploy.compiler.llm_export", "--artifact_key", key, "--cache_s3", cache, "--"]
        + ["optimum-cli", *EXPORT],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert ran.returncode == 3, ran.stderr
    assert "optimum-cli export neuron exited 1" in ran.stderr and "gated repo" in ran.stderr
    assert "Traceback" not in ran.stderr
    assert "Contents" not in aws.client("s3").list_objects_v2(Bucket=BUCKET, Prefix=f"compile-cache/{key}/")


def test_apply_without_an_export_refuses_unless_the_spec_starts_from_the_neuron_cache(sagemaker_world, tmp_path):
    """Without compile --remote's export, the container starts only if the Hugging Face Neuron cache has the model
    at these shapes (optimum-neuron refuses to compile on the instance): apply stops in one line, before anything is
    created, naming compile --remote; a spec that sets start_from_neuron_cache deploys from that cache."""
    aws = sagemaker_world
    spec, arn, env, state = vllm_spec(aws, tmp_path)

    refused = run_cli("apply", str(spec), "--yes", "--no-smoke", "--state", state, env=env)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    errors = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "no model built by compile --remote" in errors[0], refused.stderr
    assert f"neurondeploy compile {spec} --remote" in errors[0] and "start_from_neuron_cache: true" in errors[0]
    assert aws.client("sagemaker").list_models()["Models"] == []
    assert aws.client("iam").list_roles()["Roles"] == [] and StateStore(tmp_path / "state.db").names() == []

    spec.write_text(
        spec.read_text().replace("    kind: hf-vllm\n", "    kind: hf-vllm\n    start_from_neuron_cache: true\n")
    )
    applied = run_cli("apply", str(spec), "--yes", "--no-smoke", "--state", state, env=env)
    assert applied.returncode == 0, applied.stderr
    assert "starts from the Hugging Face Neuron cache's compiled configuration" in applied.stderr
    (model,) = aws.client("sagemaker").list_models()["Models"]
    container = aws.client("sagemaker").describe_model(ModelName=model["ModelName"])["PrimaryContainer"]
    assert container["Environment"]["SM_ON_MODEL"] == "meta-llama/Llama-3.1-8B-Instruct"  # from the Hub
    assert "ModelDataUrl" not in container
