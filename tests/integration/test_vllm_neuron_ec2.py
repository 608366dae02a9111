"""vllm-neuron on EC2 (issue 29): the instances boot the vLLM 0.16 DLAMI, and their unit starts vLLM from its venv as
the vLLM Neuron image would (the wrapper's launcher, the SageMaker model's environment), over the model compile
--remote built, fetched from S3 to /opt/ml/model as a SageMaker endpoint gets it."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import httpx
import pytest
import yaml
from support.cli import run_cli
from support.ec2_deployment import FIXTURES, REPO
from support.sagemaker import push_image, transport

from integration.test_vllm_neuron import ARCHITECTURE, WRAPPER, compile_remotely
from integration.test_vllm_neuron import _spec as vllm_spec
from neurondeploy import catalog
from neurondeploy.engine.sweep import find_leftovers
from neurondeploy.planner.context import plan_context
from neurondeploy.resources.deployment import deployment_resources
from neurondeploy.resources.precompiled import MODEL_DIR
from neurondeploy.resources.release import deployment_release
from neurondeploy.serving.sm_vllm import vllm_arguments
from neurondeploy.specs import load_spec

pytestmark = pytest.mark.integration
NAME = "llama-vn-ec2"
VLLM_DLAMI = catalog.dlami_for("vllm-neuron")


def _spec(tmp_path: Path, *, port: int = 8080, model: dict | None = None, env: dict | None = None) -> Path:
    """test_vllm_neuron's spec on inf2.8xlarge instances behind an ALB, serving on ``port``."""
    container = {"kind": "vllm-neuron", "image_uri": WRAPPER, "env": env or {}}
    network = {"vpc_cidr": "10.42.0.0/16", "availability_zones": 2}
    path = vllm_spec(tmp_path, container=container, model=model, name=NAME, network=network, serving={"port": port})
    data = yaml.safe_load(path.read_text())
    data["deployment"] |= {"platform": "ec2", "instance_type": "inf2.8xlarge"}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _user_data(resources) -> str:
    template = next(r for r in resources if r.name == "launch-template")
    return base64.b64decode(template.create[0].params["LaunchTemplateData"]["UserData"]).decode()


def _environment_file(script: str) -> str:
    encoded = script.split("printf %s '", 1)[1].split("'", 1)[0]
    return base64.b64decode(encoded).decode()


def test_the_plan_boots_the_vllm_dlami_and_starts_vllm_from_its_venv_as_the_image_would(tmp_path):
    loaded = load_spec(
        _spec(tmp_path, env={"HF_TOKEN": {"secret": "arn:aws:secretsmanager:us-east-1:123456789012:secret:t"}})
    )
    release = deployment_release(loaded.spec)
    dlami = release.piece("instance DLAMI")
    assert dlami.name == VLLM_DLAMI.parameter and "vllm_0_16" in VLLM_DLAMI.venv
    assert catalog.minor(release.sdk) == catalog.minor(VLLM_DLAMI.sdk)  # one release: the DLAMI's
    compile_image = release.piece("compile job image")  # the image serves nothing on EC2: it runs compile --remote
    assert compile_image.name == WRAPPER and compile_image.sdk == release.sdk and release.piece("serving image") is None
    ctx = plan_context(loaded)
    assert ctx.ami_ssm_parameter == VLLM_DLAMI.parameter and ctx.neuron_venv == VLLM_DLAMI.venv

    script = _user_data(deployment_resources(loaded, ctx))
    python = f"{VLLM_DLAMI.venv}/bin/python"
    launcher = f"{python} -m neurondeploy.aws.secrets -- {python} -m neurondeploy.serving.sm_vllm --port 8080"
    assert f"ExecStart={launcher}\n" in script
    assert f"{VLLM_DLAMI.venv}/bin/pip install --no-cache-dir --no-deps " in script  # the venv's vLLM stays as shipped
    env = _environment_file(script)
    assert 'SM_VLLM_MODEL="meta-llama/Llama-3.1-8B-Instruct"' in env and 'SM_VLLM_TENSOR_PARALLEL_SIZE="2"' in env
    assert "secretsmanager" in env and "NEURONDEPLOY_SECRET_ENV" in env  # a reference, resolved at start
    assert "meta-llama" not in script  # spec values reach the instance only inside the encoded file

    # over the model compile --remote built: fetched to /opt/ml/model, its paths in the unit, no Hub id or token
    ctx = plan_context(loaded, precompiled_model_uri="s3://cache-bucket/compile-cache/k/model/")
    resources = deployment_resources(loaded, ctx)
    script = _user_data(resources)
    assert f'Environment="SM_VLLM_MODEL={MODEL_DIR}"' in script
    assert f'Environment="NEURON_COMPILED_ARTIFACTS={MODEL_DIR}/neuron-compiled-artifacts"' in script
    assert f"('cache-bucket', 'compile-cache/k/model/', '{MODEL_DIR}')" in script
    env = _environment_file(script)
    assert "SM_VLLM_MODEL" not in env and "NEURONDEPLOY_SECRET_ENV" not in env
    role = next(r for r in resources if r.name == "instance-role")
    policy = next(q.params["PolicyDocument"] for q in role.create if q.operation == "PutRolePolicy")
    assert "arn:aws:s3:::cache-bucket/compile-cache/k/model/*" in policy and "secretsmanager" not in policy


