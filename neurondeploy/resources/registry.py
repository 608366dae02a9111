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
from neurondeploy.resources.kinds import Find, Kind

_MODULES = (network, compute, elb, acm, route53, iam, sagemaker_endpoint, sagemaker_training)


@cache
def registry() -> dict[str, Kind]:
    """Every kind's record, by type."""
    kinds: dict[str, Kind] = {}
    for module in _MODULES:
        for kind in module.KINDS:
            assert kind.type not in kinds, f"two records for {kind.type}"
            assert (kind.delete is None) == (kind.order is None), f"{kind.type}: a deleter needs an order and back"
            kinds[kind.type] = kind
    orders = [k.order for k in kinds.values() if k.order is not None]
    assert len(orders) == len(set(orders)), "two kinds at one position of the deletion order"
    return kinds


def deletion_order() -> tuple[str, ...]:
    """The types the sweep can delete, dependents first (:attr:`Kind.order`)."""
    ordered = sorted((k for k in registry().values() if k.order is not None), key=lambda k: k.order)
    return tuple(k.type for k in ordered)


def sources() -> list[Find]:
    """The sweep's sources, each once, in the order it reads them (:attr:`Find.step`)."""
    finds = dict.fromkeys(k.find for k in registry().values() if k.find is not None)
    return sorted(finds, key=lambda f: f.step)
