"""`destroy NAME`: delete what state records, then sweep what carries our tag, then prove nothing is left.

1. recorded: :meth:`Executor.destroy_recorded` sends each recorded resource's delete requests, dependents
   first. The hosted zones of its DNS records are read from state before that empties it.
2. sweep: :func:`~neurondeploy.engine.sweep.find_leftovers` (tags, per-service describes, ownership TXT
   records in those zones) and deletes what it finds in :data:`DELETE_ORDER`, retrying "still in use"
   answers with a bounded backoff (a deleted ALB's or instance's network interfaces hold a security group for
   minutes on AWS).
3. verification: find_leftovers again; what it finds is ``remaining``. Only when nothing remains and nothing
   failed is the deployment forgotten from state, and its claim on the name released
   (:mod:`neurondeploy.engine.claims`).

With nothing recorded (state was lost, the leak was never recorded, or an import) and no zone named, every hosted zone of
the account is searched for this deployment's ownership records.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from neurondeploy.aws.errors import is_retryable
from neurondeploy.aws.transport import AwsCallError, AwsTransport
from neurondeploy.engine.bucket_objects import BucketCleanup, delete_deployment_objects
from neurondeploy.engine.claims import release_claim, shared_bucket_of
from neurondeploy.engine.executor import Executor
from neurondeploy.engine.ownership import NEVER_ORPHANS, OwnedElsewhere
from neurondeploy.engine.state import DeploymentLocked, DeploymentState, StateStore
from neurondeploy.engine.sweep import (
    DELETE_ORDER,
    UNCHECKED,
    Leftover,
    delete_leftover,
    find_leftovers,
    find_owned_records,
    list_hosted_zones,
    record_exists,
    release_security_groups,
    sort_leftovers,
    zone_id,
)
from neurondeploy.errors import NeurondeployError

__all__ = ["DELETE_ORDER", "DestroyReport", "destroy", "recorded_hosted_zones", "sweep_leftovers"]


@dataclass
class DestroyReport:
    deleted: list[str]  # recorded resources deleted (their logical names)
    swept: list[Leftover]  # found by the sweep and deleted, in deletion order
    remaining: list[Leftover]  # found by the verification pass: still there
    errors: list[str] = field(default_factory=list)  # deletes that failed for good (what remains says the rest)
    objects: BucketCleanup | None = None  # its objects in the shared bucket, once nothing else of it is left

    @property
    def clean(self) -> bool:
        return not self.remaining and not self.errors


def recorded_hosted_zones(deployment: DeploymentState | None) -> list[str]:
    """Hosted zones the deployment's records live in: each recorded record's delete request names its zone
    (records have no outputs); the recorded spec's ``dns.hosted_zone_id`` too."""
    if deployment is None:
        return []
    zones: list[str] = []
    for resource in deployment.resources.values():
        for request in resource.delete_requests:
            zone = request.get("params", {}).get("HostedZoneId") if request.get("service") == "route53" else None
            if isinstance(zone, str) and not zone.startswith("${"):
                zones.append(zone)
    try:
        spec = json.loads(deployment.spec_json or "null") or {}
        zone = (spec.get("dns") or {}).get("hosted_zone_id")
    except (ValueError, AttributeError):
        zone = None
    if zone:
        zones.append(zone)
    return list(dict.fromkeys(z.rsplit("/", 1)[-1] for z in zones))


