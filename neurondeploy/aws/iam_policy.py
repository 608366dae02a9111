"""The operator policy: the IAM policy whoever runs neurondeploy needs, derived from the AWS calls its code can make.

Every call site names its service and operation literally — ``Request("ec2", "CreateVpc", ...)`` in the
builders, ``transport.call("s3", "PutObject", ...)`` in apply, destroy, sweep and drift, ``Wait("...")`` for
botocore waiters — so the source is scanned for them (no AWS, no spec needed). What each action allows to be
conditioned comes from the AWS Service Authorization Reference (``catalog/data/iam_authorization.yaml``), so
the policy grants no more than the calls need:

- IAM only on roles and instance profiles under ``/neurondeploy/``, and roles passed only to EC2 and SageMaker
  (``iam:PassedToService``): no role made or changed by it can be another principal's, and none can be handed
  to a service that would run someone else's code with it.
- Roles made and given policies only with the permissions boundary (:func:`boundary`, ``infra/iam-boundary.json``)
  in place, and the boundary never removed or rewritten: whatever inline policy a role is given, it can do no more
  than the roles neurondeploy makes need, and nothing of IAM, so the policy cannot make its holder (or anyone a
  role it makes trusts) administrator. This is the IAM User Guide's delegation pattern
  (https://docs.aws.amazon.com/IAM/latest/UserGuide/access_policies_boundaries.html#access_policies_boundaries-delegate).
- Creates only with the ownership tag (``aws:RequestTag``); changes and deletes only on objects that carry it
  (``aws:ResourceTag``), where the service supports the condition; tagging only inside a create of ours
  (``ec2:CreateAction`` and its kin) or on objects already ours, so a foreign object cannot be tagged into
  ownership and then deleted.
- S3 only on ``neurondeploy-*`` buckets; the shared bucket's policy, public-access block and other settings only in
  the ``SharedBucketSetup`` statement, which ``--bucket-ready`` leaves out once the bucket exists. SSM reads only
  of AWS's public parameters.
- Route 53 changes only in the hosted zones named to the generator (``--zone ZONE=RECORD``, as ``iam.role_arn``
  roles are named), and there only for the record, its ACM validation and ownership names, and the A, CNAME and
  TXT types (https://docs.aws.amazon.com/Route53/latest/DeveloperGuide/specifying-rrset-conditions.html).
- What the reference offers no condition for (log delivery, reads) is granted on ``*`` and listed by
  :func:`unconditioned_actions` (the README says so).

``infra/iam-policy.json`` and ``infra/iam-boundary.json`` are this module's output, and a test fails when code gains
a call the committed policy does not allow, or a role statement its boundary does not:

    python -m neurondeploy.aws.iam_policy > infra/iam-policy.json
    python -m neurondeploy.aws.iam_policy --boundary > infra/iam-boundary.json
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from pathlib import Path

from neurondeploy.catalog._data import load
from neurondeploy.errors import SpecError
from neurondeploy.resources.iam import BOUNDARY_POLICY_NAME, ROLE_PATH
from neurondeploy.resources.naming import BUCKET_PREFIX
from neurondeploy.resources.tags import MANAGED_BY, MANAGED_BY_TAG
from neurondeploy.specs.common import ROLE_ARN_PATTERN, DnsSpec

PACKAGE = Path(__file__).resolve().parents[1]
SCANNED = ("resources", "aws", "engine", "compiler", "serving", "training", "ops")
# IAM's service prefixes where they differ from the boto3 client name.
IAM_PREFIX = {
    "elbv2": "elasticloadbalancing",
    "resourcegroupstaggingapi": "tag",
    "sagemaker-runtime": "sagemaker",
    "service-quotas": "servicequotas",
}
# S3 operations whose IAM action has another name (S3 authorizes by action, not by API name).
S3_ACTIONS = {
    "HeadBucket": "ListBucket",
    "HeadObject": "GetObject",
    "ListObjectsV2": "ListBucket",
    "PutPublicAccessBlock": "PutBucketPublicAccessBlock",
    "PutBucketLifecycleConfiguration": "PutLifecycleConfiguration",
    "DeleteObjects": "DeleteObject",
    "ListObjectVersions": "ListBucketVersions",
}
# Calls made where the workload runs, with its own role (which the plan grants exactly these), never by whoever
# runs neurondeploy: reading {secret: ARN} container env values at container start.
WORKLOAD_MODULES = ("aws/secrets.py",)
# Actions AWS authorizes beside a call of ours that the reference does not list as its dependents: an Auto Scaling
# group launched from a launch template needs ec2:RunInstances, and iam:PassRole for the template's instance
# profile, from whoever creates, updates or refreshes it
# (https://docs.aws.amazon.com/autoscaling/ec2/userguide/ec2-auto-scaling-launch-template-permissions.html).
LAUNCHES_INSTANCES = ("ec2:RunInstances", "iam:PassRole")
# Flow logs delivered to S3 need the log-delivery permissions, and the bucket policy read and written so that AWS
# can add its delivery statement (https://docs.aws.amazon.com/vpc/latest/userguide/flow-logs-s3-permissions.html).
IMPLIED = {
    "autoscaling:CreateAutoScalingGroup": LAUNCHES_INSTANCES,
    "autoscaling:UpdateAutoScalingGroup": LAUNCHES_INSTANCES,
    "autoscaling:StartInstanceRefresh": LAUNCHES_INSTANCES,
    "ec2:CreateFlowLogs": ("logs:CreateLogDelivery", "s3:GetBucketPolicy", "s3:PutBucketPolicy"),
    "ec2:DeleteFlowLogs": ("logs:DeleteLogDelivery",),
    # a delete naming a VersionId (destroy removes every version in the versioned shared bucket) is authorized as
    # s3:DeleteObjectVersion (https://docs.aws.amazon.com/AmazonS3/latest/API/API_DeleteObject.html, Permissions)
    "s3:DeleteObject": ("s3:DeleteObjectVersion",),
}
OWNERSHIP_CONDITION = {MANAGED_BY_TAG: MANAGED_BY}
# The services neurondeploy hands its roles to: EC2 (the instance profile) and SageMaker (execution roles).
PASSED_TO = ("ec2.amazonaws.com", "sagemaker.amazonaws.com")
# The service-linked roles a first use of a service in an account creates (iam:AWSServiceName values).
SERVICE_LINKED = ("autoscaling.amazonaws.com", "elasticloadbalancing.amazonaws.com")
ROLE_RESOURCES = (f"arn:aws:iam::*:role{ROLE_PATH}*", f"arn:aws:iam::*:instance-profile{ROLE_PATH}*")
BUCKET_RESOURCES = (f"arn:aws:s3:::{BUCKET_PREFIX}*", f"arn:aws:s3:::{BUCKET_PREFIX}*/*")
# The DLAMI's AMI id is read from AWS's public parameters; no other parameter (a SecureString of the account's
# own) is readable.
PUBLIC_PARAMETERS = ("arn:aws:ssm:*::parameter/aws/service/*",)
# The boundary every role of ours carries, in the account of whoever holds the policy (a policy variable: one
# policy serves every account, as the role ARNs' `*` does).
BOUNDARY_ARN = f"arn:aws:iam::${{aws:PrincipalAccount}}:policy{ROLE_PATH}{BOUNDARY_POLICY_NAME}"
# The IAM actions that give a role permissions: allowed only on a role carrying the boundary (iam:PermissionsBoundary
# is the boundary a role has, or is given by CreateRole / PutRolePermissionsBoundary).
BOUNDED_ROLE_ACTIONS = ("iam:AttachRolePolicy", "iam:CreateRole", "iam:PutRolePermissionsBoundary", "iam:PutRolePolicy")
# Denied whatever else the holder has: removing a boundary, or rewriting the boundary policy itself.
BOUNDARY_REMOVAL = ("iam:DeleteRolePermissionsBoundary", "iam:DeleteUserPermissionsBoundary")
BOUNDARY_REWRITE = (
    "iam:CreatePolicyVersion",
    "iam:DeletePolicy",
    "iam:DeletePolicyVersion",
    "iam:SetDefaultPolicyVersion",
)
# Settings only the shared bucket's first setup makes (engine.uploads.ensure_bucket sends them only when the bucket is
# missing); flow logs to S3 need the policy read and written too: AWS adds its delivery statement.
BUCKET_SETUP = (
    "s3:CreateBucket",
    "s3:GetBucketPolicy",
    "s3:PutBucketPolicy",
    "s3:PutBucketPublicAccessBlock",
    "s3:PutBucketTagging",
    "s3:PutBucketVersioning",
    "s3:PutLifecycleConfiguration",
)
# The record types the deployments write: the alias (A), ACM's validation (CNAME), the ownership record (TXT).
RECORD_TYPES = ("A", "CNAME", "TXT")
# Modules whose dict literals with "Effect" and "Action" (and no "Principal": not a trust or bucket policy) are the
# statements of the roles neurondeploy makes.
ROLE_STATEMENT_MODULES = ("resources",)
# Verbs of actions that make a new object: their tags are the request's, so aws:RequestTag conditions them.
CREATE_VERBS = ("Create", "Request", "Allocate", "Register", "Run")
READ_LEVELS = ("Read", "List")


def _literal_calls(tree: ast.AST) -> set[tuple[str, str, str]]:
    """(kind, service, operation-or-waiter) for each Request(...)/.call(...)/Wait(...) with literal strings."""
    found = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
        strings = [arg.value for arg in node.args if isinstance(arg, ast.Constant) and isinstance(arg.value, str)]
        if name in ("Request", "call") and len(strings) >= 2 and strings[0].islower():
            found.add(("operation", strings[0], strings[1]))
        elif name == "Wait" and strings:
            service = next(
                (kw.value.value for kw in node.keywords if kw.arg == "service" and isinstance(kw.value, ast.Constant)),
                None,
            )
            found.add(("waiter", service or "", strings[0]))
    return found


def _waiter_operations(service: str, waiter: str) -> set[str]:
    from botocore.session import get_session

    client_model = get_session().get_waiter_model(service)
    return {client_model.get_waiter(waiter).operation}


def scanned_calls() -> set[tuple[str, str]]:
    """(service, operation) of every AWS call the code can make, waiters resolved to the operation they poll."""
    calls: set[tuple[str, str]] = set()
    waiters: set[tuple[str, str]] = set()
    for directory in SCANNED:
        for path in sorted((PACKAGE / directory).rglob("*.py")):
            if path.relative_to(PACKAGE).as_posix() in WORKLOAD_MODULES:
                continue
            for kind, service, name in _literal_calls(ast.parse(path.read_text())):
                (calls if kind == "operation" else waiters).add((service, name))
    for service, waiter in waiters:
        # A waiter without an explicit service polls the service of the request it follows; try the ones we use.
        services = [service] if service else sorted({s for s, _ in calls})
        for candidate in services:
            try:
                calls |= {(candidate, operation) for operation in _waiter_operations(candidate, waiter)}
                break
            except Exception:  # not a waiter of that service
                continue
    return calls


def iam_action(service: str, operation: str) -> str:
    if service == "s3":
        return f"s3:{S3_ACTIONS.get(operation, operation)}"
    if service == "sagemaker-runtime":
        return "sagemaker:InvokeEndpoint"
    return f"{IAM_PREFIX.get(service, service)}:{operation}"


def needed_actions() -> set[str]:
    """Every IAM action the code's calls need, with the ones AWS authorizes beside them (:data:`IMPLIED`)."""
    actions = {iam_action(service, operation) for service, operation in scanned_calls()}
    return actions | {extra for action in actions for extra in IMPLIED.get(action, ())}


