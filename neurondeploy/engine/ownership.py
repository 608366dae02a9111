"""Which state owns what a deployment has in AWS, read before an apply changes anything.

Every object an apply makes carries the lineage of its state (:mod:`neurondeploy.resources.tags`). Before an
apply, the tag sweep lists what carries the deployment's tag and is not recorded in this state:

- carried by another lineage, or by none (made by an older neurondeploy, or by hand with our tags): another
  state owns the deployment. The apply is refused before anything is created, with the fix: use that state, or
  adopt the deployment into this one with ``neurondeploy import``. A lost state file, an unset variable or a
  second laptop therefore never builds a second copy, and never deletes the live one as "orphans";
- carried by this lineage: an earlier apply of this state made it and never heard back (a lost answer, a killed
  process). The executor adopts it where a resumed create finds it (:meth:`Executor.apply` ``found``); what is
  still unclaimed after the apply is ours and wanted by nothing, so it is deleted.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from neurondeploy.aws.transport import AwsTransport
from neurondeploy.engine.state import DeploymentState
from neurondeploy.engine.sweep import UNCHECKED, Leftover, find_leftovers
from neurondeploy.errors import NeurondeployError

SHOWN = 4  # leftovers named in a refusal; the rest are counted
# Owned by another recorded resource (the Auto Scaling group's instances and target registrations): not orphans.
NEVER_ORPHANS = frozenset({"ec2:instance", "elbv2:target-registration", UNCHECKED})


class OwnedElsewhere(NeurondeployError):
    exit_code = 6


@dataclass
class Ownership:
    """What carries the deployment's tag in AWS and this state cannot simply keep."""

    ours: list[Leftover]  # this lineage's and not recorded: an earlier apply lost the answer
    foreign: list[Leftover]  # another lineage's (recorded here or not), or unrecorded with none


def ownership_of(
    transport: AwsTransport, name: str, lineage: str, before: DeploymentState | None, hosted_zone_ids: Iterable[str]
) -> Ownership:
    known = recorded_identifiers(before) if before is not None else set()
    found = [
        item
        for item in find_leftovers(transport, name, hosted_zone_ids=hosted_zone_ids)
        if item.type not in NEVER_ORPHANS and item.type != UNCHECKED
    ]
    recorded = [item.id.lower() in known for item in found]
    # Recorded here but carrying another lineage: `import` moved it to another state, which owns it now. Recorded
    # with no lineage: made by a neurondeploy before lineages, and this state's.
    foreign = [
        item
        for item, here in zip(found, recorded)
        if (item.lineage is not None and item.lineage != lineage) or (item.lineage is None and not here)
    ]
    ours = [item for item, here in zip(found, recorded) if item.lineage == lineage and not here]
    return Ownership(ours, foreign)


def refuse_foreign(name: str, foreign: list[Leftover], state_path: str) -> None:
    """Raise :class:`OwnedElsewhere` when another state owns part of the deployment (module doc)."""
    if not foreign:
        return
    lineages = sorted({item.lineage or "none" for item in foreign})
    shown = ", ".join(f"{item.type} {item.id}" for item in foreign[:SHOWN])
    more = f" and {len(foreign) - SHOWN} more" if len(foreign) > SHOWN else ""
    raise OwnedElsewhere(
        f"deployment {name} exists in AWS under another state (lineage {', '.join(lineages)}): {shown}{more}; "
        f"this state ({state_path}) does not own it and changes nothing",
        f"apply with the state that made it (NEURONDEPLOY_STATE or --state), or adopt it into this one with "
        f"`neurondeploy import {name}`",
    )


def recorded_identifiers(deployment: DeploymentState) -> set[str]:
    """Every ID, ARN and name state holds for the deployment (outputs and sent parameters), and what the sweep
    names by several parts: Route 53 records (``zone|TYPE|name``) and scaling targets."""
    found: set[str] = set()

    def walk(value) -> None:
        if isinstance(value, str):
            found.add(value.lower())
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    for resource in deployment.resources.values():
        walk(resource.outputs)
        for request in resource.create_requests:
            walk(request.get("params", {}))
            if request.get("operation") == "RegisterScalableTarget":  # the sweep names targets by these three
                params = request["params"]
                found.add(
                    "|".join((params["ServiceNamespace"], params["ScalableDimension"], params["ResourceId"])).lower()
                )
            if request.get("operation") == "ChangeResourceRecordSets":
                zone = request["params"]["HostedZoneId"].rsplit("/", 1)[-1]
                for change in request["params"]["ChangeBatch"]["Changes"]:
                    record = change["ResourceRecordSet"]
                    found.add(f"{zone}|{record['Type']}|{record['Name'].rstrip('.')}".lower())
    return found
