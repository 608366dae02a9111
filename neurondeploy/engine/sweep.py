"""The tag sweep: find (and delete) everything still carrying ``neurondeploy:deployment=<name>``.

State can be lost, an apply can die between a create call and its state write, and someone can copy a
resource by hand: destroy does not trust state alone. :func:`find_leftovers` asks two kinds of source:

- per-service describes, filtered by our tag (EC2) or listed and then checked tag by tag (ELB, Auto Scaling,
  IAM under our role path, ACM, SageMaker). They are authoritative: they see exactly what exists now;
- the Resource Groups Tagging API (GetResources), for anything tagged ours of a type we do not describe. It is
  an eventually consistent index that keeps deleted resources for a while (and terminated instances), so an
  ARN of a type the describes cover counts only if a describe confirms it; the describes win duplicates.

Route 53 records cannot be tagged: in the given hosted zones, ours are the ownership TXT records
``_neurondeploy.<record_name>`` whose value is ``"deployment=<name>"`` (:mod:`neurondeploy.resources.route53`), the
A/AAAA/CNAME records at the names they vouch for, and the DNS-validation CNAMEs of our certificates at such
names.

What each kind's source, deleter and place in the order are is its record (:mod:`neurondeploy.resources.kinds`,
beside its builder); this module runs them. :data:`DELETE_ORDER` says in which order leftover types are
deleted: dependents before what they use. Every call goes through :meth:`AwsTransport.call`, so it is
validated strictly and logged.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from neurondeploy.aws.errors import is_gone
from neurondeploy.aws.paging import Paged
from neurondeploy.aws.transport import AwsCallError, AwsTransport
from neurondeploy.errors import NeurondeployError
from neurondeploy.resources import network, route53
from neurondeploy.resources.registry import deletion_order, registry, sources
from neurondeploy.resources.tags import DEPLOYMENT_TAG, LINEAGE_TAG, RESOURCE_TAG, tag_dict

DELETE_ORDER: tuple[str, ...] = deletion_order()  # from every kind's Kind.uses, dependents first
SCAN_THREADS = 8
UNCHECKED = "sweep:unchecked"  # a source that could not be read: nothing can be proven about it


@dataclass
class Leftover:
    type: str  # a resource type as the builders name it ("ec2:vpc"), or UNCHECKED
    id: str  # what its delete call takes: EC2 id, ARN, name; records "<zone>|<type>|<name>"
    region: str  # "global" for IAM and Route 53
    detail: str
    tags: dict[str, str] = field(default_factory=dict)  # as found; Route 53 records: what their ownership TXT says

    @property
    def lineage(self) -> str | None:
        """The state that owns it (its lineage tag); None when it carries none (made by an older neurondeploy,
        or a type whose finder reads no tags)."""
        return self.tags.get(LINEAGE_TAG)

    @property
    def resource(self) -> str | None:
        """Which of the deployment's resources it is (its ``neurondeploy:resource`` tag)."""
        return self.tags.get(RESOURCE_TAG)


def order_index(leftover_type: str) -> int:
    """Position in :data:`DELETE_ORDER`; unknown types (found only by the tagging API) go last."""
    try:
        return DELETE_ORDER.index(leftover_type)
    except ValueError:
        return len(DELETE_ORDER)


def sort_leftovers(leftovers: Iterable[Leftover]) -> list[Leftover]:
    return sorted(leftovers, key=lambda item: order_index(item.type))  # stable: discovery order within a type


# --- finding --------------------------------------------------------------------------------------------------


def find_leftovers(transport: AwsTransport, deployment: str, *, hosted_zone_ids: Iterable[str] = ()) -> list[Leftover]:
    """Everything of ``deployment`` that still exists, in :data:`DELETE_ORDER`. A source that cannot be read
    (access denied, an API the endpoint lacks) becomes an :data:`UNCHECKED` leftover rather than silence."""
    zones = list(dict.fromkeys(zone_id(z) for z in hosted_zone_ids))
    describes = [(find.label, find.run, ()) for find in sources() if not find.per_zone]
    describes.append(("resourcegroupstaggingapi", _tagging_api, ()))
    return _run_sources(transport, deployment, [describes, _per_zone(zones)])


