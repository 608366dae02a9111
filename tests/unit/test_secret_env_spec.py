"""Container env secrets as data: token-like literals refused at validate (one line with the fix), references
carried as $NEURONDEPLOY_SECRET_ENV in the plan's requests, and the execution role reading exactly those ARNs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from neurondeploy.errors import SpecError
from neurondeploy.planner.plan import build_plan
from neurondeploy.specs import load_spec, parse_spec
from neurondeploy.specs.inference import SECRET_ENV

REPO = Path(__file__).parents[2]
VLLM = REPO / "templates" / "llama3-8b-vllm-sagemaker.yaml"
ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:hf-token"
BASE = (REPO / "templates" / "minilm-sagemaker.yaml").read_text()


def with_env(env: str) -> str:
    return BASE.replace(
        "  model_download_timeout_s: 600\n", f"  model_download_timeout_s: 600\n  container:\n    env: {env}\n"
    )


@pytest.mark.parametrize("name", ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "OPENAI_API_KEY", "DB_PASSWORD", "APP_SECRET"])
def test_a_literal_token_is_refused_naming_the_fix(name):
    with pytest.raises(SpecError, match=f"{name} looks like a credential") as refused:
        parse_spec(with_env(f"{{{name}: abc123}}"), file="s.yaml")
    assert "{secret: arn:aws:secretsmanager:" in refused.value.one_line()


def test_validate_prints_one_line_and_exits_2(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text(with_env("{HF_TOKEN: hf_abc}"))
    done = subprocess.run(
        [sys.executable, "-m", "neurondeploy.cli", "validate", str(spec)], capture_output=True, text=True
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert (
        len(lines) == 1
        and "HF_TOKEN looks like a credential" in lines[0]
        and "fix: store it in Secrets Manager" in lines[0]
    )


def test_ordinary_names_and_references_pass():
    loaded = parse_spec(with_env(f'{{LOG_LEVEL: info, KEYBOARD: us, HF_TOKEN: {{secret: "{ARN}"}}}}'), file="s.yaml")
    container = loaded.spec.deployment.container
    assert container.runtime_env() == {
        "LOG_LEVEL": "info",
        "KEYBOARD": "us",
        SECRET_ENV: json.dumps({"HF_TOKEN": {"secret": ARN}}, separators=(",", ":")),
    }


def test_the_vllm_template_sends_the_reference_and_its_role_reads_exactly_that_arn():
    plan = build_plan(load_spec(VLLM))
    requests = {(r.service, r.operation): r.params for resource in plan.resources for r in resource.requests}
    env = requests[("sagemaker", "CreateModel")]["PrimaryContainer"]["Environment"]
    assert "HF_TOKEN" not in env and json.loads(env[SECRET_ENV]) == {"HF_TOKEN": {"secret": ARN}}
    policy = json.loads(requests[("iam", "PutRolePolicy")]["PolicyDocument"])
    read = [s for s in policy["Statement"] if s.get("Sid") == "ReadSecrets"]
    assert read == [
        {"Sid": "ReadSecrets", "Effect": "Allow", "Action": "secretsmanager:GetSecretValue", "Resource": [ARN]}
    ]


def test_an_hf_container_with_secrets_needs_the_wrapper_image():
    text = VLLM.read_text()
    without = "\n".join(line for line in text.splitlines() if "image_uri:" not in line) + "\n"
    with pytest.raises(SpecError, match="infra/hf-secrets"):
        parse_spec(without, file="v.yaml")
