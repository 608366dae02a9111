"""Recorded resources against desired ones: what to leave, update in place, retire (blue/green) or delete
first; and the order deletes go in (dependents first)."""

from __future__ import annotations

from dataclasses import dataclass, field

from neurondeploy.engine.state import DeploymentState, ResourceState
from neurondeploy.resources.graph import dependencies_first
from neurondeploy.resources.model import (
    Resource,
    content_hash,
    identity_digest,
    recorded_identity,
    requests_hash,
)
from neurondeploy.resources.registry import registry

RETIRED = "~"  # state name of a blue/green resource's previous object: <name>~<its create hash>


@dataclass
class Reconcile:
    """What an apply does to recorded resources before creating what is missing."""

    doomed: list[str] = field(default_factory=list)  # delete first: no longer desired, or replaced
    retire: list[str] = field(default_factory=list)  # blue/green: keep until the apply is done, then delete
    update: list[str] = field(default_factory=list)  # in place
    gone: list[str] = field(default_factory=list)  # missing in AWS: the record is dropped (no delete) and made again


def reconcile(
    before: DeploymentState | None,
    ordered: list[Resource],
    *,
    gone: frozenset[str] = frozenset(),
    drifted: frozenset[str] = frozenset(),
) -> Reconcile:
    """Classify recorded resources against the desired ones (``ordered``: dependencies first); module doc.
    The refresh's findings: ``gone`` (recorded, missing in AWS) are made again, and what uses their ids follows
    (updated in place where it can be, else replaced); ``drifted`` (changed out of band) are put back, in place
    where they can be, else replaced."""
    plan = Reconcile()
    if before is None:
        return plan
    recorded = {n: r for n, r in before.resources.items() if not is_retired(n)}
    desired = {r.name for r in ordered}
    replaced: set[str] = set()  # deleted first: everything depending on it must go first and follow
    retired: set[str] = set()  # a new object beside the old one: what uses its ids (refs) must follow
    missing: set[str] = set()
    for resource in ordered:
        record = recorded.get(resource.name)
        uses = {name for name, _ in resource.refs()}
        under_replaced = any(dep in replaced for dep in resource.depends_on)  # goes first, so this goes before it
        following = under_replaced or any(dep in (retired | missing) and dep in uses for dep in resource.depends_on)
        if record is not None and resource.name in gone:
            missing.add(resource.name)  # nothing to delete: its record goes and it is made again
            continue
        # A record made before its resource declared an identity holds the requests' hash alone: the same requests
        # are the same object (unchanged, or drifted and put back in place), other requests a new one.
        legacy = record is not None and recorded_identity(record.create_hash) is None
        same_requests = legacy and bool(resource.identity) and record.create_hash == requests_hash(resource.create)
        unchanged = record is not None and (record.create_hash == content_hash(resource) or same_requests)
        if record is None or (unchanged and not following and resource.name not in drifted):
            continue
        same_identity = same_requests or (
            bool(resource.identity) and recorded_identity(record.create_hash) == identity_digest(resource.identity)
        )
        if under_replaced:
            replaced.add(resource.name)
        elif record.complete and same_identity and updatable(resource):
            plan.update.append(resource.name)
        elif record.complete and resource.create_before_delete and resource.identity and not same_identity:
            plan.retire.append(resource.name)
            retired.add(resource.name)
        else:
            replaced.add(resource.name)
    plan.gone = sorted(missing)
    doomed = {n for n in recorded if n not in desired} | replaced
    plan.doomed = sorted(doomed, key=lambda n: -before.resources[n].sequence)
    return plan


def is_retired(name: str) -> bool:
    return RETIRED in name


def deletion_order(records: dict[str, ResourceState], names) -> list[ResourceState]:
    """``names`` of ``records`` dependents first (by recorded dependencies, then newest first): an endpoint
    updated in place keeps its old sequence while the config it now uses is newer."""
    by_sequence = [record.name for record in sorted(records.values(), key=lambda r: r.sequence)]
    order = dependencies_first(by_sequence, lambda name: records[name].depends_on)
    wanted = set(names)
    return [records[n] for n in reversed(order) if n in wanted]


def updatable(resource: Resource) -> bool:
    """Whether a changed resource of the same identity is updated in place: it has update requests, or its kind
    converges the object to the new create requests."""
    kind = registry().get(resource.type)
    return bool(resource.update) or (kind is not None and kind.converge is not None)
