"""Refresh and in-place updates of the EC2 + ALB + DNS + TLS template, against a moto server over HTTP.

An apply reads back what state records before it acts: what was deleted out of band is made again, a rule added
out of band is revoked. A capacity or CIDR change touches only what it must: no Auto Scaling group, load
balancer or listener is deleted, and the diff is printed (and confirmed) before the first change.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.ec2_deployment import AMI_PARAMETER, NAME, apply_once, tagged, transport

from neurondeploy.engine.state import StateStore
from neurondeploy.specs import parse_spec

pytestmark = [
    pytest.mark.integration,
    pytest.mark.usefixtures("cpu_standin"),
]  # CPU artifacts stand in for NEFFs, on purpose

DELETES = ("Delete", "Terminate", "Deregister", "Detach", "Disassociate", "Release")


def operations(t) -> list[str]:
    return [c.operation for c in t.mutating_calls()]


def respec(loaded, old: str, new: str):
    """The spec file with ``old`` replaced by ``new`` (the same file, as a user edits it)."""
    path = Path(loaded.source.file)
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new))
    return parse_spec(path.read_text(), file=str(path), path=path)


def group(aws):
    return aws.client("autoscaling").describe_auto_scaling_groups(AutoScalingGroupNames=[f"{NAME}-asg"])[
        "AutoScalingGroups"
    ][0]


def alb_ingress(aws) -> set[tuple]:
    ec2 = aws.client("ec2")
    sg = ec2.describe_security_groups(Filters=[{"Name": "group-name", "Values": [f"{NAME}-alb"]}])["SecurityGroups"][0]
    return {(p["FromPort"], r["CidrIp"]) for p in sg["IpPermissions"] for r in p.get("IpRanges", [])}, sg["GroupId"]


def test_capacity_and_cidr_changes_update_in_place(world, artifact, tmp_path, aws):  # noqa: F811
    loaded, zone = world
    state = StateStore(tmp_path / "state.db")
    apply_once(loaded, state, artifact)
    before = {(item.type, item.id) for item in tagged(transport(), zone)}
    assert group(aws)["DesiredCapacity"] == 2

    loaded = respec(loaded, "instance_count: 2", "instance_count: 3")
    _, t = apply_once(loaded, state, artifact)
    # The group's settings and its scaling policy (put again); no instance refresh: what instances boot is the same.
    assert operations(t) == ["UpdateAutoScalingGroup", "PutScalingPolicy"], operations(t)
    assert group(aws)["DesiredCapacity"] == 3 and group(aws)["MaxSize"] == 6

    rules, _ = alb_ingress(aws)
    assert {cidr for _, cidr in rules} == {"0.0.0.0/0"}
    loaded = respec(loaded, "allowed_cidrs: [0.0.0.0/0]", "allowed_cidrs: [10.0.0.0/8, 192.168.0.0/16]")
    _, t = apply_once(loaded, state, artifact)
    assert not any(op.startswith(DELETES) for op in operations(t)), operations(t)
    assert set(operations(t)) == {"RevokeSecurityGroupIngress", "AuthorizeSecurityGroupIngress"}, operations(t)
    rules, _ = alb_ingress(aws)
    assert {cidr for _, cidr in rules} == {"10.0.0.0/8", "192.168.0.0/16"}
    after = {(item.type, item.id) for item in tagged(transport(), zone) if item.type != "ec2:instance"}
    assert after == {item for item in before if item[0] != "ec2:instance"}  # the same objects, none replaced


def test_refresh_restores_what_was_deleted_or_added_out_of_band(world, artifact, tmp_path, aws):  # noqa: F811
    loaded, zone = world
    state = StateStore(tmp_path / "state.db")
    apply_once(loaded, state, artifact)
    shape = sorted(item.type for item in tagged(transport(), zone) if item.type != "ec2:instance")

    # An SSH rule added by hand to the load balancer's group: the next apply revokes it, and only it.
    rules, group_id = alb_ingress(aws)
    aws.client("ec2").authorize_security_group_ingress(
        GroupId=group_id,
        IpPermissions=[{"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}],
    )
    _, t = apply_once(loaded, state, artifact)
    assert operations(t) == ["RevokeSecurityGroupIngress"], operations(t)
    assert alb_ingress(aws)[0] == rules

    # The load balancer deleted by hand (its listeners go with it): made again, with what uses its ids.
    elbv2 = aws.client("elbv2")
    alb = elbv2.describe_load_balancers(Names=[f"{NAME}-alb"])["LoadBalancers"][0]["LoadBalancerArn"]
    elbv2.delete_load_balancer(LoadBalancerArn=alb)
    _, t = apply_once(loaded, state, artifact)
    made = operations(t)
    assert made.count("CreateLoadBalancer") == 1 and made.count("CreateListener") == 2, made
    assert "DeleteAutoScalingGroup" not in made and "DeleteLaunchTemplate" not in made, made
    assert sorted(item.type for item in tagged(transport(), zone) if item.type != "ec2:instance") == shape
    _, t = apply_once(loaded, state, artifact)
    assert operations(t) == []  # converged


def test_a_drift_on_the_instances_security_group_rules_is_repaired_without_touching_the_fleet(
    world, artifact, tmp_path, aws
):  # noqa: F811
    loaded, _ = world
    state = StateStore(tmp_path / "state.db")
    apply_once(loaded, state, artifact)
    ec2 = aws.client("ec2")
    group_id = ec2.describe_security_groups(Filters=[{"Name": "group-name", "Values": [f"{NAME}-instances"]}])[
        "SecurityGroups"
    ][0]["GroupId"]
    before = group(aws)
    # A rule added by hand, and the rule from the load balancer revoked by hand.
    ssh = [{"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}]
    ec2.authorize_security_group_ingress(GroupId=group_id, IpPermissions=ssh)
    served = [p for p in ec2.describe_security_groups(GroupIds=[group_id])["SecurityGroups"][0]["IpPermissions"]]
    served = [p for p in served if p.get("FromPort") != 22]
    ec2.revoke_security_group_ingress(GroupId=group_id, IpPermissions=served)
    _, t = apply_once(loaded, state, artifact)
    made = operations(t)
    assert not [op for op in made if "AutoScaling" in op or "LaunchTemplate" in op], made
    assert set(made) <= {"RevokeSecurityGroupIngress", "AuthorizeSecurityGroupIngress"}, made
    after = group(aws)
    assert after["LaunchTemplate"] == before["LaunchTemplate"] and after["CreatedTime"] == before["CreatedTime"]
    _, t = apply_once(loaded, state, artifact)
    assert operations(t) == []  # converged


@pytest.mark.slow
def test_apply_without_a_terminal_or_yes_changes_nothing_and_prints_the_diff(world, artifact, tmp_path, aws):  # noqa: F811
    loaded, zone = world
    command = [
        sys.executable, "-m", "neurondeploy.cli", "apply", loaded.source.file, "--artifact", str(artifact),
        "--ami-ssm-parameter", AMI_PARAMETER, "--state", str(tmp_path / "state.db"), "--wait-delay-s", "1",
        "--no-smoke",  # moto runs no load balancer to send it through (test_smoke.py covers it)
    ]  # fmt: skip
    refused = subprocess.run(command, capture_output=True, text=True, env=os.environ.copy(), stdin=subprocess.DEVNULL)
    assert refused.returncode == 1, refused.stderr
    assert "+ vpc (ec2:vpc): create" in refused.stderr and "to create, 0 to update in place" in refused.stderr
    assert "not confirmed, and there is no terminal to ask; nothing was changed" in refused.stderr
    assert tagged(transport(), zone) == []
    applied = subprocess.run([*command, "--yes"], capture_output=True, text=True)
    assert applied.returncode == 0, applied.stderr

    respec(loaded, "instance_count: 2", "instance_count: 3")
    refused = subprocess.run(command, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert refused.returncode == 1
    assert "~ asg (autoscaling:group): update in place (CreateAutoScalingGroup.DesiredCapacity)" in refused.stderr
    assert "0 to create, 1 to update in place, 0 to replace, 0 to delete" in refused.stderr, refused.stderr
    assert group(aws)["DesiredCapacity"] == 2

    # `plan` with the state shows the same diff offline, and what the deployment costs before and after.
    planned = subprocess.run(
        [
            sys.executable,
            "-m",
            "neurondeploy.cli",
            "plan",
            loaded.source.file,
            "--ami-ssm-parameter",
            AMI_PARAMETER,
            "--state",
            str(tmp_path / "state.db"),
        ],  # fmt: skip
        capture_output=True,
        text=True,
    )
    assert planned.returncode == 0, planned.stderr
    assert "~ asg (autoscaling:group): update in place (CreateAutoScalingGroup.DesiredCapacity)" in planned.stdout
    assert "0 to create, 1 to update in place, 0 to replace, 0 to delete" in planned.stdout, planned.stdout
    assert "cost $" in planned.stdout and "/hour -> $" in planned.stdout

    # `apply --plan FILE` applies the reviewed diff and only that one: when AWS moved since, it refuses.
    saved = tmp_path / "reviewed.json"
    made = subprocess.run(
        [sys.executable, "-m", "neurondeploy.cli", "plan", loaded.source.file, "--ami-ssm-parameter", AMI_PARAMETER,
         "--state", str(tmp_path / "state.db"), "--out", str(saved)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    _, group_id = alb_ingress(aws)
    ssh = [{"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}]
    aws.client("ec2").authorize_security_group_ingress(GroupId=group_id, IpPermissions=ssh)
    stale = subprocess.run([*command, "--plan", str(saved)], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert stale.returncode == 3 and "differs from the diff reviewed" in stale.stderr, stale.stderr
    assert group(aws)["DesiredCapacity"] == 2
    aws.client("ec2").revoke_security_group_ingress(GroupId=group_id, IpPermissions=ssh)
    reviewed = subprocess.run(
        [*command, "--plan", str(saved)], capture_output=True, text=True, stdin=subprocess.DEVNULL
    )
    assert reviewed.returncode == 0, reviewed.stderr  # no question: the diff was reviewed
    assert group(aws)["DesiredCapacity"] == 3


@pytest.fixture
def instance_refresh(monkeypatch):
    """moto 5.2.5 gap (test-only emulator extension): StartInstanceRefresh is not implemented. This one does what
    AWS's rolling refresh leaves behind: every instance of the group replaced by one launched from the group's
    current launch template version. It records the request so the test can read its preferences. Second gap: a
    version made by CreateLaunchTemplateVersion keeps its UserData as a plain string, which moto's own launch code
    refuses (it expects the wrapper CreateLaunchTemplate gives it); the versions are wrapped the same way first."""
    import uuid

    from moto.autoscaling.responses import AutoScalingResponse
    from moto.core.responses import ActionResult
    from moto.core.types import Base64EncodedString

    started: list[dict] = []

    def start_instance_refresh(self):
        name = self._get_param("AutoScalingGroupName")
        started.append({"name": name, "preferences": self._get_param("Preferences", {})})
        group = self.autoscaling_backend.autoscaling_groups[name]
        for version in group.ec2_launch_template.versions:  # second gap: see the docstring
            if isinstance(version.data.get("UserData"), str):
                version.data["UserData"] = Base64EncodedString(version.data["UserData"])
        desired = group.desired_capacity
        group.set_desired_capacity(0)
        group.set_desired_capacity(desired)
        return ActionResult({"InstanceRefreshId": str(uuid.uuid4())})

    monkeypatch.setattr(AutoScalingResponse, "start_instance_refresh", start_instance_refresh, raising=False)
    return started


def test_a_changed_artifact_rolls_the_fleet_and_an_unchanged_one_touches_nothing(
    world,
    artifact,
    tmp_path,
    aws,
    instance_refresh,  # noqa: F811
):
    import shutil

    loaded, zone = world
    state = StateStore(tmp_path / "state.db")
    apply_once(loaded, state, artifact)
    old = {i["InstanceId"] for i in group(aws)["Instances"]}
    _, t = apply_once(loaded, state, artifact)
    assert operations(t) == [] and instance_refresh == []  # unchanged: no upload, no call that changes anything

    changed = tmp_path / "artifact-v2"
    shutil.copytree(artifact, changed)
    (changed / "README.txt").write_text("a retrained model\n")
    _, t = apply_once(loaded, state, changed)
    made = operations(t)
    assert made[0] == "PutObject" and "StartInstanceRefresh" in made, made
    assert not any(op.startswith(DELETES) for op in made), made
    assert (
        made.index("CreateLaunchTemplateVersion")
        < made.index("UpdateAutoScalingGroup")
        < made.index("StartInstanceRefresh")
    )
    # Launch before terminate: every instance keeps serving until its replacement is healthy.
    assert [r["name"] for r in instance_refresh] == [f"{NAME}-asg"]
    preferences = instance_refresh[0]["preferences"]
    assert (preferences["MinHealthyPercentage"], preferences["MaxHealthyPercentage"]) == (100, 200)
    now = group(aws)
    assert now["LaunchTemplate"]["Version"] == "2"
    assert {i["InstanceId"] for i in now["Instances"]}.isdisjoint(old) and len(now["Instances"]) == len(old)