def find_owned_records(transport: AwsTransport, deployment: str, hosted_zone_ids: Iterable[str]) -> list[Leftover]:
    """Only the Route 53 part of :func:`find_leftovers`. Destroy runs it before the recorded delete removes
    the ownership TXT records that make the other records recognisable as ours."""
    return _run_sources(transport, deployment, [_per_zone(list(dict.fromkeys(zone_id(z) for z in hosted_zone_ids)))])


def _per_zone(zones: list[str]) -> list[tuple[str, Callable, tuple]]:
    return [(find.label.format(zone=zone), find.run, (zone,)) for find in sources() if find.per_zone for zone in zones]


def _run_sources(transport: AwsTransport, deployment: str, phases: list[list[tuple[str, Callable, tuple]]]):
    """Run each phase's sources at once (every one is a few list calls: against AWS a scan takes the slowest
    source's time, not the sum of ~20 round trips), phase after phase: the per-zone record finders read the
    certificates the ACM describe found. What they find is merged in the sources' own order, so the first finder
    of a resource names it, as when they ran one by one."""
    found: dict[tuple[str, str], Leftover] = {}
    certificates: list[dict] = []

    def run(scan: _Scan, source: tuple[str, Callable, tuple]) -> None:
        label, find, args = source
        scan.source(label, find, scan, *args)

    for phase in filter(None, phases):
        scans = [_Scan(transport, deployment, certificates=certificates) for _ in phase]
        with ThreadPoolExecutor(max_workers=min(SCAN_THREADS, len(phase)), thread_name_prefix="sweep") as pool:
            list(pool.map(run, scans, phase))
        for scan in scans:
            certificates = scan.certificates or certificates
            for kind, ident, detail, where, tags in scan.found:
                key = (kind, ident.lower() if kind.startswith("sagemaker:") else ident)  # SageMaker ARNs: lower case
                found.setdefault(key, Leftover(kind, ident, where or transport.region, detail, tag_dict(tags)))
    return sort_leftovers(found.values())


def list_hosted_zones(transport: AwsTransport) -> list[str]:
    """Every hosted zone id of the account (destroy's fallback when state names none)."""
    pages = Paged(transport).call("route53", "ListHostedZones", {})
    return [zone_id(z["Id"]) for page in pages for z in page.get("HostedZones", [])]


@dataclass
class _Scan:
    """What one source's finder gets (:class:`neurondeploy.resources.kinds.Scan`): raw calls, pages, ``add``."""

    transport: AwsTransport
    deployment: str
    certificates: list[dict] = field(default_factory=list)  # set by the ACM source, read by the records
    found: list[tuple] = field(default_factory=list)  # (kind, id, detail, where, tags), in the order found

    def __post_init__(self) -> None:
        self.paged = Paged(self.transport)

    def add(self, kind: str, ident: str, detail: str, where: str | None = None, *, tags=None) -> None:
        self.found.append((kind, ident, detail, where, tags))

    def call(self, service: str, operation: str, params: dict) -> dict:
        return self.transport.call(service, operation, params)

    def source(self, label: str, fn, *args) -> Any:
        """Run one discovery; a failure becomes an UNCHECKED leftover, so destroy never calls it clean."""
        try:
            return fn(*args)
        except AwsCallError as exc:
            self.add(UNCHECKED, label, f"could not list: {exc.message}")
            return None


def _tagging_api(scan: _Scan) -> None:
    covered = set(DELETE_ORDER)
    params = {"TagFilters": [{"Key": DEPLOYMENT_TAG, "Values": [scan.deployment]}], "ResourcesPerPage": 100}
    for page in scan.paged.call("resourcegroupstaggingapi", "GetResources", params):
        for mapping in page.get("ResourceTagMappingList", []):
            kind, _ = arn_to_type_id(mapping["ResourceARN"])
            if kind in covered:
                continue  # a describe is authoritative; the index also keeps deleted resources a while
            scan.add(
                kind, mapping["ResourceARN"], "found only by the Resource Groups Tagging API", tags=mapping.get("Tags")
            )


