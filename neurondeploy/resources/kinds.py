"""One record per resource kind, kept beside the builder that creates it: how drift describes it, how the sweep
finds it by our tag, how the sweep deletes a leftover of it, and where it goes in the deletion order.

The records are data and pure functions. A finder, deleter or drift comparison that needs AWS gets it from the
engine as an argument (:class:`Scan`, :class:`Caller`, :class:`Reader`: spelt ``x.call("svc", "Op", ...)``, so
that :mod:`neurondeploy.aws.iam_policy` sees every operation); nothing here imports boto3 or sends anything.

:mod:`neurondeploy.resources.registry` collects every builder module's ``KINDS``.

Deletion order: each record declares what it uses (:attr:`Kind.uses`: the kinds whose objects must outlive one of
its objects), and :func:`neurondeploy.resources.registry.deletion_order` walks those, dependents first. What a
builder's refs make a resource depend on is declared (a test holds every template's plan to it), and so is what AWS
refuses to delete while something else holds it: an ALB and a NAT gateway or Elastic IP keep the internet gateway
attached ("has some mapped public addresses"), a listener keeps its certificate in use, an Auto Scaling group would
replace an instance deleted under it, an ownership TXT record vouches for the records beside it (created first,
deleted last).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from neurondeploy.resources.model import Request
from neurondeploy.resources.naming import DEPLOYMENT_TAG, LINEAGE_TAG
from neurondeploy.resources.refs import ref, resolve

# --- what the engine hands a record's functions ----------------------------------------------------------------


class Pages(Protocol):
    def call(self, service: str, operation: str, params: dict) -> Iterator[dict]:
        """Every page of a paginated list call; a refusal raises."""


class Reader(Protocol):
    def call(self, service: str, operation: str, params: dict) -> dict:
        """The answer; every refusal raises (the engine decides what it means)."""


class Caller(Protocol):
    """Deleters and drift comparisons: ``call`` answers None where AWS says "already gone"."""

    paged: Pages

    def call(self, service: str, operation: str, params: dict, *, refused: tuple[str, ...] = ()) -> dict | None:
        """The answer, or None where AWS says the thing is gone or refuses with a code in ``refused``; any other
        refusal raises."""

    def wait(self, service: str, waiter: str, params: dict) -> None:
        """Run a botocore waiter."""

    def poll_until_gone(self, what: str, describe: Callable[[], Any]) -> None:
        """Call ``describe`` until it answers nothing (for deletes with no botocore waiter)."""


class Scan(Protocol):
    """What a finder gets from the sweep: raw reads, and ``add`` for each leftover it finds."""

    deployment: str
    paged: Pages
    certificates: list[dict]  # our certificates' descriptions (set by the ACM finder) for the records finder

    def call(self, service: str, operation: str, params: dict) -> dict:
        """The answer; a refusal raises (the whole source then counts as unchecked)."""

    def add(self, kind: str, ident: str, detail: str, where: str | None = None, *, tags: Any = None) -> None:
        """Report one leftover; ``where`` is its region (default: the sweep's), "global" for IAM and Route 53;
        ``tags`` as found (a Key/Value list or a dict): they say which state owns it and which resource it is."""


@dataclass(frozen=True)
class Retag:
    """What a kind's retagger gets besides the object's id (`neurondeploy import`)."""

    deployment: str
    lineage: str  # the state's, which the object is to carry
    region: str
    account: str
    aws: Caller  # reads, for a kind whose retag rewrites what is there (the ownership TXT record)

    @property
    def tags(self) -> dict[str, str]:
        return {LINEAGE_TAG: self.lineage}


# --- the record ----------------------------------------------------------------------------------------------


class Expected:
    """The resolved create requests of one recorded resource, by operation (what drift compares with)."""

    def __init__(self, requests: list[tuple[str, dict]]) -> None:
        self.requests = requests

    def has(self, operation: str) -> bool:
        return any(op == operation for op, _ in self.requests)

    def all(self, operation: str) -> list[dict]:
        return [params for op, params in self.requests if op == operation]

    def value(self, operation: str, path: str) -> Any:
        import jmespath

        for params in self.all(operation):
            found = jmespath.search(path, params)
            if found is not None:
                return found
        return None


@dataclass(frozen=True)
class Attr:
    """Live value at ``live`` (JMESPath into the described object) must equal the value at ``expected``
    (JMESPath into the params of the create request ``operation``)."""

    label: str
    live: str
    operation: str
    expected: str
    unordered: bool = False  # compare lists as sets


@dataclass(frozen=True)
class Describe:
    """How drift checks one recorded resource of the kind."""

    request: Request  # its params name the resource by ``${it.<Id>}`` refs to its ids (outputs + delete params)
    found: str  # JMESPath to the object in the response; nothing there means missing
    attrs: tuple[Attr, ...] = ()
    gone: tuple[str, tuple[str, ...]] | None = None  # (state path, values): exists but on its way out
    bad: tuple[str, tuple[str, ...]] | None = None  # (state path, values): reported as changed
    tags: str | Callable[[Reader, dict, Mapping[str, Any]], Any] | None = "Tags"
    extra: Callable[[Caller, dict, Mapping[str, Any], Expected], list[str]] | None = None
    same: Callable[[dict, Mapping[str, Any]], bool] | None = None  # whether the found object is the recorded one


@dataclass(frozen=True)
class Find:
    """One source of the sweep. Kinds found together (a load balancer's listeners) share one: it runs once."""

    label: str  # names the source in an unchecked leftover; per-zone sources format ``{zone}`` into it
    step: int  # the sweep reads its sources in this order
    run: Callable[..., Any]  # run(scan), or run(scan, zone) when per_zone
    per_zone: bool = False  # run once per hosted zone (Route 53 records)


@dataclass(frozen=True)
class Kind:
    type: str  # "<service>:<kind>", as the builders name it
    describe: Describe | None = None  # None: drift does not check it
    find: Find | None = None  # None: the sweep does not look for it
    delete: Callable[[Caller, str], bool] | None = None  # (caller, leftover id) -> deleted (False: already gone)
    uses: tuple[str, ...] = ()  # kinds whose objects must outlive an object of this one (module doc)
    arn: tuple[str, str] | None = None  # (service, resource type) in its ARN when "<service>:<kind>" is not it
    # Brings a recorded object back to what its create requests ask, whatever it is now (an update in place, and
    # the refresh's put-back): converge(caller, its ids, Expected of the new create requests) -> what it did.
    converge: Callable[[Caller, Mapping[str, Any], Expected], list[str]] | None = None
    # `neurondeploy import`: the request that gives a found object of this kind a state's lineage (None when it
    # cannot be built: the object is gone), or tagless when the kind carries no tags of its own (another object
    # speaks for it: a record's ownership TXT record, a scaling target's endpoint). A found kind has one or the other.
    retag: Callable[[Retag, str], Request | None] | None = None
    tagless: bool = False


# --- helpers for the records ---------------------------------------------------------------------------------


def it(attribute: str) -> str:
    """The ref a describe uses for one of the recorded resource's ids (its outputs and delete params)."""
    return ref("it", attribute)


# An EC2 filter for what carries our deployment tag; ${sweep.Deployment} is the deployment's name.
TAGGED = [{"Name": f"tag:{DEPLOYMENT_TAG}", "Values": [ref("sweep", "Deployment")]}]


def ours(tags: Any, deployment: str) -> bool:
    """Whether tags (a list of Key/Value or a dict) carry ``neurondeploy:deployment=<deployment>``."""
    if not tags:
        return False
    if isinstance(tags, dict):
        return tags.get(DEPLOYMENT_TAG) == deployment
    return any(t.get("Key") == DEPLOYMENT_TAG and t.get("Value") == deployment for t in tags)


def done(response: dict | None) -> bool:
    """A :meth:`Caller.call` answer as a deleter's result: False when it was already gone."""
    return response is not None


@dataclass(frozen=True)
class Sends:
    """A kind's deleter that sends the delete requests its builder records for one object, given the leftover's
    id in place of the ref: destroy and the sweep delete it with the same calls. Each request's wait runs after
    it deleted something; deleted when the last request found something to delete."""

    requests: Callable[[str], Sequence[Request]]  # the builder's delete requests for one id (or ref)

    def __call__(self, d: Caller, ident: str) -> bool:
        deleted = False
        for request in self.requests(ident):
            deleted = done(d.call(request.service, request.operation, request.params))
            if deleted and request.wait is not None:
                d.wait(request.wait.service or request.service, request.wait.waiter, request.wait.params)
        return deleted


def ec2_detail(kind: str, item: dict, extra: Any = None) -> str:
    name = next((t["Value"] for t in item.get("Tags", item.get("TagSet", [])) or [] if t.get("Key") == "Name"), "")
    return " ".join(str(x) for x in (kind.split(":")[1], name, extra) if x)


def tagged(
    kind: str,
    request: Request,
    items: str,
    ident: str,
    step: int,
    *,
    extra: str | None = None,
    detail: Callable[[dict], str] | None = None,
    paged: bool = True,
) -> Find:
    """A source that is one describe filtered by our tag (:data:`TAGGED` in its params): every item at
    ``items`` (JMESPath into a page) is a leftover named by ``item[ident]``. Its detail is ``detail(item)``, or
    the kind, its Name tag and ``item[extra]``."""

    def run(scan: Scan) -> None:
        import jmespath

        params = resolve(request.params, {("sweep", "Deployment"): scan.deployment})
        if paged:
            pages: Iterable[dict] = scan.paged.call(request.service, request.operation, params)
        else:
            pages = [scan.call(request.service, request.operation, params)]
        for page in pages:
            for item in jmespath.search(items, page) or []:
                scan.add(
                    kind,
                    item[ident],
                    detail(item) if detail else ec2_detail(kind, item, item.get(extra) if extra else None),
                    tags=item.get("Tags", item.get("TagSet")),
                )

    return Find(f"{request.service} {request.operation}", step, run)