def destroy(
    name: str,
    executor: Executor,
    transport: AwsTransport,
    state: StateStore,
    *,
    hosted_zone_ids: Iterable[str] = (),
    retry_s: float = 2.0,
    retry_timeout_s: float = 600.0,
    poll_s: float = 5.0,
    on_event: Callable[[str], None] | None = None,
    keep_artifacts: bool = False,
) -> DestroyReport:
    """Delete everything of deployment ``name`` (see the module doc). Never raises for a resource that will
    not go: it is in ``remaining`` (and ``errors``), and state keeps the deployment so destroy can run again.
    Raises :class:`DeploymentLocked` when an apply of it is running. ``hosted_zone_ids`` adds zones to search
    for its records; ``retry_s``/``retry_timeout_s`` bound the backoff on "still in use" answers and the
    waits for groups to go; ``poll_s`` is the polling interval of those waits."""
    say = on_event or (lambda message: None)
    before = state.get(name)
    zones = list(dict.fromkeys([*(zone_id(z) for z in hosted_zone_ids), *recorded_hosted_zones(before)]))
    errors: list[str] = []
    if not zones and (before is None or not before.resources):  # nothing recorded (or an import): search them all
        try:
            zones = list_hosted_zones(transport)
        except AwsCallError as exc:
            errors.append(f"listing hosted zones: {exc.message}")
    # Before the recorded delete removes the ownership TXT records that vouch for the others.
    records = [r for r in find_owned_records(transport, name, zones) if r.type != UNCHECKED]
    if before is None:  # nothing recorded: delete nothing of another state's (its lineage says whose it is)
        found = _merge(find_leftovers(transport, name, hosted_zone_ids=zones), records)
        foreign = [item for item in found if item.type not in NEVER_ORPHANS and item.lineage != state.lineage]
        if foreign and len(foreign) == len([item for item in found if item.type not in NEVER_ORPHANS]):
            raise OwnedElsewhere(
                f"deployment {name} in AWS belongs to another state (lineage "
                f"{', '.join(sorted({item.lineage or 'none' for item in foreign}))}): {len(foreign)} resources; "
                f"this state ({state.path}) deletes nothing it does not own",
                f"destroy it with the state that made it, or adopt it first with `neurondeploy import {name}`",
            )
    deleted: list[str] = []
    try:
        deleted = executor.destroy_recorded(name).deleted
    except DeploymentLocked:
        raise  # an apply is running: sweeping now would delete what it is creating
    except NeurondeployError as exc:
        errors.append(f"recorded resources: {exc.message}")

    def sweep_and_verify() -> tuple[list[Leftover], list[Leftover]]:
        found = _merge(find_leftovers(transport, name, hosted_zone_ids=zones), records)
        # Instances and target registrations are their group's: they carry the lineage they were launched with.
        owned = [item for item in found if item.type in NEVER_ORPHANS or item.lineage == state.lineage]
        if len(owned) < len(found):
            others = ", ".join(f"{item.type} {item.id} (lineage {item.lineage})" for item in found if item not in owned)
            errors.append(
                f"{len(found) - len(owned)} resources tagged for {name} belong to another state (or to none): "
                f"{others}; not deleted: adopt them with `neurondeploy import {name}` to delete them here"
            )
        swept = _sweep(transport, owned, errors, say, retry_s=retry_s, retry_timeout_s=retry_timeout_s, poll_s=poll_s)
        # Records whose ownership TXT is gone are no longer recognisable: check the ones seen before by name.
        still = [r for r in records if record_exists(transport, r)]
        return swept, _merge(find_leftovers(transport, name, hosted_zone_ids=zones), still)

    current = state.get(name)
    if current is not None:  # keep an apply out while we sweep (the recorded part locked by itself)
        with state.lock(name, current.region, current.kind):
            swept, remaining = sweep_and_verify()
            if not remaining and not errors:
                state.forget(name)
    else:
        swept, remaining = sweep_and_verify()
    for leftover in remaining:
        say(f"still present: {leftover.type} {leftover.id} ({leftover.detail})")
    objects = None
    if not remaining and not errors:  # nothing of it is left: the name is free for any state
        try:
            bucket = shared_bucket_of(transport)
            # before the claim goes: once released, another state may take the name and write under it
            objects = delete_deployment_objects(transport, bucket, name, keep_artifacts=keep_artifacts)
            errors += objects.errors
            if release_claim(transport, bucket, name, state.lineage):
                say(f"released the claim on {name}")
        except AwsCallError as exc:
            errors.append(f"releasing the claim on {name}: {exc.message}")
    return DestroyReport(deleted, swept, remaining, errors, objects)


def sweep_leftovers(
    transport: AwsTransport,
    leftovers: list[Leftover],
    errors: list[str],
    say: Callable[[str], None],
    *,
    retry_s: float = 2.0,
    retry_timeout_s: float = 600.0,
    poll_s: float = 5.0,
) -> list[Leftover]:
    """Delete ``leftovers`` in the deletion order, backing off on "still in use"; failures go to ``errors``."""
    return _sweep(transport, leftovers, errors, say, retry_s=retry_s, retry_timeout_s=retry_timeout_s, poll_s=poll_s)


def _sweep(
    transport: AwsTransport,
    leftovers: list[Leftover],
    errors: list[str],
    say: Callable[[str], None],
    *,
    retry_s: float,
    retry_timeout_s: float,
    poll_s: float,
) -> list[Leftover]:
    swept: list[Leftover] = []
    groups_released = False
    for leftover in sort_leftovers(leftovers):
        if leftover.type == UNCHECKED:
            continue  # nothing to delete; the verification pass reports it again
        if leftover.type == "ec2:security-group" and not groups_released:
            groups = [item.id for item in leftovers if item.type == "ec2:security-group"]
            try:
                release_security_groups(transport, groups)
            except AwsCallError as exc:
                errors.append(f"revoking rules between security groups {', '.join(groups)}: {exc.message}")
            groups_released = True
        say(f"deleting leftover {leftover.type} {leftover.id}")
        try:
            deleted = _with_retry(
                lambda item=leftover: delete_leftover(transport, item, poll_s=poll_s, wait_s=retry_timeout_s),
                retry_s,
                retry_timeout_s,
            )
        except NeurondeployError as exc:
            errors.append(f"{leftover.type} {leftover.id}: {exc.message}")
            continue
        if deleted:  # not when the recorded delete got there first
            swept.append(leftover)
    return swept


def _merge(*groups: list[Leftover]) -> list[Leftover]:
    unique = {(item.type, item.id): item for group in reversed(groups) for item in group}
    return sort_leftovers(unique.values())


def _with_retry(action: Callable[[], bool], retry_s: float, timeout_s: float) -> bool:
    """Run ``action``; while AWS answers "still in use", back off (doubling, at most 30 s) until ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    delay = retry_s
    while True:
        try:
            return action()
        except AwsCallError as exc:
            if not is_retryable(exc) or time.monotonic() + delay > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 30.0)
