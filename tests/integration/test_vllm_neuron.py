"""The vllm-neuron container kind (issue 29, step 2): AWS's vLLM Neuron image on SageMaker through the wrapper in the
account's ECR. The plan's image and environment, the one-line refusals, and the wrapper's start as SageMaker runs it:
infra/hf-secrets/Dockerfile's ENTRYPOINT with `serve`, the secret resolver, the SM_VLLM_* launcher, and vLLM's
OpenAI server (a stand-in here: vLLM and its Neuron plugin do not install on this machine) answering /ping and
/invocations."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml
from support.cli import run_cli
from support.ec2_deployment import FIXTURES, REPO
from support.sagemaker import push_image, queue_invocation_answer, transport

from neurondeploy import catalog
from neurondeploy.engine.sweep import find_leftovers
from neurondeploy.planner.context import plan_context
from neurondeploy.resources.release import deployment_release
from neurondeploy.resources.sagemaker_endpoint import create_model_request
from neurondeploy.serving.sm_vllm import vllm_arguments
from neurondeploy.specs import load_spec

pytestmark = pytest.mark.integration
WRAPPER = "123456789012.dkr.ecr.us-east-1.amazonaws.com/neurondeploy-vllm-neuron:0.1.0"
ARCHITECTURE = {"layers": 32, "hidden_size": 4096, "attention_heads": 32, "kv_heads": 8, "vocab_size": 128256}
ARCHITECTURE |= {"intermediate_size": 14336, "gated_mlp": True}


def _spec(tmp_path: Path, *, container: dict | None = None, model: dict | None = None, **top) -> Path:
    data = {
        "kind": "inference",
        "name": "llama-vn",
        "region": "us-east-1",
        "task": "text-generation",
        "model": model or {"hf_model_id": "meta-llama/Llama-3.1-8B-Instruct", "architecture": ARCHITECTURE},
        "compile": {"batch_sizes": [4], "sequence_lengths": [4096]},
        "deployment": {
            "platform": "sagemaker",
            "instance_type": "ml.inf2.8xlarge",
            "tensor_parallel": 2,
            "health_check_timeout_s": 3600,
            "container": container
            if container is not None
            else {"kind": "vllm-neuron", "image_uri": WRAPPER, "compile_at_start": True},
        },
        **top,
    }
    data["model"].setdefault("dtype", "bfloat16")
    path = tmp_path / "vllm-neuron.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _validate(spec: Path) -> tuple[int, list[str], list[str]]:
    result = run_cli("validate", str(spec), "--json")
    (checked,) = json.loads(result.stdout)
    return result.returncode, checked["errors"], checked["warnings"]


def test_the_launcher_turns_sm_vllm_variables_into_vllms_arguments_on_8080():
    environ = {
        "SM_VLLM_MODEL": "/opt/ml/model",
        "SM_VLLM_TENSOR_PARALLEL_SIZE": "2",
        "SM_VLLM_ENABLE_PREFIX_CACHING": "",  # a flag alone
        "SM_VLLM_PORT": "9000",  # SageMaker's port is not the spec's to move
        "SM_ON_BATCH_SIZE": "4",  # another container's convention: not vLLM's
    }
    assert vllm_arguments(environ) == [
        "--port", "8080", "--enable-prefix-caching", "--model", "/opt/ml/model", "--tensor-parallel-size", "2",
    ]  # fmt: skip


def test_plan_runs_the_wrapper_built_from_the_release_matrix_image_with_sm_vllm_settings(tmp_path):
    loaded = load_spec(_spec(tmp_path))
    release = deployment_release(loaded.spec)
    piece = release.piece("serving image")
    # SageMaker's host driver (2.19) takes no runtime of 2.30+: the newest 0.16.0 image it can run is 2.29.1's
    (expected,) = [row for row in catalog.vllm_releases() if row.sdk == release.sdk and row.serves("inf2")]
    assert (release.sdk, piece.name, piece.base, piece.python) == ("2.29.1", WRAPPER, expected.tag, "3.12")
    container = create_model_request(loaded.spec, plan_context(loaded, account_id="123456789012"))["PrimaryContainer"]
    assert container["Image"] == WRAPPER
    assert container["Environment"] == {
        "SM_VLLM_MODEL": "meta-llama/Llama-3.1-8B-Instruct",
        "SM_VLLM_TENSOR_PARALLEL_SIZE": "2",
        "SM_VLLM_MAX_NUM_SEQS": "4",
        "SM_VLLM_MAX_MODEL_LEN": "4096",
    }
    planned = run_cli("plan", str(loaded.path))
    assert planned.returncode == 0, planned.stderr
    assert f"built FROM {expected.tag}" in planned.stdout and "compiles the model with NxD Inference" in planned.stdout


def test_what_the_container_cannot_take_is_refused_in_one_line(tmp_path):
    # no wrapper: SageMaker cannot pull the public image; the fix builds it FROM the release's image
    code, errors, _ = _validate(_spec(tmp_path, container={"kind": "vllm-neuron", "compile_at_start": True}))
    base = f"public.ecr.aws/neuron/{catalog.VLLM_REPOSITORY}:0.16.0-neuronx-py312-sdk2.29.1-ubuntu24.04"
    assert code == 2 and len(errors) == 1 and "from the account's own ECR" in errors[0]
    assert (
        f"--build-arg BASE_IMAGE={base}" in errors[0]
        and "HF_ENTRYPOINT='python3 -m neurondeploy.serving.sm_vllm'" in errors[0]
    )
    # a release whose vLLM Neuron images do not list inf2 (the Trn2 line)
    trn2_only = max((r.sdk for r in catalog.vllm_releases() if not r.serves("inf2")), key=catalog.version_tuple)
    code, errors, _ = _validate(_spec(tmp_path, neuron_sdk_version=trn2_only))
    assert code == 2 and any("images do not list inf2 instances" in e for e in errors), errors
    # the compile at start is the spec's choice, and each cache field belongs to its own kind
    _, errors, warnings = _validate(_spec(tmp_path, container={"kind": "vllm-neuron", "image_uri": WRAPPER}))
    assert errors == [] and any("set deployment.container.compile_at_start: true" in w for w in warnings)
    wrong = {"kind": "vllm-neuron", "image_uri": WRAPPER, "start_from_neuron_cache": True}
    code, errors, _ = _validate(_spec(tmp_path, container=wrong))
    assert code == 2 and "does not read the Hugging Face Neuron cache" in errors[0]
    code, errors, _ = _validate(_spec(tmp_path, container={"kind": "hf-vllm", "compile_at_start": True}))
    assert code == 2 and "compile_at_start is for a container that compiles the model when it starts" in errors[0]


def test_apply_without_compiled_artifacts_or_compile_at_start_is_refused_before_any_call(sagemaker_world, tmp_path):
    aws = sagemaker_world
    spec = _spec(tmp_path, container={"kind": "vllm-neuron", "image_uri": WRAPPER})
    refused = run_cli("apply", str(spec), "--yes", "--state", str(tmp_path / "state.db"))
    lines = refused.stderr.strip().splitlines()
    assert refused.returncode != 0 and len(lines) == 1 and lines[0].startswith("error: "), refused.stderr
    assert "no model built by compile --remote" in lines[0] and f"neurondeploy compile {spec} --remote" in lines[0]
    assert "compile_at_start: true" in lines[0]
    assert aws.client("sagemaker").list_models()["Models"] == []
    _, errors, warnings = _validate(spec)
    (said,) = [w for w in warnings if "until compile --remote has built its compiled artifacts" in w]
    assert errors == [] and "loading needs about" in said


def _entrypoint() -> list[str]:
    """infra/hf-secrets/Dockerfile's ENTRYPOINT, as Docker runs it."""
    dockerfile = (REPO / "infra" / "hf-secrets" / "Dockerfile").read_text()
    (line,) = re.findall(r"^ENTRYPOINT (\[.*\])$", dockerfile, re.MULTILINE)
    return json.loads(line)


