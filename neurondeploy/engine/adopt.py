"""Adoption: a create call whose answer was lost made an object that state does not know; find it and take its
ids instead of making a second one (or deleting it).

The executor records the intent (which request of which resource) before every mutating call. Resuming at a
request with a recorded intent, it looks for the object among what the apply's ownership scan found unrecorded
with this state's lineage (:mod:`neurondeploy.engine.ownership`): the one of the resource's type whose
``neurondeploy:resource`` tag names this resource. Its kind's describe (the drift reader, by the one id it
takes) reads it, and the request's outputs are read from that description, as if it were the lost answer: a
create answer wraps the object under one key (``Vpc.VpcId``, ``LoadBalancers[0].DNSName``) or returns its fields
at the top (``GroupId``), so the description is wrapped the same way.
"""

from __future__ import annotations

import re
from typing import Any

import jmespath

from neurondeploy.aws.errors import is_gone
from neurondeploy.aws.transport import AwsCallError, AwsTransport
from neurondeploy.engine.sweep import Leftover
from neurondeploy.resources.model import Request, Resource, extract_outputs
from neurondeploy.resources.refs import find_refs, resolve
from neurondeploy.resources.registry import registry

RECORD_KINDS = ("route53:record", "route53:owner-record")
_WRAPPER = re.compile(r"([A-Z][A-Za-z]*)(\[0\])?\.")  # "Vpc.", "LoadBalancers[0].", inside functions too


def candidate(resource: Resource, found: list[Leftover], lineage: str) -> Leftover | None:
    """The one object ``found`` that is ``resource`` (same type, its resource tag, this lineage); None when none
    or several are."""
    matches = [f for f in found if f.type == resource.type and f.resource == resource.name and f.lineage == lineage]
    return matches[0] if len(matches) == 1 else None


def adopt(transport: AwsTransport, resource: Resource, request: Request, leftover: Leftover) -> dict[str, Any] | None:
    """The outputs ``request`` would have answered, read from the object ``leftover``; None when its kind has no
    describe by one id, the object is gone, or an output cannot be read from its description."""
    kind = registry().get(resource.type)
    if kind is None or kind.describe is None or not request.outputs:
        return None
    ids = {attr for res, attr in find_refs(kind.describe.request.params) if res == "it"}
    if len(ids) != 1:
        return None
    describe = kind.describe.request
    params = resolve(describe.params, {("it", ids.pop()): leftover.id})
    try:
        obj = jmespath.search(kind.describe.found, transport.call(describe.service, describe.operation, params))
    except AwsCallError as exc:
        if is_gone(exc):
            return None
        raise
    if not obj:
        return None
    outputs = extract_outputs(request, _as_answer(request, obj))
    return outputs if all(value is not None for value in outputs.values()) else None


def _as_answer(request: Request, obj: dict) -> dict:
    """``obj`` shaped as ``request``'s answer: under the key its outputs read it from."""
    match = next(filter(None, (_WRAPPER.search(path) for path in request.outputs.values())), None)
    if match is None or match[1] in obj:
        return obj  # the create answer has the object's fields at its top
    return {match[1]: [obj] if match[2] else obj}


def as_upsert(resource: Resource, params: dict, found: list[Leftover], lineage: str) -> dict | None:
    """A Route 53 CREATE of a record that exists already and is this state's (its ownership TXT record names this
    lineage): the same change as an UPSERT, so it is adopted and brought to what the spec asks. None otherwise."""
    if resource.type != "route53:record":
        return None
    zone = str(params.get("HostedZoneId", "")).rsplit("/", 1)[-1]
    changes = params.get("ChangeBatch", {}).get("Changes", [])
    # the sweep tells the ownership TXT records apart (route53:owner-record); in state they are route53:record too
    ours = {f.id.lower() for f in found if f.type in RECORD_KINDS and f.lineage == lineage}
    if not changes or any(c.get("Action") != "CREATE" for c in changes):
        return None
    names = [f"{zone}|{c['ResourceRecordSet']['Type']}|{c['ResourceRecordSet']['Name'].rstrip('.')}" for c in changes]
    if not all(name.lower() in ours for name in names):
        return None
    upserts = [{**c, "Action": "UPSERT"} for c in changes]
    return {**params, "ChangeBatch": {**params["ChangeBatch"], "Changes": upserts}}
