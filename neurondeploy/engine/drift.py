"""`drift NAME`: what changed outside the tool since apply.

For each recorded, complete resource (lookups skipped), its kind's record says how to describe it from what
state recorded (its outputs, and the ids its resolved delete requests name), how to tell it is gone, and which
live attributes to compare with the create requests that made it (:attr:`Kind.describe
<neurondeploy.resources.kinds.Kind.describe>`, beside each builder; :data:`CHECKS` by type). Three kinds of
finding:

- ``missing``: the describe says it does not exist (or it is being deleted);
- ``changed``: a compared attribute differs from what the create requests asked for, or a bad state;
- ``untagged``: a taggable resource no longer carries ``neurondeploy:deployment=<name>``.

The expected values come from create requests: the plan's :class:`Resource` objects passed as ``resources``
(refs resolved from state's outputs), or a ``create_requests`` list on the recorded resource when the state
schema keeps one (``[{"service", "operation", "params"}]``, like ``delete_requests``). Without either, only
existence and tags are checked, plus Route 53 records, whose recorded delete request holds the whole record.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from neurondeploy.aws.errors import is_gone
from neurondeploy.aws.transport import AwsCallError, AwsTransport
from neurondeploy.engine.state import ResourceState, StateStore
from neurondeploy.engine.sweep import AwsCaller
from neurondeploy.resources.kinds import Describe, Expected
from neurondeploy.resources.model import Resource
from neurondeploy.resources.naming import DEPLOYMENT_TAG
from neurondeploy.resources.refs import resolve
from neurondeploy.resources.registry import registry
from neurondeploy.resources.tags import STATE, tag_value

__all__ = ["CHECKS", "DriftItem", "drift"]

# Every type the EC2 + ALB + DNS + TLS template and the SageMaker endpoint create, from the kinds' records. A
# type with no attrs/extra is checked for existence (and tags) only. Not checked: sagemaker:training-job (a job
# ends by design; `status` reports it) and lookups (read-only).
CHECKS: dict[str, Describe] = {kind.type: kind.describe for kind in registry().values() if kind.describe is not None}


@dataclass
class DriftItem:
    resource: str  # logical name in state
    type: str
    kind: str  # "missing" | "changed" | "untagged"
    detail: str


# --- running --------------------------------------------------------------------------------------------------


def drift(
    name: str, transport: AwsTransport, state: StateStore, *, resources: Iterable[Resource] | None = None
) -> list[DriftItem]:
    """Compare every recorded, complete resource of deployment ``name`` with what exists (module doc)."""
    deployment = state.get(name)
    if deployment is None:
        return []
    planned = {r.name: r for r in resources or ()}
    outputs = {(r.name, attr): value for r in deployment.resources.values() for attr, value in r.outputs.items()}
    outputs[(STATE, "Lineage")] = state.lineage
    items: list[DriftItem] = []
    for recorded in deployment.resources.values():
        check = CHECKS.get(recorded.type)
        if recorded.type.endswith("-lookup") or not recorded.complete or check is None:
            continue
        expected = Expected(_create_requests(recorded, planned.get(recorded.name), outputs))
        items += _check(name, transport, recorded, check, recorded_ids(recorded, outputs), expected)
    return items


def _create_requests(recorded: ResourceState, planned: Resource | None, outputs: Mapping) -> list[tuple[str, dict]]:
    if planned is not None:
        raw = [(r.operation, r.params) for r in planned.create]
    else:
        raw = [(r.get("operation"), r.get("params", {})) for r in getattr(recorded, "create_requests", None) or []]
    requests = []
    for operation, params in raw:
        try:
            requests.append((operation, resolve(params, outputs)))
        except KeyError:
            continue  # a value known only to a resource not in state: nothing to compare for this request
    return requests


def recorded_ids(recorded: ResourceState, outputs: Mapping) -> dict[str, Any]:
    """What a describe can address the resource by: the delete requests' params (state keeps them with their
    ${refs}; resolved here from every resource's outputs), then the outputs."""
    ids: dict[str, Any] = {}
    for request in recorded.delete_requests:
        try:
            params = resolve(request.get("params", {}), outputs)
        except KeyError:
            params = request.get("params", {})
        ids.update({k: v for k, v in params.items() if not isinstance(v, (dict, list))})
        if request.get("service") == "route53":
            changes = params.get("ChangeBatch", {}).get("Changes", [])
            if changes:
                record = changes[0].get("ResourceRecordSet") or {}
                ids.update({"_record": record, "RecordName": record.get("Name"), "RecordType": record.get("Type")})
    ids.update(recorded.outputs)
    return ids


def _check(
    deployment: str, transport: AwsTransport, recorded: ResourceState, check: Describe, ids: Mapping, expected: Expected
) -> list[DriftItem]:
    import jmespath

    item = lambda kind, detail: DriftItem(recorded.name, recorded.type, kind, detail)
    describe = check.request
    try:
        params = resolve(describe.params, {("it", key): value for key, value in ids.items()})
    except KeyError:
        return []  # state holds no id to look it up by (not a finding about AWS)
    try:
        response = transport.call(describe.service, describe.operation, params)
    except AwsCallError as exc:
        if is_gone(exc):
            return [item("missing", f"{describe.operation}: {exc.message}")]
        raise
    obj = jmespath.search(check.found, response)
    if check.same and obj is not None and not check.same(obj, ids):
        obj = None  # found another object than this one (a listing that starts at its name)
    if not obj:
        return [item("missing", f"{describe.operation} finds nothing")]
    if check.gone and jmespath.search(check.gone[0], obj) in check.gone[1]:
        return [item("missing", f"{check.gone[0]} is {jmespath.search(check.gone[0], obj)}")]
    items = []
    if check.bad and jmespath.search(check.bad[0], obj) in check.bad[1]:
        items.append(item("changed", f"{check.bad[0]} is {jmespath.search(check.bad[0], obj)}"))
    for attr in check.attrs:
        want = expected.value(attr.operation, attr.expected)
        if want is None:
            continue
        have = jmespath.search(attr.live, obj)
        if not _equal(have, want, attr.unordered):
            items.append(item("changed", f"{attr.label} is {have!r}, expected {want!r}"))
    if check.extra:
        items += [item("changed", detail) for detail in check.extra(AwsCaller(transport), obj, ids, expected)]
    if recorded.taggable and check.tags:
        tags = check.tags(transport, obj, ids) if callable(check.tags) else jmespath.search(check.tags, obj)
        if tag_value(tags, DEPLOYMENT_TAG) != deployment:
            items.append(
                item("untagged", f"{DEPLOYMENT_TAG} is {tag_value(tags, DEPLOYMENT_TAG)!r}, expected {deployment!r}")
            )
    return items


def _equal(have: Any, want: Any, unordered: bool) -> bool:
    if unordered and isinstance(have, list) and isinstance(want, list):
        return sorted(map(str, have)) == sorted(map(str, want))
    if isinstance(have, (int, float)) and isinstance(want, (int, float)) and not isinstance(have, bool):
        return float(have) == float(want)
    return have == want