def authorization_table() -> dict[str, dict]:
    """The reference's facts per action (``catalog/data/iam_authorization.yaml``)."""
    return load("iam_authorization")["actions"]


def _creates(action: str, facts: dict) -> bool:
    return facts["request_tag"] and facts["access"] == "Write" and action.split(":")[1].startswith(CREATE_VERBS)


def _statement(sid: str, actions: list[str], resources: tuple[str, ...] | str = "*", condition=None) -> dict:
    statement = {"Sid": sid, "Effect": "Allow", "Action": sorted(actions), "Resource": resources}
    if isinstance(resources, tuple):
        statement["Resource"] = list(resources)
    if condition:
        statement["Condition"] = condition
    return statement


def statements_by_purpose() -> dict[str, list[str]]:
    """Each action of the table under the one statement that grants it (see the module docstring)."""
    table = authorization_table()
    groups: dict[str, list[str]] = {}
    creates = {action for action, facts in table.items() if _creates(action, facts)}
    tagged_on_create = {dependent for action in creates for dependent in table[action]["dependent"]}
    for action, facts in sorted(table.items()):
        prefix, name = action.split(":")
        if action == "iam:PassRole":
            group = "PassRole"
        elif action == "iam:CreateServiceLinkedRole":
            group = "ServiceLinkedRoles"
        elif prefix == "s3":
            group = "Buckets"
        elif prefix == "ssm":
            group = "PublicParameters"
        elif facts["access"] in READ_LEVELS:
            group = "Read"
        elif prefix == "iam":
            group = "Roles"
        elif action in creates or facts["resource_tag"]:
            # A create that can also act on an object that exists (RegisterScalableTarget registers or updates)
            # is granted both ways: IAM evaluates each object a call touches, and a new one has no tags yet.
            group = "CreateOwned" if action in creates else "ChangeOwned"
            if action in creates and facts["resource_tag"]:
                groups.setdefault("ChangeOwned", []).append(action)
        else:
            group = "Unconditioned"
        groups.setdefault(group, []).append(action)
        if facts["access"] == "Tagging" and action in tagged_on_create and _create_action_key(prefix):
            groups.setdefault(f"TagOnCreate:{prefix}", []).append(action)
    return groups


