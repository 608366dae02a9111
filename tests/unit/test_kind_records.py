"""The kind records (resources.kinds.Kind, collected by resources.registry): every kind the sweep can find says
how `import` gives it a state's lineage, and each retag request is valid against botocore's models, strictly;
destroy and the sweep delete a kind with one set of requests."""

from __future__ import annotations

from pathlib import Path

import pytest

from neurondeploy.errors import PlanError
from neurondeploy.planner.context import plan_context
from neurondeploy.resources.deployment import deployment_resources
from neurondeploy.resources.graph import dependencies_first
from neurondeploy.resources.kinds import Retag, Sends
from neurondeploy.resources.registry import deletion_order, registry
from neurondeploy.resources.tags import LINEAGE_TAG
from neurondeploy.resources.validation import check_request
from neurondeploy.specs import load_spec

# A plausible id per kind, in the form the sweep names it by.
IDS = {
    "ec2:": "vpc-0123456789abcdef0",
    "elbv2:": "arn:aws:elasticloadbalancing:us-east-1:123456789012:loadbalancer/app/web/0123456789abcdef",
    "acm:": "arn:aws:acm:us-east-1:123456789012:certificate/01234567-89ab-cdef-0123-456789abcdef",
    "iam:": "neurondeploy-web-role",
    "autoscaling:": "neurondeploy-web-asg",
    "sagemaker:": "minilm-embed",
}


class NoReads:
    def call(self, *args, **kwargs):
        raise AssertionError("this retagger must not read AWS")


FOUND = sorted(kind.type for kind in registry().values() if kind.find is not None)


@pytest.mark.parametrize("kind_type", FOUND)
def test_every_kind_the_sweep_finds_can_be_imported(kind_type):
    kind = registry()[kind_type]
    assert (kind.retag is not None) != kind.tagless, f"{kind_type}: a retagger, or tagless, not both"


@pytest.mark.parametrize("kind_type", [t for t in FOUND if registry()[t].retag and not t.startswith("route53:")])
def test_each_retag_request_is_valid_and_carries_the_lineage(kind_type):
    context = Retag("web", "0f0f0f", "us-east-1", "123456789012", NoReads())
    ident = next(value for prefix, value in IDS.items() if kind_type.startswith(prefix))
    request = registry()[kind_type].retag(context, ident)
    check_request(request.service, request.operation, request.params)
    assert f"'{LINEAGE_TAG}'" in repr(request.params) and "'0f0f0f'" in repr(request.params)
    assert ident.lower() in repr(request.params).lower()


TEMPLATES = sorted((Path(__file__).parents[2] / "templates").glob("*.yaml"))
PLACEHOLDER = "\x00id\x00"


def _path_of(value, target, path=()):
    """Where ``target`` sits in nested dicts/lists, as a tuple of keys and indexes."""
    if value == target:
        return path
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = _path_of(item, target, (*path, key))
        if found is not None:
            return found
    return None


def _at(value, path):
    for key in path:
        value = value[key]
    return value


@pytest.mark.parametrize("template", TEMPLATES, ids=[path.name for path in TEMPLATES])
def test_destroy_and_the_sweep_delete_each_kind_with_the_same_requests(template):
    """A kind whose deleter is Sends: what its builder records for destroy is what the sweep sends for a leftover
    of it (same operations, params and waits), the id read from where the sweep puts it."""
    loaded = load_spec(template)
    checked = 0
    for resource in deployment_resources(loaded.spec, plan_context(loaded)):
        deleter = registry().get(resource.type) and registry()[resource.type].delete
        if not isinstance(deleter, Sends):
            continue
        shape = list(deleter.requests(PLACEHOLDER))
        where = _path_of(shape[0].params, PLACEHOLDER)
        ident = _at(resource.delete[0].params, where)
        assert list(resource.delete) == list(deleter.requests(ident)), resource.name
        checked += 1
    assert checked or template.name.endswith("-local.yaml") or "pretrain" in template.name


def test_the_sweep_deleter_sends_the_requests_and_waits_only_after_a_delete():
    """Sends against a caller that records: each request sent; its wait only when AWS did delete something."""

    class Recorder:
        def __init__(self, gone):
            self.gone, self.sent = gone, []

        def call(self, service, operation, params, refused=()):
            self.sent.append((service, operation, params))
            return None if self.gone else {}

        def wait(self, service, waiter, params):
            self.sent.append(("wait", waiter, params))

    load_balancer = registry()["elbv2:load-balancer"].delete
    there, gone = Recorder(gone=False), Recorder(gone=True)
    assert load_balancer(there, "arn:lb") is True and load_balancer(gone, "arn:lb") is False
    assert there.sent == [
        ("elbv2", "DeleteLoadBalancer", {"LoadBalancerArn": "arn:lb"}),
        ("wait", "LoadBalancersDeleted", {"LoadBalancerArns": ["arn:lb"]}),
    ]
    assert gone.sent == [("elbv2", "DeleteLoadBalancer", {"LoadBalancerArn": "arn:lb"})]


@pytest.mark.parametrize("template", TEMPLATES, ids=[path.name for path in TEMPLATES])
def test_the_sweep_deletes_every_kind_before_the_kinds_its_builders_make_it_depend_on(template):
    """The sweep's order comes from the kinds' declared uses; whatever a template's resources depend on (their
    refs and order-only waits) is declared, so a leftover goes before what its kind's resources use."""
    loaded = load_spec(template)
    resources = deployment_resources(loaded.spec, plan_context(loaded))
    type_of = {resource.name: resource.type for resource in resources}
    order = deletion_order()
    edges = {
        (resource.type, type_of[used])
        for resource in resources
        for used in resource.depends_on
        if resource.type in order and type_of[used] in order and resource.type != type_of[used]
    }
    assert [edge for edge in sorted(edges) if order.index(edge[0]) > order.index(edge[1])] == []
    assert all(used in registry()[user].uses for user, used in edges)


def test_uses_that_go_round_are_refused():
    uses = {"a": ["b"], "b": ["c"], "c": ["a"], "d": []}
    assert dependencies_first(["d", "c", "a"], lambda name: uses[name]) != []  # "b" is outside: no cycle seen
    with pytest.raises(PlanError, match="dependency cycle: a -> b -> c -> a"):
        dependencies_first(["a", "b", "c"], lambda name: uses[name])
    assert dependencies_first(["a", "b", "d"], lambda name: [u for u in uses[name] if u != "c"]) == ["b", "a", "d"]
