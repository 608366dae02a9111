"""A resource that declares an identity after deployments recorded it without one (the instances' security group):
the same requests are the same object, so an upgrade replaces nothing, and a drift is put back in place; other
requests are still a replacement. reconcile over the EC2 template's own resources."""

from __future__ import annotations

from pathlib import Path

from neurondeploy.engine.reconcile import reconcile
from neurondeploy.engine.state import DeploymentState, ResourceState
from neurondeploy.planner.context import plan_context
from neurondeploy.resources.deployment import deployment_resources
from neurondeploy.resources.graph import creation_order
from neurondeploy.resources.model import content_hash, requests_hash
from neurondeploy.specs import load_spec

TEMPLATE = Path(__file__).parents[2] / "templates" / "minilm-ec2-alb.yaml"


def recorded(resources, legacy: str) -> DeploymentState:
    """State as an apply recorded it; ``legacy``'s record as made before it declared an identity."""
    state = DeploymentState("minilm-web", "us-east-1", "inference", None, 0.0)
    for sequence, resource in enumerate(resources):
        digest = requests_hash(resource.create) if resource.name == legacy else content_hash(resource)
        count = len(resource.create)
        state.resources[resource.name] = ResourceState(
            resource.name, resource.type, {}, count, count, digest, [], list(resource.depends_on), True, 0.0, sequence
        )
    return state


def test_a_record_from_before_the_identity_is_the_same_object_and_a_drift_is_put_back_in_place():
    loaded = load_spec(TEMPLATE)
    resources = creation_order(deployment_resources(loaded, plan_context(loaded)))
    group = next(r for r in resources if r.name == "sg-instances")
    assert group.identity
    before = recorded(resources, "sg-instances")
    assert reconcile(before, resources).doomed == []  # an upgrade changes nothing
    drifted = reconcile(before, resources, drifted=frozenset({"sg-instances"}))
    assert drifted.update == ["sg-instances"] and drifted.doomed == []  # the fleet is not replaced

    # Other requests than the ones recorded (a new serving port): still a new group, and what uses it follows.
    before.resources["sg-instances"].create_hash = requests_hash(group.create[:1])
    changed = reconcile(before, resources)
    assert "sg-instances" in changed.doomed and "asg" in changed.doomed