def _arn_types() -> dict[tuple[str, str], str]:
    """ARN (service, resource type) -> our type, where a kind's record names one."""
    return {kind.arn: kind.type for kind in registry().values() if kind.arn}


def arn_to_type_id(arn: str) -> tuple[str, str]:
    """``arn:aws:ec2:r:a:vpc/vpc-1`` -> ("ec2:vpc", "vpc-1"); ELB and ACM keep the ARN as id; SageMaker the name.
    Anything no record names keeps "<service>:<type>"."""
    parts = arn.split(":", 5)
    service, rest = parts[2], parts[5] if len(parts) > 5 else ""
    # "type/id" or "type:id", whichever separator comes first (autoScalingGroup:uuid:autoScalingGroupName/x)
    cut = min((i for i in (rest.find("/"), rest.find(":")) if i >= 0), default=len(rest))
    resource_type, ident = rest[:cut], rest[cut + 1 :]
    kind = _arn_types().get((service, resource_type), f"{service}:{resource_type}")
    if service in ("ec2", "sagemaker"):
        return kind, ident
    return kind, arn


def zone_id(zone: str) -> str:
    return zone.rsplit("/", 1)[-1]


# --- deleting -------------------------------------------------------------------------------------------------


class SweepError(NeurondeployError):
    exit_code = 6


def delete_leftover(transport: AwsTransport, leftover: Leftover, *, poll_s: float = 5.0, wait_s: float = 900.0) -> bool:
    """Delete one leftover with the calls its type needs (detach, disassociate, empty, then delete; wait for
    the slow ones). True if it deleted it, False if it was already gone. Raises :class:`AwsCallError` when
    AWS refuses (:func:`~neurondeploy.aws.errors.is_retryable` tells whether waiting may help) and :class:`SweepError` for a type it
    cannot delete. Call it in :data:`DELETE_ORDER` (:func:`sort_leftovers`), security groups after
    :func:`release_security_groups`."""
    kind = registry().get(leftover.type)
    if kind is None or kind.delete is None:
        raise SweepError(
            f"cannot delete {leftover.type} {leftover.id}: neurondeploy never creates that type",
            "delete it yourself (it carries this deployment's tag)",
        )
    try:
        return bool(kind.delete(AwsCaller(transport, poll_s, wait_s), leftover.id))
    except AwsCallError as exc:
        if is_gone(exc):
            return False
        raise


def record_exists(transport: AwsTransport, leftover: Leftover) -> bool:
    """Whether the record a ``route53:*`` leftover names is still there."""
    return route53.find_record(AwsCaller(transport, 0, 0), leftover.id) is not None


def release_security_groups(transport: AwsTransport, group_ids: Iterable[str]) -> None:
    """Revoke every rule of these groups that names another group, so groups referring to each other (the
    ALB's egress to the instances, their ingress from the ALB) can be deleted in any order."""
    group_ids = list(group_ids)
    if not group_ids:
        return
    network.release_security_groups(AwsCaller(transport, 0, 0), group_ids)


@dataclass
class AwsCaller:
    """What the records' deleters and drift comparisons get (:class:`neurondeploy.resources.kinds.Caller`):
    ``call`` answers None where AWS says "already gone"; the other answers and errors pass through."""

    t: AwsTransport
    poll_s: float = 5.0
    wait_s: float = 900.0

    def __post_init__(self) -> None:
        self.paged = Paged(self.t)

    def call(self, service: str, operation: str, params: dict, *, refused: tuple[str, ...] = ()) -> dict | None:
        try:
            return self.t.call(service, operation, params)
        except AwsCallError as exc:
            if is_gone(exc) or exc.code in refused:
                return None
            raise

    def wait(self, service: str, waiter: str, params: dict) -> None:
        self.t.wait(service, waiter, params)

    def poll_until_gone(self, what: str, describe) -> None:
        deadline = time.monotonic() + self.wait_s
        while describe():
            if time.monotonic() > deadline:
                raise SweepError(f"{what} is still being deleted after {self.wait_s:.0f} s", "run destroy again later")
            time.sleep(self.poll_s)
