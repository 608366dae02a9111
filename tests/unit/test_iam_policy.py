"""infra/iam-policy.json is exactly what the code can call; a new AWS call without a policy update fails here."""

from __future__ import annotations

import json
from pathlib import Path

from neurondeploy.aws.iam_policy import iam_action, render, scanned_calls
from neurondeploy.planner.plan import build_plan_for_file

REPO = Path(__file__).parents[2]


def test_committed_policy_matches_the_calls_in_the_code():
    committed = (REPO / "infra" / "iam-policy.json").read_text()
    assert committed == render(), "regenerate: python -m neurondeploy.aws.iam_policy > infra/iam-policy.json"


def test_every_request_of_every_template_plan_is_allowed():
    allowed = {action for statement in json.loads(render())["Statement"] for action in statement["Action"]}
    for template in sorted((REPO / "templates").glob("*.yaml")):
        plan = build_plan_for_file(template)
        for resource in plan.resources:
            for request in resource.requests + resource.delete_requests:
                assert iam_action(request.service, request.operation) in allowed, (template.name, request.operation)


def test_waiters_are_resolved_to_the_operations_they_poll():
    calls = scanned_calls()
    assert ("acm", "DescribeCertificate") in calls  # CertificateValidated
    assert ("ec2", "DescribeVpcs") in calls  # VpcAvailable
    assert iam_action("elbv2", "CreateLoadBalancer") == "elasticloadbalancing:CreateLoadBalancer"
    assert iam_action("s3", "HeadObject") == "s3:GetObject"
