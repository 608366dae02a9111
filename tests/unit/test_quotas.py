"""The Service Quotas a plan needs (pure), and the refusal's one line: the quota, its value, the need, the fix."""

from __future__ import annotations

from pathlib import Path

from neurondeploy.aws.iam_policy import iam_action, scanned_calls
from neurondeploy.engine.quotas import QuotaTooLow
from neurondeploy.planner.checks import PlanRefused
from neurondeploy.planner.quotas import QuotaNeed, increase_command, increase_url, quota_needs
from neurondeploy.specs import load_spec, parse_spec

TEMPLATES = Path(__file__).parents[2] / "templates"


def template(name: str, **replacements: str):
    text = (TEMPLATES / name).read_text()
    for old, new in replacements.items():
        assert old in text, old
        text = text.replace(old, new)
    return parse_spec(text, file=name, path=TEMPLATES / name).spec


def test_ec2_needs_vcpus_for_the_auto_scaling_groups_maximum():
    (need,) = quota_needs(load_spec(TEMPLATES / "minilm-ec2-alb.yaml").spec)  # inf2.xlarge, min 2, max 6
    assert (need.service_code, need.quota_code, need.quota_name) == (
        "ec2",
        "L-1945791B",
        "Running On-Demand Inf instances",
    )
    assert (need.need, need.unit) == (6 * 4, "vCPUs")  # 4 vCPUs per inf2.xlarge
    assert "6 × inf2.xlarge" in need.counted and "maximum" in need.counted


NO_SCALING = "  autoscaling:\n    min_instances: 2\n    max_instances: 6\n    target_invocations_per_instance: 3000\n"


def test_ec2_without_autoscaling_needs_instance_count_and_trn_has_its_own_quota():
    inf = template(
        "minilm-ec2-alb.yaml", **{NO_SCALING: "", "instance_type: inf2.xlarge": "instance_type: inf2.8xlarge"}
    )
    (need,) = quota_needs(inf)
    assert (need.quota_code, need.need) == ("L-1945791B", 2 * 32)  # instance_count 2 × 32 vCPUs
    assert "instance_count" in need.counted
    trn = template("minilm-ec2-alb.yaml", **{NO_SCALING: "", "inf2.xlarge": "trn1.2xlarge", "count: 2": "count: 3"})
    (need,) = quota_needs(trn)
    assert (need.quota_code, need.quota_name, need.need) == ("L-2C3B7624", "Running On-Demand Trn instances", 3 * 8)


def test_sagemaker_endpoint_needs_its_autoscaling_maximum_of_the_ml_type():
    (need,) = quota_needs(load_spec(TEMPLATES / "minilm-sagemaker.yaml").spec)  # ml.inf2.xlarge, max 4
    assert (need.service_code, need.quota_code) == ("sagemaker", None)  # found by name
    assert (need.quota_name, need.need, need.unit) == ("ml.inf2.xlarge for endpoint usage", 4, "instances")
    fixed = template("minilm-sagemaker.yaml", **{"max_instances: 4": "max_instances: 1"})
    assert quota_needs(fixed)[0].need == 1


def test_training_needs_instance_count_of_the_spot_or_on_demand_training_quota():
    (spot,) = quota_needs(load_spec(TEMPLATES / "llama-pretrain-trn1-multinode.yaml").spec)
    assert (spot.quota_name, spot.need) == ("ml.trn1.32xlarge for spot training job usage", 2)
    on_demand = template("llama-pretrain-trn1-multinode.yaml", **{"spot:\n  enabled: true\n  max_wait_s: 172800\n": ""})
    (need,) = quota_needs(on_demand)
    assert (need.service_code, need.quota_name, need.need) == (
        "sagemaker",
        "ml.trn1.32xlarge for training job usage",
        2,
    )


def test_the_refusal_is_one_line_with_quota_value_need_console_and_cli():
    need = QuotaNeed("ec2", "Running On-Demand Inf instances", "L-1945791B", 24, "vCPUs", "6 × inf2.xlarge")
    error = QuotaTooLow(need, 0.0, "L-1945791B", "eu-west-1")
    line = error.one_line()
    assert "\n" not in line
    assert '"Running On-Demand Inf instances" (ec2 L-1945791B) in eu-west-1 is 0 vCPUs' in line
    assert "needs 24 (6 × inf2.xlarge)" in line
    assert increase_url("ec2", "L-1945791B", "eu-west-1") in line
    command = increase_command("ec2", "L-1945791B", 24, "eu-west-1")
    assert command == (
        "aws service-quotas request-service-quota-increase --service-code ec2 --quota-code L-1945791B "
        "--desired-value 24 --region eu-west-1"
    )
    assert command in line
    assert error.exit_code == PlanRefused.exit_code  # a plan the account cannot run, like a refused plan


def test_the_iam_policy_allows_the_quota_reads():
    calls = scanned_calls()
    for operation in (
        "GetServiceQuota",
        "GetAWSDefaultServiceQuota",
        "ListServiceQuotas",
        "ListAWSDefaultServiceQuotas",
    ):
        assert ("service-quotas", operation) in calls
        assert iam_action("service-quotas", operation) == f"servicequotas:{operation}"
