"""Plans of every template: offline, every request checked, fast, and stale plans refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.cli import run_cli

from neurondeploy.engine.saved_plans import load_saved_plan, save_plan
from neurondeploy.errors import PlanError
from neurondeploy.planner.checks import PlanRefused
from neurondeploy.planner.cost import plan_cost
from neurondeploy.planner.plan import build_plan
from neurondeploy.resources.refs import find_refs
from neurondeploy.resources.tags import EXECUTOR_REFS
from neurondeploy.specs import load_spec, parse_spec

TEMPLATES = sorted((Path(__file__).parents[2] / "templates").glob("*.yaml"))
NO_CREDENTIALS = {key: value for key, value in os.environ.items() if not key.startswith("AWS_")} | {
    "AWS_CONFIG_FILE": "/nonexistent",
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
}


def test_there_are_templates_of_every_required_shape():
    specs = [load_spec(path).spec for path in TEMPLATES]
    kinds = {(spec.kind, getattr(getattr(spec, "deployment", None), "platform", None)) for spec in specs}
    assert {("inference", "sagemaker"), ("inference", "ec2"), ("training", None)} <= kinds
    assert any(
        spec.kind == "training" and spec.instance_type == "trn1.32xlarge" and spec.instance_count > 1 for spec in specs
    )
    assert any(spec.kind == "inference" and spec.task == "text-generation" for spec in specs)


@pytest.mark.parametrize("template", TEMPLATES, ids=[path.name for path in TEMPLATES])
def test_template_plans_offline_with_every_request_validated(template):
    result = subprocess.run(
        [sys.executable, "-m", "neurondeploy.cli", "plan", str(template), "--json"],
        capture_output=True,
        text=True,
        env=NO_CREDENTIALS,
    )
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["resources"]
    names = {resource["name"] for resource in plan["resources"]}
    for resource in plan["resources"]:
        assert len(resource["requests"]) >= 1, resource["name"]
        for request in resource["requests"] + resource["delete_requests"]:
            assert request["validated"], (resource["name"], request["operation"], request["problems"])
        for name, _ in find_refs([r["params"] for r in resource["requests"]]) - EXECUTOR_REFS:
            assert name in names, f"{resource['name']} refers to unknown resource {name}"
    assert plan["request_count"] == plan["validated_count"] > 0
    assert plan["cost"]["hourly_usd"] > 0


def test_ec2_plan_tags_every_taggable_resource_at_creation():
    plan = build_plan(load_spec(next(path for path in TEMPLATES if path.name == "minilm-ec2-alb.yaml")))
    text_of = json.dumps
    for resource in plan.resources:
        if resource.taggable:
            first = text_of(resource.requests[0].params)
            assert "neurondeploy:deployment" in first and "neurondeploy:managed-by" in first, resource.name


def test_plan_refuses_a_spec_with_errors():
    loaded = parse_spec(
        "kind: inference\nname: x\ntask: feature-extraction\nmodel: {factory: 'm:f'}\n"
        "deployment: {instance_type: inf2.xlarge, tensor_parallel: 4}\n",
        file="x.yaml",
    )
    with pytest.raises(PlanRefused) as refused:
        build_plan(loaded)
    assert (
        "x.yaml:5: deployment.tensor_parallel: TP=4 is more than the 2 NeuronCores"
        in refused.value.problems[0].one_line()
    )


def test_saved_plan_is_refused_once_the_spec_changes(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text((TEMPLATES[0]).read_text())
    saved = tmp_path / "plan.json"
    save_plan(build_plan(load_spec(spec)), saved)
    assert load_saved_plan(saved, load_spec(spec)).spec_sha256 == load_spec(spec).digest
    spec.write_text(spec.read_text() + "\n# edited\n")
    with pytest.raises(PlanError, match="stale"):
        load_saved_plan(saved, load_spec(spec))
    saved.write_text("{not json")
    with pytest.raises(PlanError, match="not a neurondeploy plan"):
        load_saved_plan(saved, load_spec(spec))


def test_a_training_plan_prices_a_whole_run_up_to_max_runtime():
    plan = build_plan(load_spec(TEMPLATES[0].parent / "llama-pretrain-trn1-multinode.yaml"))
    assert plan.cost.hourly_usd == pytest.approx(2 * 28.497)  # 2 × ml.trn1.32xlarge, the SageMaker price
    assert plan.cost.run_ceiling_usd == pytest.approx(plan.cost.hourly_usd * 86400 / 3600, abs=0.01)
    endpoint = build_plan(load_spec(TEMPLATES[0].parent / "minilm-sagemaker.yaml"))
    assert endpoint.cost.run_ceiling_usd is None  # an endpoint has no end


def test_apply_with_a_saved_plan_refuses_a_stale_or_foreign_one_before_any_aws_call(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text((TEMPLATES[0].parent / "minilm-sagemaker.yaml").read_text())
    saved = tmp_path / "plan.json"

    def cli(*args: str) -> subprocess.CompletedProcess:  # no credentials: reaching AWS would fail differently
        return run_cli(*args, env=NO_CREDENTIALS, timeout=60)

    assert cli("plan", str(spec), "--out", str(saved)).returncode == 0
    reviewed = json.loads(saved.read_text())
    reviewed["resources"][-1]["requests"][0]["params"]["EndpointName"] = "someone-elses"
    tampered = tmp_path / "tampered.json"
    tampered.write_text(json.dumps(reviewed))
    result = cli("apply", str(spec), "--plan", str(tampered))
    assert result.returncode == 3 and "no longer matches what apply would send" in result.stderr
    spec.write_text(spec.read_text() + "\n# edited after review\n")
    result = cli("apply", str(spec), "--plan", str(saved))
    assert result.returncode == 3 and "is stale" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    result = cli("apply", str(spec), "--plan", str(tmp_path / "missing.json"))
    assert result.returncode == 3 and "no such plan" in result.stderr


def test_a_sagemaker_plan_costs_the_ml_price_and_an_ec2_plan_the_ec2_price():
    by_name = {path.name: build_plan(load_spec(path)).cost for path in TEMPLATES}
    endpoint = by_name["minilm-sagemaker.yaml"]
    assert endpoint.items[0].what.startswith("1 × ml.inf2.xlarge") and endpoint.items[0].hourly_usd == 0.99
    assert not any("lower bound" in note for note in endpoint.notes)
    job = by_name["llama-pretrain-trn1-multinode.yaml"]
    assert job.items[0].hourly_usd == pytest.approx(2 * 28.497)
    assert job.run_ceiling_usd == pytest.approx(2 * 28.497 * 24, abs=0.01)  # max_runtime_s 86400
    ec2 = by_name["minilm-ec2-alb.yaml"]
    assert ec2.items[0].what.startswith("2 × inf2.xlarge on-demand (EC2") and ec2.items[0].hourly_usd == 2 * 0.7582


def test_a_sagemaker_type_without_an_ml_price_falls_back_to_ec2_and_says_it_is_a_lower_bound():
    text = (TEMPLATES[0].parent / "tiny-lm-train-local.yaml").read_text().replace("ml.trn1.2xlarge", "ml.trn2.48xlarge")
    cost = plan_cost(parse_spec(text), [])  # the cost alone: the checks refuse training on trn2
    assert cost.items[0].hourly_usd == 35.76 and "EC2" in cost.items[0].what
    assert any("lower bound" in note for note in cost.notes)


@pytest.mark.parametrize("template", ["minilm-ec2-alb.yaml", "minilm-sagemaker.yaml", "tiny-lm-train-local.yaml"])
def test_plan_shows_the_shared_bucket_with_its_policy_and_versioning(template):
    plan = build_plan(load_spec(TEMPLATES[0].parent / template))
    bucket = plan.shared[0]
    operations = [request.operation for request in bucket.requests]
    assert {"CreateBucket", "PutPublicAccessBlock", "PutBucketPolicy", "PutBucketVersioning"} <= set(operations)
    assert all(request.validated for request in bucket.requests) and bucket.delete_requests == []
    assert "TLS only" in bucket.description and "never destroyed" in bucket.description
    claims = [resource for resource in plan.shared if resource.name == "deployment-claim"]
    if plan.kind == "inference":  # apply claims the name before its first create (engine.claims)
        (claim,) = claims
        (put,) = claim.requests
        assert put.validated and put.params["IfNoneMatch"] == "*" and put.params["Key"] == f"claims/{plan.name}.json"
        assert put.params["Bucket"] == bucket.requests[0].params["Bucket"]
    else:
        assert claims == []


def test_plan_of_the_ec2_template_shows_its_secure_network_and_bucket():
    """Through the CLI, as the README shows it: private subnets, the NAT gateway (priced), the emptied default
    security group and the shared bucket's policy."""
    result = subprocess.run(
        [sys.executable, "-m", "neurondeploy.cli", "plan", str(TEMPLATES[0].parent / "minilm-ec2-alb.yaml")],
        capture_output=True,
        text=True,
        env={**NO_CREDENTIALS, "COLUMNS": "200"},
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.count("Private subnet") == 2 and "instances, no public IP, egress through the NAT gateway" in out
    assert "+ nat (ec2:nat-gateway)" in out and "ec2:nat-gateway nat: $0.0450/h" in out
    assert "+ vpc-default-sg (ec2:default-security-group)" in out and "ec2:RevokeSecurityGroupIngress" in out
    assert "+ artifact-bucket (s3:bucket)  shared, if missing" in out and "s3:PutBucketPolicy  checked" in out
    assert "warning" not in out  # no opt-out taken, nothing to warn about


def test_compile_remote_refuses_a_spec_it_cannot_take_before_asking_aws_anything():
    """Without credentials, a training spec still gets compile --remote's own refusal, not an STS error."""
    result = run_cli("compile", str(TEMPLATES[0].parent / "tiny-lm-train-local.yaml"), "--remote", env=NO_CREDENTIALS)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 3 and len(lines) == 1, result.stderr
    assert "compile --remote takes an inference spec" in lines[0] and "GetCallerIdentity" not in result.stderr


@pytest.mark.parametrize(
    ("template", "said"),
    [
        ("minilm-sagemaker.yaml", "smoke test: one request to sagemaker:minilm-embed (InvokeEndpoint)"),
        ("llama3-8b-vllm-sagemaker.yaml", "smoke test: a short chat to sagemaker:"),
        ("minilm-ec2-alb.yaml", "smoke test: apply waits up to 1500 s (the instances' startup grace) for a healthy"),
        ("llama-pretrain-trn1-multinode.yaml", None),
    ],
)
def test_the_plan_says_what_apply_checks_once_the_deployment_is_up(template, said):
    path = TEMPLATES[0].parent / template
    after = build_plan(load_spec(path)).after_apply
    if said is None:
        assert after is None
        return
    assert after.startswith(said)
    shown = run_cli("plan", str(path))
    assert f"after apply: {said}" in " ".join(shown.stdout.split()), shown.stdout