def _create_action_key(prefix: str) -> str | None:
    return load("iam_authorization")["services"][prefix]["create_action_key"]


DNS_ACTIONS = ("route53:ChangeResourceRecordSets",)


def unconditioned_actions() -> list[str]:
    """Mutating actions granted on ``*``: the reference offers no tag or resource condition for them."""
    return [a for a in statements_by_purpose().get("Unconditioned", []) if a not in DNS_ACTIONS]


def _dns_statements(zones: tuple[tuple[str, str], ...], actions: list[str]) -> list[dict]:
    """One statement per hosted zone: its records' names (the record, and ``_*.`` below it for ACM's validation
    CNAME and the ownership TXT), as Route 53 normalizes them (lower case, no final dot), and our record types."""
    by_zone: dict[str, set[str]] = {}
    for zone, record in zones:
        by_zone.setdefault(zone, set()).update({record, f"_*.{record}"})
    return [
        _statement(
            f"DnsRecords{zone}",
            actions,
            (f"arn:aws:route53:::hostedzone/{zone}",),
            {
                "ForAllValues:StringLike": {"route53:ChangeResourceRecordSetsNormalizedRecordNames": sorted(names)},
                "ForAllValues:StringEquals": {"route53:ChangeResourceRecordSetsRecordTypes": list(RECORD_TYPES)},
                # ForAllValues holds on a request without the key; IAM's guide pairs it with Null for that reason.
                "Null": {"route53:ChangeResourceRecordSetsNormalizedRecordNames": "false"},
            },
        )
        for zone, names in sorted(by_zone.items())
    ]