def test_the_instances_add_what_the_wrapper_image_adds():
    """The wrapper's Dockerfile and the boot script put the same packages beside the image's or DLAMI's vLLM."""
    from neurondeploy.resources.compute import WRAPPER_REQUIREMENTS

    dockerfile = (REPO / "infra" / "hf-secrets" / "Dockerfile").read_text()
    (line,) = [line for line in dockerfile.splitlines() if line.startswith("RUN pip install")]
    assert "--no-deps /opt/neurondeploy/src" in line
    assert line.endswith(" ".join(f'"{requirement}"' for requirement in WRAPPER_REQUIREMENTS))


def test_what_ec2_cannot_serve_is_refused_in_one_line(tmp_path):
    spec = _spec(tmp_path, model={"s3_uri": "s3://bucket/llama/model.tar.gz", "architecture": ARCHITECTURE})
    result = run_cli("validate", str(spec))
    lines = result.stderr.strip().splitlines()
    assert result.returncode != 0 and len(lines) == 1 and "Traceback" not in result.stderr
    assert "on EC2, container vllm-neuron serves model.hf_model_id" in lines[0] and "platform sagemaker" in lines[0]


@pytest.mark.slow
def test_compile_remote_then_apply_on_ec2_boots_instances_that_serve_the_compiled_model(sagemaker_world, tmp_path):
    """Through the CLI against moto: apply refuses before compile --remote and creates nothing; compile --remote's
    job runs as SageMaker runs it; apply then creates the fleet; the launch template's UserData, run as cloud-init
    runs it on a stand-in of the vLLM DLAMI's venv (vLLM is the stand-in server: none installs here), fetches the
    compiled model to /opt/ml/model and its unit answers /ping and the OpenAI API from the loaded artifacts; a second
    apply sends no mutating call; destroy leaves nothing."""
    from integration.test_serving import free_port
    from neurondeploy.replay.ec2_boot import replay_boot

    aws = sagemaker_world
    image = aws.client("ec2").describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    arn = aws.client("secretsmanager").create_secret(Name="hf-token", SecretString="hf_" + "x" * 34)["ARN"]
    port, log = free_port(), tmp_path / "vllm.jsonl"  # the job's stand-in vLLM writes there too, first
    spec = _spec(tmp_path, port=port, env={"HF_TOKEN": {"secret": arn}, "FAKE_VLLM_LOG": str(log)})
    push_image(aws, WRAPPER.split("/", 1)[1].rsplit(":", 1)[0], WRAPPER.rsplit(":", 1)[1])
    state = str(tmp_path / "state.db")
    env = {**os.environ, "NEURONDEPLOY_CACHE_DIR": str(tmp_path / "laptop-cache")}
    apply = ("apply", str(spec), "--yes", "--no-smoke", "--ami-id", image, "--wait-delay-s", "1", "--state", state)

    refused = run_cli(*apply, env=env)
    lines = refused.stderr.strip().splitlines()
    assert refused.returncode != 0 and len(lines) == 1 and "no model built by compile --remote" in lines[0]
    assert find_leftovers(transport(), NAME) == []

    job = compile_remotely(aws, spec, tmp_path, env, image=WRAPPER, secret=arn)
    applied = run_cli(*apply, "--json", env=env)
    assert applied.returncode == 0, applied.stderr
    assert f"the model compile --remote built: s3://neurondeploy-123456789012-us-east-1/{job.prefix}" in " ".join(
        applied.stderr.split()
    )
    versions = aws.client("ec2").describe_launch_template_versions(LaunchTemplateName=f"{NAME}-lt")
    data = versions["LaunchTemplateVersions"][0]["LaunchTemplateData"]
    assert data["ImageId"] == image

    boot = replay_boot(
        data, tmp_path / "instance", venv=VLLM_DLAMI.venv, venv_ahead=FIXTURES / "fake_vllm", health_timeout_s=180
    )
    try:
        model_dir = tmp_path / "instance" / MODEL_DIR.lstrip("/")
        assert (model_dir / "neuron-compiled-artifacts" / "neuron_config.json").is_file()
        start = json.loads(log.read_text().splitlines()[-1])
        assert start["artifacts"] == "loaded"  # what the job compiled, not a compile at boot
        sandboxed = {name: value.replace("/opt/ml", str(model_dir.parent)) for name, value in job.served.items()}
        assert start["argv"] == vllm_arguments(sandboxed, str(port))
        environ = (Path("/proc") / str(boot.server.pid) / "environ").read_bytes().split(b"\0")
        assert not any(entry.startswith((b"HF_TOKEN=", b"NEURONDEPLOY_SECRET_ENV=")) for entry in environ)
        (served_model,) = [m["id"] for m in httpx.get(f"{boot.url}/v1/models", timeout=30).json()["data"]]
        assert served_model == sandboxed["SM_VLLM_MODEL"]  # vLLM names the model by its --model
        answer = httpx.post(
            f"{boot.url}/v1/completions", json={"model": served_model, "prompt": "Hello", "max_tokens": 4}, timeout=60
        )
        assert answer.status_code == 200 and answer.json()["choices"][0]["text"], answer.text
    finally:
        boot.stop()

    reapplied = run_cli(*apply, "--json", env=env)
    assert reapplied.returncode == 0 and json.loads(reapplied.stdout)["mutating_calls"] == 0, reapplied.stderr
    gone = run_cli("destroy", NAME, "--yes", "--state", state, env=env)
    assert gone.returncode == 0, gone.stderr
    assert find_leftovers(transport(), NAME) == []
