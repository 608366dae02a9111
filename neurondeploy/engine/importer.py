"""`import NAME`: adopt a deployment that exists in AWS (made by another state, a lost one, or an older
neurondeploy) into this state, as Terraform's ``import`` does.

Everything that carries ``neurondeploy:deployment=NAME`` is given this state's lineage (tags; the ownership TXT
record is rewritten), and the deployment is recorded here with its region. The next ``apply SPEC`` then adopts
each object as the resource its ``neurondeploy:resource`` tag names (instead of making a second one) and puts
back what differs from the spec; ``destroy NAME`` deletes it all. The deployment's claim on its name
(:mod:`neurondeploy.engine.claims`) is rewritten for this state; with nothing in AWS, taking the claim over is the
whole import. The other state, if it still exists, no longer
owns any of it: its next apply or destroy is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from neurondeploy.aws.transport import AwsTransport
from neurondeploy.engine.claims import move_claim, read_claim
from neurondeploy.engine.ownership import NEVER_ORPHANS
from neurondeploy.engine.state import StateStore
from neurondeploy.engine.sweep import UNCHECKED, AwsCaller, Leftover, find_leftovers, zone_id
from neurondeploy.engine.uploads import ensure_bucket
from neurondeploy.errors import NeurondeployError
from neurondeploy.resources.kinds import Retag
from neurondeploy.resources.model import PlanContext
from neurondeploy.resources.naming import bucket_name
from neurondeploy.resources.registry import registry
from neurondeploy.resources.tags import DEPLOYMENT_TAG


class ImportRefused(NeurondeployError):
    exit_code = 6


def import_deployment(
    name: str,
    transport: AwsTransport,
    state: StateStore,
    *,
    hosted_zone_ids: Iterable[str] = (),
    on_event: Callable[[str], None] | None = None,
) -> list[Leftover]:
    """Give every object of deployment ``name`` this state's lineage and record the deployment; returns what was
    retagged. Refuses (changing nothing) when a source could not be read or nothing carries the tag."""
    say = on_event or (lambda message: None)
    zones = [zone_id(z) for z in hosted_zone_ids]
    found = [item for item in find_leftovers(transport, name, hosted_zone_ids=zones) if item.type not in NEVER_ORPHANS]
    unchecked = [item for item in found if item.type == UNCHECKED]
    if unchecked:
        raise ImportRefused(
            f"cannot import {name}: {unchecked[0].id} could not be read ({unchecked[0].detail})",
            "fix the permission or connectivity problem and import again; nothing was changed",
        )
    account = transport.call("sts", "GetCallerIdentity", {})["Account"]
    shared = PlanContext(account_id=account)  # names the shared bucket that holds the claims
    bucket = bucket_name(transport.region, shared)
    if not found:
        claim = read_claim(transport, bucket, name)
        if claim is None or claim.get("lineage") == state.lineage:
            raise ImportRefused(
                f"nothing in {transport.region} carries {DEPLOYMENT_TAG}={name}",
                "check the name and --region (and --zone for its DNS records)",
            )
        # A claim whose state made nothing (and is lost, or is refused now): taking it over is the whole import.
        move_claim(transport, bucket, name, state.lineage, str(state.path))
        say(f"took over the claim on {name} from lineage {claim.get('lineage')}: nothing in AWS carries its tag")
        return []
    kinds = registry()
    unknown = [
        item for item in found if item.type not in kinds or not (kinds[item.type].retag or kinds[item.type].tagless)
    ]
    if unknown:  # before any change: an import is all or nothing
        raise ImportRefused(
            f"cannot import {name}: nothing says how to give {unknown[0].type} {unknown[0].id} this state's lineage",
            "it was made by another neurondeploy version: import with that version; nothing was changed",
        )
    context = Retag(name, state.lineage, transport.region, account, AwsCaller(transport))
    kind = "training" if any(item.type == "sagemaker:training-job" for item in found) else "inference"
    retagged: list[Leftover] = []
    with state.lock(name, transport.region, kind):  # records the deployment (and keeps an apply out meanwhile)
        for item in found:
            retag = kinds[item.type].retag
            if item.lineage == state.lineage or retag is None:
                continue  # already this state's, or it speaks through another object (records, scaling targets)
            request = retag(context, item.id)
            if request is None:
                continue  # gone since the scan
            transport.call(request.service, request.operation, request.params)
            say(f"imported {item.type} {item.id}")
            retagged.append(item)
        move_claim(transport, ensure_bucket(transport, transport.region, shared), name, state.lineage, str(state.path))
    return retagged
