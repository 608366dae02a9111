"""Gated models and secrets: ``{secret: ARN}`` / ``{ssm: ARN}`` container env values travel as references only and
are read where the workload runs, through its role. Against a moto server over HTTP: a secret in Secrets Manager
and a SecureString in SSM, the EC2 template planned, applied (CLI) and shown by status; their values appear in no
file or output that plan, apply or status wrote, the roles may read exactly those ARNs, and the resolver the
server and the Hugging Face wrapper run reads them back."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys

import pytest
import yaml
from support.cli import run_cli
from support.ec2_deployment import AMI_PARAMETER

from neurondeploy.aws.secrets import SecretEnvError, resolve_secret_env
from neurondeploy.specs.inference import SECRET_ENV

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("cpu_standin")]  # CPU artifact on purpose
TOKEN = "hf_SuperSecretValue_7f3a9c"
PASSWORD = "db-Pa55word-91c2e"


@pytest.fixture
def secrets(aws):
    arn = aws.client("secretsmanager").create_secret(Name="hf-token", SecretString=TOKEN)["ARN"]
    aws.client("ssm").put_parameter(Name="/serving/db-password", Value=PASSWORD, Type="SecureString")
    parameter = "arn:aws:ssm:us-east-1:123456789012:parameter/serving/db-password"
    return {"HF_TOKEN": {"secret": arn}, "DB_PASSWORD": {"ssm": parameter}}


def test_no_secret_value_in_what_plan_apply_and_status_write(aws, world, secrets, artifact, tmp_path):  # noqa: F811
    loaded, _zone = world
    data = yaml.safe_load(open(loaded.source.file))
    data["deployment"]["container"] = {"env": {**secrets, "LOG_FORMAT": "json"}}
    spec = tmp_path / "with-secrets.yaml"
    spec.write_text(yaml.safe_dump(data))
    state = tmp_path / "state.db"
    image = ["--ami-ssm-parameter", AMI_PARAMETER]

    planned = run_cli("plan", str(spec), "--json", "--out", str(tmp_path / "plan.json"), *image)
    assert planned.returncode == 0, planned.stderr
    applied = run_cli(  # --no-smoke: moto runs no load balancer to send it through (test_smoke.py covers it)
        "apply", str(spec), "--artifact", str(artifact), "--yes", "--no-smoke", "--state", str(state), *image
    )
    assert applied.returncode == 0, applied.stderr
    status = run_cli("status", "minilm-web", "--json", "--state", str(state))
    assert status.returncode == 0, status.stderr

    ec2 = aws.client("ec2")
    template = ec2.describe_launch_templates()["LaunchTemplates"][0]["LaunchTemplateId"]
    version = ec2.describe_launch_template_versions(LaunchTemplateId=template)["LaunchTemplateVersions"][0]
    script = base64.b64decode(version["LaunchTemplateData"]["UserData"]).decode()
    # the unit's environment travels as a base64 EnvironmentFile payload: read both, as an instance has them
    (payload,) = re.findall(r"printf %s '([A-Za-z0-9+/=]+)' \| base64 --decode", script)
    user_data = script + base64.b64decode(payload).decode()
    written = {
        "plan file": (tmp_path / "plan.json").read_text(),
        "plan output": planned.stdout + planned.stderr,
        "state": state.read_bytes().decode("latin-1"),
        "apply output": applied.stdout + applied.stderr,
        "status output": status.stdout + status.stderr,
        "user data": user_data,
    }
    for what, text in written.items():
        assert TOKEN not in text and PASSWORD not in text, f"a secret value is in the {what}"
    # the references travel instead, and the unit hands them to `neurondeploy serve`
    assert secrets["HF_TOKEN"]["secret"] in user_data and SECRET_ENV in user_data
    assert 'LOG_FORMAT="json"' in user_data

    iam = aws.client("iam")
    role = next(r["RoleName"] for r in iam.list_roles()["Roles"] if r["RoleName"].endswith("ec2-role"))
    policy = iam.get_role_policy(RoleName=role, PolicyName=iam.list_role_policies(RoleName=role)["PolicyNames"][0])
    statements = {s.get("Sid"): s for s in policy["PolicyDocument"]["Statement"]}
    assert statements["ReadSecrets"]["Resource"] == [secrets["HF_TOKEN"]["secret"]]
    assert statements["ReadSecrets"]["Action"] == "secretsmanager:GetSecretValue"
    assert statements["ReadParameters"]["Resource"] == [secrets["DB_PASSWORD"]["ssm"]]
    assert statements["DecryptForThem"]["Condition"]["StringEquals"]["kms:ViaService"] == [
        "secretsmanager.us-east-1.amazonaws.com",
        "ssm.us-east-1.amazonaws.com",
    ]


def test_the_resolver_reads_the_values_where_the_workload_runs(aws, secrets):
    environ = {SECRET_ENV: json.dumps(secrets), "KEEP": "1"}
    assert resolve_secret_env(environ) == ["DB_PASSWORD", "HF_TOKEN"]
    assert environ == {"HF_TOKEN": TOKEN, "DB_PASSWORD": PASSWORD, "KEEP": "1"}

    # the Hugging Face wrapper's entrypoint: resolve, then exec the image's own entrypoint with them set
    check = f'test "$HF_TOKEN" = {TOKEN} && test "$DB_PASSWORD" = {PASSWORD} && test -z "${SECRET_ENV}"'
    env = {**os.environ, SECRET_ENV: json.dumps(secrets)}
    wrapped = subprocess.run(
        [sys.executable, "-m", "neurondeploy.aws.secrets", "--", "sh", "-c", check], env=env, capture_output=True
    )
    assert wrapped.returncode == 0, wrapped.stderr

    missing = {"HF_TOKEN": {"secret": secrets["HF_TOKEN"]["secret"].replace("hf-token", "nope")}}
    with pytest.raises(SecretEnvError, match="HF_TOKEN: cannot read") as refused:
        resolve_secret_env({SECRET_ENV: json.dumps(missing)})
    assert TOKEN not in refused.value.one_line()


def test_serve_reads_the_references_before_loading_and_stops_in_one_line_when_it_cannot(aws, secrets, artifact):
    missing = {"HF_TOKEN": {"secret": secrets["HF_TOKEN"]["secret"].replace("hf-token", "gone")}}
    env = {**os.environ, SECRET_ENV: json.dumps(missing)}
    served = subprocess.run(
        [sys.executable, "-m", "neurondeploy.cli", "serve", str(artifact), "--port", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert served.returncode == 1
    lines = [line for line in served.stderr.splitlines() if line.strip()]
    assert (
        lines[-1].startswith("error: HF_TOKEN: cannot read arn:aws:secretsmanager:")
        and "Traceback" not in served.stderr
    )