def policy(
    pass_roles: tuple[str, ...] = (), zones: tuple[tuple[str, str], ...] = (), *, bucket_ready: bool = False
) -> dict:
    """The operator policy. ``pass_roles``: ARNs of existing roles specs name (``iam.role_arn``) that it may pass;
    ``zones``: (hosted zone id, record name) pairs specs name (``dns``) whose records it may change;
    ``bucket_ready``: the shared bucket exists, so its settings are no longer the holder's to change."""
    groups = statements_by_purpose()
    creates = groups.get("CreateOwned", [])
    owned = {"StringEquals": {f"aws:ResourceTag/{k}": v for k, v in OWNERSHIP_CONDITION.items()}}
    bounded = [a for a in groups["Roles"] if a in BOUNDED_ROLE_ACTIONS]
    unconditioned = groups.get("Unconditioned", [])
    statements = [
        _statement("Read", groups["Read"]),
        _statement("Roles", [a for a in groups["Roles"] if a not in BOUNDED_ROLE_ACTIONS], ROLE_RESOURCES),
        _statement(
            "RolesWithinTheBoundary",
            bounded,
            (ROLE_RESOURCES[0],),
            {"StringEquals": {"iam:PermissionsBoundary": BOUNDARY_ARN}},
        ),
        _statement(
            "PassRole",
            groups["PassRole"],
            (ROLE_RESOURCES[0], *pass_roles),
            {"StringEquals": {"iam:PassedToService": list(PASSED_TO)}},
        ),
        _statement(
            "ServiceLinkedRoles",
            groups["ServiceLinkedRoles"],
            ("arn:aws:iam::*:role/aws-service-role/*",),
            {"StringEquals": {"iam:AWSServiceName": list(SERVICE_LINKED)}},
        ),
        _statement("Buckets", [a for a in groups["Buckets"] if a not in BUCKET_SETUP], BUCKET_RESOURCES),
        *(
            []
            if bucket_ready
            else [
                _statement("SharedBucketSetup", [a for a in groups["Buckets"] if a in BUCKET_SETUP], BUCKET_RESOURCES)
            ]
        ),
        _statement("PublicParameters", groups["PublicParameters"], PUBLIC_PARAMETERS),
        _statement(
            "CreateOwned",
            creates,
            condition={"StringEquals": {f"aws:RequestTag/{k}": v for k, v in OWNERSHIP_CONDITION.items()}},
        ),
        _statement("ChangeOwned", groups["ChangeOwned"], condition=owned),
    ]
    for group in sorted(g for g in groups if g.startswith("TagOnCreate:")):
        prefix = group.split(":")[1]
        made_here = [a.split(":")[1] for a in creates if a.startswith(f"{prefix}:")]
        statements.append(
            _statement(
                f"TagOnCreate{prefix.title().replace('-', '')}",
                groups[group],
                condition={"StringEquals": {_create_action_key(prefix): sorted(made_here)}},
            )
        )
    statements += _dns_statements(zones, [a for a in unconditioned if a in DNS_ACTIONS])
    statements.append(_statement("Unconditioned", [a for a in unconditioned if a not in DNS_ACTIONS]))
    statements += [
        {"Sid": "KeepTheBoundaryOnEveryRole", "Effect": "Deny", "Action": list(BOUNDARY_REMOVAL), "Resource": "*"},
        {"Sid": "KeepTheBoundaryAsItIs", "Effect": "Deny", "Action": list(BOUNDARY_REWRITE), "Resource": BOUNDARY_ARN},
    ]
    return {"Version": "2012-10-17", "Statement": [s for s in statements if s["Action"]]}


