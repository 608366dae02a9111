"""The IAM policy neurondeploy itself needs, derived from the AWS calls its code can make.

Every call site names its service and operation literally — ``Request("ec2", "CreateVpc", ...)`` in the
builders, ``transport.call("s3", "PutObject", ...)`` in apply, destroy, sweep and drift, ``Wait("...")`` for
botocore waiters — so the source is scanned for them (no AWS, no spec needed). ``infra/iam-policy.json`` is this
module's output, and a test fails when code gains a call the committed policy does not allow:

    python -m neurondeploy.aws.iam_policy > infra/iam-policy.json
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]
SCANNED = ("resources", "aws", "engine", "compiler", "serving", "training")
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
    "DeleteObjects": "DeleteObject",
}
# Calls made where the workload runs, with its own role (which the plan grants exactly these), never by whoever
# runs neurondeploy: reading {secret: ARN} container env values at container start.
WORKLOAD_MODULES = ("aws/secrets.py",)
# Permissions that are not API calls of ours: handing a role to EC2 (instance profile) and SageMaker.
EXTRA_ACTIONS = ("iam:PassRole",)


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


def policy() -> dict:
    actions = sorted({iam_action(service, operation) for service, operation in scanned_calls()} | set(EXTRA_ACTIONS))
    by_prefix: dict[str, list[str]] = {}
    for action in actions:
        by_prefix.setdefault(action.split(":")[0], []).append(action)
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": prefix.replace("-", "").title().replace(" ", ""),
                "Effect": "Allow",
                "Action": names,
                "Resource": "*",
            }
            for prefix, names in sorted(by_prefix.items())
        ],
    }


def render() -> str:
    return json.dumps(policy(), indent=2) + "\n"


if __name__ == "__main__":
    print(render(), end="")
