"""What an apply would change, per resource, against state: the reviewed diff `plan` shows with a state and
`apply` prints (and asks about) before its first mutating call.

Actions, as Terraform spells them: ``+`` create, ``~`` update in place, ``-/+`` replace, ``-`` delete, and
unchanged. Classification is :func:`~neurondeploy.engine.reconcile.reconcile`'s (the executor acts on the
same one); the fields are the create parameters that differ from what state recorded as sent (refs resolved
where state knows their values), so an update names what moves and a replacement names what forces it.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from neurondeploy.engine.reconcile import is_retired, reconcile
from neurondeploy.engine.state import DeploymentState
from neurondeploy.errors import NeurondeployError
from neurondeploy.planner.context import plan_context
from neurondeploy.planner.cost import plan_cost
from neurondeploy.resources.deployment import deployment_resources
from neurondeploy.resources.graph import creation_order
from neurondeploy.resources.model import Resource, content_hash
from neurondeploy.resources.refs import contains_ref, resolve
from neurondeploy.resources.tags import STATE
from neurondeploy.specs import LoadedSpec, parse_spec

CREATE, UPDATE, REPLACE, DELETE, KEEP = "create", "update", "replace", "delete", "keep"
SYMBOLS = {CREATE: "+", UPDATE: "~", REPLACE: "-/+", DELETE: "-", KEEP: " "}
VERBS = {CREATE: "create", UPDATE: "update in place", REPLACE: "replace", DELETE: "delete", KEEP: "unchanged"}


@dataclass(frozen=True)
class Change:
    name: str
    type: str
    action: str  # CREATE | UPDATE | REPLACE | DELETE | KEEP
    fields: tuple[str, ...] = ()  # UPDATE: what changes; REPLACE: what forces it (or why)

    def line(self) -> str:
        detail = f" ({', '.join(self.fields)})" if self.fields else ""
        return f"{SYMBOLS[self.action]:>3} {self.name} ({self.type}): {VERBS[self.action]}{detail}"


@dataclass
class Changes:
    changes: list[Change] = field(default_factory=list)

    def count(self, action: str) -> int:
        return sum(c.action == action for c in self.changes)

    @property
    def pending(self) -> list[Change]:
        return [c for c in self.changes if c.action != KEEP]

    def summary(self) -> str:
        return (
            f"{self.count(CREATE)} to create, {self.count(UPDATE)} to update in place, "
            f"{self.count(REPLACE)} to replace, {self.count(DELETE)} to delete, {self.count(KEEP)} unchanged"
        )


def changes(
    before: DeploymentState | None,
    resources: list[Resource],
    *,
    lineage: str = "",
    gone: frozenset[str] = frozenset(),
    drifted: frozenset[str] = frozenset(),
) -> Changes:
    """Every resource's action if ``resources`` were applied over ``before``, after a refresh that found ``gone``
    (made again) and ``drifted`` (put back)."""
    ordered = creation_order(resources)
    plan = reconcile(before, ordered, gone=gone, drifted=drifted)
    recorded = {} if before is None else {n: r for n, r in before.resources.items() if not is_retired(n)}
    outputs: dict = {(STATE, "Lineage"): lineage}
    for record in recorded.values():
        outputs.update({(record.name, attr): value for attr, value in record.outputs.items()})
    doomed, updates = set(plan.doomed), set(plan.update) | set(plan.retire)
    result = Changes()
    for resource in ordered:
        record = recorded.get(resource.name)
        if resource.name in plan.gone:
            result.changes.append(Change(resource.name, resource.type, CREATE, ("gone from AWS",)))
        elif record is None:
            result.changes.append(Change(resource.name, resource.type, CREATE))
        elif resource.name in updates:
            action = UPDATE if resource.name in plan.update else REPLACE
            fields = _changed_fields(record.create_requests, resource, outputs)
            if resource.name in drifted:
                fields = (*fields, "changed outside neurondeploy: put back")
            result.changes.append(Change(resource.name, resource.type, action, fields))
        elif resource.name in doomed:
            fields = _changed_fields(record.create_requests, resource, outputs) or ("a resource it depends on",)
            result.changes.append(Change(resource.name, resource.type, REPLACE, fields))
        elif not record.complete:
            result.changes.append(Change(resource.name, resource.type, CREATE, ("resumes an unfinished create",)))
        elif record.create_hash != content_hash(resource):
            result.changes.append(Change(resource.name, resource.type, REPLACE, ("a resource it depends on",)))
        else:
            result.changes.append(Change(resource.name, resource.type, KEEP))
    desired = {r.name for r in ordered}
    for name in sorted(doomed - desired, key=lambda n: -before.resources[n].sequence):
        result.changes.append(Change(name, before.resources[name].type, DELETE))
    return result


def _changed_fields(sent: list[dict], resource: Resource, outputs: Mapping) -> tuple[str, ...]:
    """Top-level create parameters (``Operation.Param``) whose new value differs from the one sent."""
    old = {}
    for request in sent:
        old.setdefault(request.get("operation"), {}).update(request.get("params") or {})
    fields: list[str] = []
    for request in resource.create:
        previous = old.get(request.operation)
        if previous is None:
            fields.append(request.operation)
            continue
        for key, value in request.params.items():
            new = _resolved(value, outputs)
            if contains_ref(new) or _canonical(new) != _canonical(previous.get(key)):
                fields.append(f"{request.operation}.{key}")
    return tuple(dict.fromkeys(fields))


def _resolved(value: Any, outputs: Mapping) -> Any:
    try:
        return resolve(value, outputs)
    except KeyError:
        return value


def _canonical(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in sorted(value.items())}
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    return value


_ACCOUNT_IN_ARN = re.compile(r"arn:aws[a-z-]*:[a-z0-9-]+:[a-z0-9-]*:(\d{12}):")
_RECORDED_ARTIFACT = re.compile(r"/artifact/model-([0-9a-f]{16})\.tar\.gz")  # naming.artifact_uri


def changes_against_state(
    loaded: LoadedSpec, before: DeploymentState, lineage: str, context: dict | None = None
) -> Changes:
    """Offline (`plan`): the changes apply would make over ``before``, with the account and the artifact state
    recorded (a new artifact shows only at apply, which compiles and hashes it); no refresh."""
    arns = _ACCOUNT_IN_ARN.search(json.dumps([r.outputs for r in before.resources.values()]))
    account = arns[1] if arns else None
    sent = [r.create_requests for r in before.resources.values()]
    boot = [
        base64.b64decode(data["UserData"]).decode(errors="replace")
        for requests in sent
        for request in requests
        if isinstance(data := request.get("params", {}).get("LaunchTemplateData"), dict) and "UserData" in data
    ]
    recorded = _RECORDED_ARTIFACT.search(json.dumps(sent) + "\n".join(boot))  # the EC2 instances have it in user data
    known = {"account_id": account, "artifact_sha256": recorded[1] if recorded else None, **(context or {})}
    ctx = plan_context(loaded, **{k: v for k, v in known.items() if v})
    return changes(before, deployment_resources(loaded.spec, ctx), lineage=lineage)


def recorded_hourly_usd(before: DeploymentState) -> float | None:
    """What the deployment as last applied costs per hour (its recorded spec, priced now)."""
    if not before.spec_json:
        return None
    try:
        loaded = parse_spec(before.spec_json)
        return plan_cost(loaded, deployment_resources(loaded.spec, plan_context(loaded))).hourly_usd
    except NeurondeployError:
        return None