@pytest.mark.slow
def test_the_wrapper_started_as_sagemaker_starts_it_answers_ping_and_invocations(tmp_path):
    from integration.test_serving import free_port
    from neurondeploy.serving.llm.model import build_stand_in

    model_dir = tmp_path / "opt" / "ml" / "model"  # where SageMaker unpacks the model data
    lm = build_stand_in("tiny/llama", None, 256)
    lm.model.save_pretrained(model_dir)
    lm.tokenizer.save_pretrained(model_dir)
    loaded = load_spec(_spec(tmp_path, model={"path": str(model_dir)}))
    container = create_model_request(loaded.spec, plan_context(loaded, account_id="123456789012"))["PrimaryContainer"]
    assert container["Environment"]["SM_VLLM_MODEL"] == "/opt/ml/model"
    environment = {**container["Environment"], "SM_VLLM_MODEL": str(model_dir), "SM_VLLM_MAX_MODEL_LEN": "256"}
    port, log = free_port(), tmp_path / "vllm-argv.jsonl"
    env = {
        **os.environ,
        **environment,
        # what the wrapper image sets (its HF_ENTRYPOINT build argument) and what stands in for the image's vLLM
        "NEURONDEPLOY_HF_ENTRYPOINT": loaded.spec.container.wrapper_entrypoint,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "PYTHONPATH": str(FIXTURES / "fake_vllm"),
        "FAKE_VLLM_PORT": str(port),
        "FAKE_VLLM_LOG": str(log),
    }
    with _wrapper_serving(env, port):
        body = {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4}
        answer = httpx.post(f"http://127.0.0.1:{port}/invocations", json=body, timeout=60)
        assert answer.status_code == 200, answer.text
        assert answer.json()["choices"][0]["message"]["content"] is not None
        (argv,) = [json.loads(line)["argv"] for line in log.read_text().splitlines()]
        assert argv == vllm_arguments(environment) and argv[:2] == ["--port", "8080"]


