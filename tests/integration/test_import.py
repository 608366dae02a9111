"""`import NAME` retags what the sweep finds with each kind's own retagger (resources.kinds.Kind.retag), and refuses,
changing nothing, when one of the objects is of a kind no record says how to retag (another neurondeploy made it).

Against a moto server over HTTP: a VPC and a security group tagged as another state's deployment."""

from __future__ import annotations

import dataclasses

import pytest

from neurondeploy.aws.transport import AwsTransport
from neurondeploy.engine import importer
from neurondeploy.engine.importer import ImportRefused, import_deployment
from neurondeploy.engine.state import StateStore
from neurondeploy.resources.registry import registry
from neurondeploy.resources.tags import DEPLOYMENT_TAG, LINEAGE_TAG, MANAGED_BY, MANAGED_BY_TAG, RESOURCE_TAG

pytestmark = pytest.mark.integration

NAME = "imported"


@pytest.fixture
def foreign(aws):
    """A VPC and a security group of deployment NAME, made by a state whose lineage is "elsewhere"."""
    ec2 = aws.client("ec2")

    def tags(resource: str) -> list[dict]:
        pairs = {DEPLOYMENT_TAG: NAME, MANAGED_BY_TAG: MANAGED_BY, LINEAGE_TAG: "elsewhere", RESOURCE_TAG: resource}
        return [{"Key": key, "Value": value} for key, value in pairs.items()]

    vpc = ec2.create_vpc(CidrBlock="10.9.0.0/16", TagSpecifications=[{"ResourceType": "vpc", "Tags": tags("vpc")}])[
        "Vpc"
    ]["VpcId"]
    group = ec2.create_security_group(
        GroupName=f"{NAME}-sg",
        Description="test",
        VpcId=vpc,
        TagSpecifications=[{"ResourceType": "security-group", "Tags": tags("sg")}],
    )["GroupId"]
    return ec2, {vpc, group}


def lineages(ec2, ids) -> set[str]:
    described = ec2.describe_tags(Filters=[{"Name": "resource-id", "Values": sorted(ids)}])["Tags"]
    return {t["Value"] for t in described if t["Key"] == LINEAGE_TAG}


def test_import_retags_each_object_with_its_kinds_retagger(foreign, tmp_path):
    ec2, ids = foreign
    state = StateStore(tmp_path / "state.db")
    retagged = import_deployment(NAME, AwsTransport("us-east-1"), state)
    assert {item.id for item in retagged} == ids
    assert lineages(ec2, ids) == {state.lineage} and state.get(NAME) is not None


def test_a_kind_without_a_retagger_refuses_the_whole_import_and_changes_nothing(foreign, tmp_path, monkeypatch):
    ec2, ids = foreign
    kinds = dict(registry())
    kinds["ec2:security-group"] = dataclasses.replace(kinds["ec2:security-group"], retag=None)
    monkeypatch.setattr(importer, "registry", lambda: kinds)
    state = StateStore(tmp_path / "state.db")
    with pytest.raises(ImportRefused, match="ec2:security-group sg-.* this state's lineage"):
        import_deployment(NAME, AwsTransport("us-east-1"), state)
    assert lineages(ec2, ids) == {"elsewhere"}  # not even the VPC, which has a retagger, was touched
    assert state.get(NAME) is None