def _role_statements(tree: ast.AST) -> list[dict]:
    """The literal ``{"Effect": ..., "Action": ...}`` dicts of a module that are not trust or bucket policies."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Dict):
            continue
        keys = [k.value for k in node.keys if isinstance(k, ast.Constant)]
        if "Effect" in keys and "Action" in keys and "Principal" not in keys:
            found.append(ast.literal_eval(node.values[keys.index("Action")]))
    return found


def role_actions() -> list[str]:
    """Every action a statement of a role neurondeploy makes can name (scanned from the statement builders)."""
    actions: set[str] = set()
    for directory in ROLE_STATEMENT_MODULES:
        for path in sorted((PACKAGE / directory).rglob("*.py")):
            for action in _role_statements(ast.parse(path.read_text())):
                actions.update([action] if isinstance(action, str) else action)
    return sorted(actions)


def boundary() -> dict:
    """The permissions boundary of every role neurondeploy makes: the union of what their statements can name, on
    any resource (each role's own policy narrows it to its prefixes, images and secrets), and nothing of IAM or STS,
    so no policy put on such a role can give it more."""
    actions = role_actions()
    if any(a.split(":")[0] in ("iam", "sts") for a in actions):
        raise ValueError("a role statement names an IAM or STS action: the boundary must not allow one")
    decrypt = [a for a in actions if a == "kms:Decrypt"]
    return {
        "Version": "2012-10-17",
        "Statement": [
            _statement("WhatNeurondeployRolesDo", [a for a in actions if a not in decrypt]),
            # Roles decrypt only what Secrets Manager or SSM decrypts for them (iam.secret_read_statements).
            _statement(
                "DecryptOnlyForSecretsAndParameters",
                decrypt,
                condition={"StringLike": {"kms:ViaService": ["secretsmanager.*.amazonaws.com", "ssm.*.amazonaws.com"]}},
            ),
        ],
    }


def render(
    pass_roles: tuple[str, ...] = (), zones: tuple[tuple[str, str], ...] = (), *, bucket_ready: bool = False
) -> str:
    return json.dumps(policy(pass_roles, zones, bucket_ready=bucket_ready), indent=2) + "\n"


def render_boundary() -> str:
    return json.dumps(boundary(), indent=2) + "\n"


class _Refused(argparse.ArgumentTypeError):
    def __init__(self, error: SpecError) -> None:
        super().__init__(error.one_line())


def _role_arn(value: str) -> str:
    if not re.fullmatch(ROLE_ARN_PATTERN, value):
        raise _Refused(SpecError(f"{value!r} is not an IAM role ARN", "give arn:aws:iam::<account>:role/<name>"))
    return value


def _zone(value: str) -> tuple[str, str]:
    zone, _, record = value.partition("=")
    try:
        dns = DnsSpec(hosted_zone_id=zone.removeprefix("/hostedzone/"), zone_name=record, record_name=record)
    except ValueError:
        raise _Refused(
            SpecError(
                f"--zone {value!r} is not ZONE_ID=RECORD_NAME",
                "give a spec's dns.hosted_zone_id and dns.record_name, e.g. --zone Z0123456789ABC=api.example.com",
            )
        ) from None
    return dns.hosted_zone_id, dns.record_name


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):
        # argparse prefixes "argument X: " and prints usage first; what is wrong and the fix is the whole line here.
        print(f"error: {message.split(': ', 1)[-1] if message.startswith('argument ') else message}", file=sys.stderr)
        raise SystemExit(2)


def main(arguments: list[str]) -> int:
    parser = _OneLineParser(
        prog="python -m neurondeploy.aws.iam_policy",
        description="Print the operator policy (or, with --boundary, the roles' permissions boundary) as JSON.",
    )
    parser.add_argument(
        "role_arns", nargs="*", type=_role_arn, metavar="ROLE_ARN", help="an existing role a spec names (iam.role_arn)"
    )
    parser.add_argument(
        "--zone",
        action="append",
        default=[],
        type=_zone,
        metavar="ZONE_ID=RECORD_NAME",
        help="a hosted zone and record a spec names (dns.hosted_zone_id, dns.record_name); repeatable",
    )
    parser.add_argument(
        "--bucket-ready",
        action="store_true",
        help="the shared bucket exists: leave out the statement that sets it up (its policy, public-access block)",
    )
    parser.add_argument("--boundary", action="store_true", help="print the permissions boundary instead")
    try:
        options = parser.parse_args(arguments)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    if options.boundary:
        print(render_boundary(), end="")
    else:
        print(render(tuple(options.role_arns), tuple(options.zone), bucket_ready=options.bucket_ready), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