@contextlib.contextmanager
def _wrapper_serving(env: dict, port: int) -> Iterator[None]:
    """The wrapper started as SageMaker starts it (its ENTRYPOINT with `serve`), until /ping answers 200; stopped
    when the block ends."""
    process = subprocess.Popen(
        [*_entrypoint(), "serve"], env=env, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            assert process.poll() is None, process.stderr.read()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/ping", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the wrapper's server never answered /ping"
            time.sleep(0.2)
        yield
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)


@pytest.mark.slow
def test_the_local_twin_answers_the_openai_client_and_refuses_as_vllm_does():
    """`apply --local` of templates/llama3-8b-vllm-neuron-local.yaml: the routes and bodies of vLLM's server, which the
    vllm-neuron container runs (a 2-layer stand-in of the 8B model here): the official client, streamed and whole;
    a body vLLM refuses gets its 400."""
    import openai

    from integration.test_serving import free_port

    port = free_port()
    command = [sys.executable, "-m", "neurondeploy.cli", "apply", "templates/llama3-8b-vllm-neuron-local.yaml"]
    process = subprocess.Popen(
        [*command, "--local", "--port", str(port)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        line = process.stdout.readline()  # blocks until ready (or the process dies)
        assert line.strip() == f"ready http://127.0.0.1:{port}", process.stderr.read()
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused")
        model = client.models.list().data[0].id
        messages = [{"role": "user", "content": "Hello"}]
        whole = client.chat.completions.create(model=model, messages=messages, max_tokens=8, temperature=0)
        streamed = client.chat.completions.create(
            model=model, messages=messages, max_tokens=8, temperature=0, stream=True
        )
        text = "".join(chunk.choices[0].delta.content or "" for chunk in streamed if chunk.choices)
        assert whole.choices[0].message.content == text and "stand-in" in model
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(model=model, messages=messages, max_tokens=8, top_p=7)
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()


def _prefill_hub_cache(hf_home: Path, model_id: str) -> Path:
    """The Hub as the job's Hugging Face client finds it offline: the model's snapshot in $HF_HOME's cache layout
    (hub/models--ORG--NAME/refs/main and snapshots/COMMIT/), a 2-layer stand-in saved there. No Hub here."""
    from neurondeploy.serving.llm.model import build_stand_in

    repo = hf_home / "hub" / f"models--{model_id.replace('/', '--')}"
    commit = "0" * 40
    lm = build_stand_in("tiny/llama", None, 256)
    lm.model.save_pretrained(repo / "snapshots" / commit)
    lm.tokenizer.save_pretrained(repo / "snapshots" / commit)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    return repo / "snapshots" / commit


@dataclass
class RemoteCompile:
    prefix: str  # the cache entry's model/ prefix in the shared bucket
    keys: set[str]  # its objects
    log: Path  # the stand-in vLLM's starts, one JSON line each
    env: dict[str, str]  # the job's environment here, which the endpoint replays reuse
    port: int  # where the stand-in vLLM listens
    served: dict[str, str]  # the endpoint's environment over the compiled model, as the job ran it


def compile_remotely(aws, spec: Path, tmp_path: Path, env: dict, *, image: str, secret: str) -> RemoteCompile:
    """`compile SPEC --remote` through the CLI: its CreateTrainingJob (strictly valid, the endpoint's environment over
    the compiled model) run as SageMaker runs an image whose entrypoint the request overrides (/opt/ml at
    tmp_path/job; the container's 8080 at a free loopback port): the resolver, the job module, the Hub download
    from a pre-filled offline cache, then the endpoint's launcher and the stand-in vLLM, which compiles into
    NEURON_COMPILED_ARTIFACTS; the model lands in the S3 cache."""
    from integration.test_serving import free_port
    from neurondeploy.aws.transport import AwsTransport
    from neurondeploy.engine.state import StateStore
    from neurondeploy.replay.training_container import run_training_container
    from neurondeploy.resources.validation import check_request

    bucket, state = "neurondeploy-123456789012-us-east-1", str(tmp_path / "state.db")
    loaded = load_spec(spec)
    started = run_cli("compile", str(spec), "--remote", "--no-wait", "--yes", "--json", "--state", state, env=env)
    assert started.returncode == 0, started.stderr
    summary = json.loads(started.stdout)
    prefix = f"compile-cache/{summary['artifact_key']}/model/"
    assert summary["model_uri"] == f"s3://{bucket}/{prefix}" and summary["instance_type"] == "ml.trn1.32xlarge"
    recorded = StateStore(tmp_path / "state.db").get(f"{loaded.spec.name}-compile")
    params = next(
        r["params"] for r in recorded.resources["compile-job"].create_requests if r["operation"] == "CreateTrainingJob"
    )
    check_request("sagemaker", "CreateTrainingJob", params)
    algorithm = params["AlgorithmSpecification"]
    assert algorithm["TrainingImage"] == image
    assert algorithm["ContainerEntrypoint"][-1] == "neurondeploy.compiler.vllm_neuron_compile"
    arguments = algorithm["ContainerArguments"]
    assert arguments[arguments.index("--") :] == ["--", "python3", "-m", "neurondeploy.serving.sm_vllm"]
    served = {  # the endpoint's own environment over the compiled model, in the job
        "SM_VLLM_MODEL": "/opt/ml/model",
        "NEURON_COMPILED_ARTIFACTS": "/opt/ml/model/neuron-compiled-artifacts",
        "SM_VLLM_TENSOR_PARALLEL_SIZE": "2",
        "SM_VLLM_MAX_NUM_SEQS": "4",
        "SM_VLLM_MAX_MODEL_LEN": "4096",
    }
    assert (
        served.items() <= params["Environment"].items() and secret in params["Environment"]["NEURONDEPLOY_SECRET_ENV"]
    )

    # what SageMaker runs, run here (/opt/ml at tmp_path/job; the container's 8080 at a free loopback port): the
    # resolver, the job module, the Hub download, then the endpoint's launcher and the stand-in vLLM
    job_dir, port, log = tmp_path / "job", free_port(), tmp_path / "vllm.jsonl"
    _prefill_hub_cache(job_dir / "output" / "work" / "hf", loaded.spec.model.hf_model_id)
    arguments[arguments.index("--health_url") + 1] = f"http://127.0.0.1:{port}/ping"
    job_env = {
        **env,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "PYTHONPATH": str(FIXTURES / "fake_vllm"),
        "FAKE_VLLM_PORT": str(port),
        "FAKE_VLLM_LOG": str(log),
        "HF_HUB_OFFLINE": "1",
        "NEURONDEPLOY_CACHE_DIR": str(tmp_path / "job-cache"),
    }
    ran = run_training_container(params, AwsTransport("us-east-1"), job_dir, env=job_env)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    (job_start,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert job_start["artifacts"] == "compiled" and job_start["argv"] == vllm_arguments(
        {**served, "SM_VLLM_MODEL": str(job_dir / "model")}
    )
    assert list((job_dir / "model").iterdir()) == []  # moved into the cache: the job's model.tar.gz is empty
    s3 = aws.client("s3")
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=prefix)["Contents"]}
    assert {f"{prefix}config.json", f"{prefix}neuron-compiled-artifacts/neuron_config.json"} <= keys

    return RemoteCompile(prefix, keys, log, job_env, port, served)


@pytest.mark.slow
def test_compile_remote_then_apply_of_the_template_then_reapply_and_destroy(sagemaker_world, tmp_path):
    """Through the CLI against moto, templates/llama3-8b-vllm-neuron-sagemaker.yaml: apply refuses until compile
    --remote has built the model; compile --remote's job (its request strictly valid, then run here as SageMaker runs
    an image whose entrypoint the request overrides) starts vLLM as the endpoint does, which compiles into
    NEURON_COMPILED_ARTIFACTS (the stand-in vLLM does what vllm-neuron's loader does), and the model lands in the S3
    cache; apply points the endpoint at it with the budget loading needs, and the endpoint started from that S3
    prefix loads the artifacts instead of compiling; a second apply sends no mutating call; destroy leaves nothing."""
    from neurondeploy.resources.precompiled import load_budget

    aws = sagemaker_world
    template = REPO / "templates" / "llama3-8b-vllm-neuron-sagemaker.yaml"
    arn = aws.client("secretsmanager").create_secret(Name="hf-token", SecretString="hf_" + "x" * 34)["ARN"]
    spec = tmp_path / "llama3-8b-vn.yaml"
    spec.write_text(template.read_text().replace("arn:aws:secretsmanager:us-east-1:123456789012:secret:hf-token", arn))
    image = load_spec(spec).spec.deployment.container.image_uri
    state, bucket = str(tmp_path / "state.db"), "neurondeploy-123456789012-us-east-1"
    env = {**os.environ, "NEURONDEPLOY_CACHE_DIR": str(tmp_path / "laptop-cache")}
    push_image(aws, image.split("/", 1)[1].rsplit(":", 1)[0], image.rsplit(":", 1)[1])

    refused = run_cli("apply", str(spec), "--yes", "--state", state, env=env)
    lines = refused.stderr.strip().splitlines()
    assert refused.returncode != 0 and len(lines) == 1 and "no model built by compile --remote" in lines[0]
    assert f"neurondeploy compile {spec} --remote" in lines[0] and "compile_at_start: true" in lines[0]
    assert aws.client("sagemaker").list_models()["Models"] == []

    job = compile_remotely(aws, spec, tmp_path, env, image=image, secret=arn)
    prefix, keys, log, job_env, port = job.prefix, job.keys, job.log, job.env, job.port
    served, s3 = job.served, aws.client("s3")

    again = run_cli("compile", str(spec), "--remote", "--json", "--state", state, env=env)
    assert again.returncode == 0 and json.loads(again.stdout)["status"] == "cached", again.stderr
    assert len(aws.client("sagemaker").list_training_jobs()["TrainingJobSummaries"]) == 1

    queue_invocation_answer(
        aws, {"model": "x", "choices": [{"message": {"content": "Hello!"}, "finish_reason": "stop"}]}
    )
    applied = run_cli("apply", str(spec), "--yes", "--json", "--state", state, env=env)
    assert applied.returncode == 0, applied.stderr
    said = " ".join(applied.stderr.split())
    size = sum(o["Size"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=prefix)["Contents"])
    budget, why = load_budget(size, 128)
    assert f"the model compile --remote built: s3://{bucket}/{prefix}" in said
    assert f"startup health-check budget {budget} s ({why}), was 3600 s" in said
    assert "smoke test passed: sagemaker:llama3-8b-vn completed" in said
    sm = aws.client("sagemaker")
    (model,) = sm.list_models()["Models"]
    container = sm.describe_model(ModelName=model["ModelName"])["PrimaryContainer"]
    assert container["Image"] == image and container["Environment"] == served  # no Hub id, no token reference
    assert container["ModelDataSource"]["S3DataSource"]["S3Uri"] == f"s3://{bucket}/{prefix}"

    # the endpoint as SageMaker starts it: the S3 prefix at /opt/ml/model, the wrapper's ENTRYPOINT with `serve`
    opt_ml = tmp_path / "endpoint" / "opt" / "ml"
    for key_name in keys:
        target = opt_ml / "model" / key_name[len(prefix) :]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(s3.get_object(Bucket=bucket, Key=key_name)["Body"].read())
    endpoint_env = {name: value.replace("/opt/ml", str(opt_ml)) for name, value in container["Environment"].items()}
    entrypoint = {"NEURONDEPLOY_HF_ENTRYPOINT": load_spec(spec).spec.container.wrapper_entrypoint}
    with _wrapper_serving({**job_env, **endpoint_env, **entrypoint}, port):
        pass
    endpoint_start = json.loads(log.read_text().splitlines()[-1])
    assert endpoint_start["artifacts"] == "loaded"  # what the job compiled, not a compile at start

    reapplied = run_cli("apply", str(spec), "--yes", "--json", "--state", state, env=env)
    assert reapplied.returncode == 0 and json.loads(reapplied.stdout)["mutating_calls"] == 0, reapplied.stderr
    gone = run_cli("destroy", "llama3-8b-vn", "--yes", "--state", state, env=env)
    assert gone.returncode == 0, gone.stderr
    assert sm.list_models()["Models"] == [] and find_leftovers(transport(), "llama3-8b-vn") == []


def test_an_llm_spec_naming_no_container_runs_vllm_neuron_and_the_frozen_kinds_say_so(tmp_path):
    named = _spec(tmp_path, container={})
    assert load_spec(named).spec.deployment.container.kind == "vllm-neuron"
    _, _, frozen = _validate(REPO / "templates" / "llama3-8b-vllm-sagemaker.yaml")
    (said,) = [w for w in frozen if "images stop at Neuron SDK" in w]
    assert "container hf-vllm's images stop at Neuron SDK 2.26.1" in said and "container kind vllm-neuron" in said
    _, _, maintained = _validate(REPO / "templates" / "llama3-8b-vllm-neuron-sagemaker.yaml")
    assert not any("images stop at" in w for w in maintained)


def test_the_trn2_template_plans_one_server_on_all_64_logical_cores_from_one_release_row():
    """templates/llama3-70b-vllm-neuron-trn2-sagemaker.yaml: ml.trn2.48xlarge sized by its 64 logical NeuronCores
    (LNC=2, 24 GiB each) at TP 64, no core idle; the serving image, its SDK and Python from one row of the release
    matrix; vLLM's settings in the model's environment; the compile job on a Trn2 host; the load budget predicted."""
    template = REPO / "templates" / "llama3-70b-vllm-neuron-trn2-sagemaker.yaml"
    planned = run_cli("plan", str(template), "--json")
    assert planned.returncode == 0, planned.stderr
    plan = json.loads(planned.stdout)
    (piece,) = plan["release"]["pieces"]
    (row,) = [r for r in catalog.vllm_releases() if r.sdk == plan["release"]["neuron_sdk"] and r.vllm == "0.16.0"]
    assert row.serves("trn2") and f"built FROM {row.tag} " in piece["source"]
    assert (piece["sdk"], piece["python"]) == (row.sdk, ".".join(row.python.split(".")[:2]))
    (model,) = [r for r in plan["resources"] if r["name"] == "model"]
    environment = model["requests"][0]["params"]["PrimaryContainer"]["Environment"]
    assert environment["SM_VLLM_TENSOR_PARALLEL_SIZE"] == "64" and environment["SM_VLLM_MAX_MODEL_LEN"] == "4096"
    findings = " ".join(finding["text"] for finding in plan["findings"])
    assert "idle" not in findings and "does not fit" not in findings
    assert "loading needs about" in findings  # the budget a model built by compile --remote gets
    assert any("runs a SageMaker job on ml.trn2.48xlarge" in step["what"] for step in plan["before_apply"])
    # no ml.trn2.48xlarge price is published: the EC2 one, said to be a lower bound
    assert "no ml.trn2.48xlarge price is catalogued" in json.dumps(plan["cost"]) and "lower bound" in json.dumps(
        plan["cost"]
    )
    instance = catalog.get_instance("trn2.48xlarge")
    assert (instance.neuron_cores, instance.hbm_per_core_gib) == (64, 24.0)
    assert max(catalog.legal_tp_degrees(instance, "nxdi")) == 64
