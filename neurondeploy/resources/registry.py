"""Every kind's record (:class:`~neurondeploy.resources.kinds.Kind`), collected from the builder modules that
keep them beside their builders: what drift and the sweep read."""

from __future__ import annotations

from functools import cache

from neurondeploy.resources import (
    acm,
    compute,
    elb,
    iam,
    network,
    route53,
    sagemaker_endpoint,
    sagemaker_training,
)
from neurondeploy.resources.graph import dependencies_first
from neurondeploy.resources.kinds import Find, Kind

_MODULES = (network, compute, elb, acm, route53, iam, sagemaker_endpoint, sagemaker_training)


@cache
def registry() -> dict[str, Kind]:
    """Every kind's record, by type."""
    kinds: dict[str, Kind] = {}
    for module in _MODULES:
        for kind in module.KINDS:
            assert kind.type not in kinds, f"two records for {kind.type}"
            kinds[kind.type] = kind
    for kind in kinds.values():
        for used in kind.uses:
            assert used in kinds and kinds[used].delete, f"{kind.type} uses {used}, which has no deleter"
    return kinds


def deletion_order() -> tuple[str, ...]:
    """The types the sweep can delete, each before every type it uses (:attr:`Kind.uses`, transitively)."""
    deletable = [k.type for k in registry().values() if k.delete is not None]
    return tuple(reversed(dependencies_first(deletable, lambda t: registry()[t].uses)))


def sources() -> list[Find]:
    """The sweep's sources, each once, in the order it reads them (:attr:`Find.step`)."""
    finds = dict.fromkeys(k.find for k in registry().values() if k.find is not None)
    return sorted(finds, key=lambda f: f.step)
