"""apply / re-apply / destroy of the EC2 + ALB + DNS + TLS template against a real moto server over HTTP."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support.ec2_deployment import (
    AMI_PARAMETER,
    NAME,
    FaultyTransport,
    apply_once,
    artifact_key,
    count_resources,
    fault_rounds,
    record_sets,
    tagged,
    transport,
    zone_and_spec,
)

from neurondeploy.engine.destroy import destroy
from neurondeploy.engine.executor import ApplyFailed, Executor
from neurondeploy.engine.state import StateStore
from neurondeploy.errors import NeurondeployError

pytestmark = [
    pytest.mark.integration,
    pytest.mark.usefixtures("cpu_standin"),
]  # CPU artifacts stand in for NEFFs, on purpose


def test_apply_creates_everything_reapply_sends_nothing_destroy_leaves_nothing(world, artifact, tmp_path, aws):
    loaded, zone = world
    state = StateStore(tmp_path / "state.db")
    result, first = apply_once(loaded, state, artifact)
    recorded = state.get(NAME)
    assert all(r.complete for r in recorded.resources.values())
    assert set(result.created) == set(recorded.resources)
    elbv2 = aws.client("elbv2")
    alb = elbv2.describe_load_balancers(Names=[f"{NAME}-alb"])["LoadBalancers"][0]
    listeners = {
        item["Port"]: item for item in elbv2.describe_listeners(LoadBalancerArn=alb["LoadBalancerArn"])["Listeners"]
    }
    assert listeners[443]["Protocol"] == "HTTPS" and listeners[443]["Certificates"]
    assert listeners[80]["DefaultActions"][0]["Type"] == "redirect"
    group = elbv2.describe_target_groups(Names=[f"{NAME}-tg"])["TargetGroups"][0]
    assert group["HealthCheckPath"] == "/ping"
    certificate = aws.client("acm").describe_certificate(
        CertificateArn=listeners[443]["Certificates"][0]["CertificateArn"]
    )
    assert certificate["Certificate"]["Status"] == "ISSUED"
    names = record_sets(aws, zone)
    assert ("embed.example.com.", "A") in names and ("_neurondeploy.embed.example.com.", "TXT") in names
    asg = aws.client("autoscaling").describe_auto_scaling_groups(AutoScalingGroupNames=[f"{NAME}-asg"])[
        "AutoScalingGroups"
    ][0]
    assert (asg["MinSize"], asg["MaxSize"]) == (2, 6) and group["TargetGroupArn"] in asg["TargetGroupARNs"]
    s3 = aws.client("s3")
    assert s3.head_object(Bucket="neurondeploy-123456789012-us-east-1", Key=artifact_key(artifact))
    # the shared bucket as moto holds it: TLS only, versioned, old versions expiring, private
    bucket = "neurondeploy-123456789012-us-east-1"
    policy = json.loads(s3.get_bucket_policy(Bucket=bucket)["Policy"])
    assert policy["Statement"][0]["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    assert s3.get_bucket_versioning(Bucket=bucket)["Status"] == "Enabled"
    rule = s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"][0]
    assert rule["NoncurrentVersionExpiration"]["NoncurrentDays"] == 30
    assert s3.get_public_access_block(Bucket=bucket)["PublicAccessBlockConfiguration"]["BlockPublicPolicy"]
    # the instance role carries the permissions boundary (infra/iam-boundary.json), as every role apply makes
    role = aws.client("iam").get_role(RoleName=recorded.resources["instance-role"].outputs["RoleName"])["Role"]
    assert role["PermissionsBoundary"] == {
        "PermissionsBoundaryType": "PermissionsBoundaryPolicy",
        "PermissionsBoundaryArn": "arn:aws:iam::123456789012:policy/neurondeploy/neurondeploy-boundary",
    }
    from neurondeploy.serving.client import resolve_target

    assert (
        resolve_target(NAME, str(tmp_path / "state.db")).address == "https://embed.example.com"
    )  # `invoke minilm-web`
    # status: the DNS name, the target group's health as the load balancer sees it, $/hour, age
    from neurondeploy.ops.status import deployment_status

    shown = deployment_status(state.get(NAME), wait_delay_s=0)
    targets = aws.client("elbv2").describe_target_health(TargetGroupArn=group["TargetGroupArn"])
    states = [t["TargetHealth"]["State"] for t in targets["TargetHealthDescriptions"]]
    assert shown["url"] == "https://embed.example.com" and shown["hourly_usd"] > 0
    assert shown["health"].startswith(f"{states.count('healthy')}/{len(states)} targets healthy")
    assert shown["age"] == "0 min" and shown["created"] and shown["last_change"]

    again, second = apply_once(loaded, state, artifact)
    print(f"fresh apply: {len(first.mutating_calls())} mutating calls; re-apply: {len(second.mutating_calls())}")
    assert second.mutating_calls() == [] and again.created == []

    from support.sagemaker import stored_under

    stored = {version["Key"] for version in stored_under(aws, NAME)}  # the artifact and the wheel the instances load
    assert any("/artifact/" in key for key in stored) and any("/toolkit-" in key for key in stored), stored
    t = transport()
    report = destroy(NAME, Executor(t, state), t, state)
    assert report.remaining == [] and stored_under(aws, NAME) == [] and report.objects.deleted == len(stored)
    assert tagged(transport(), zone) == []
    assert record_sets(aws, zone) == {("example.com.", "NS"), ("example.com.", "SOA")}
    assert state.get(NAME) is None


def test_destroy_deletes_dependents_before_what_they_depend_on(world, artifact, tmp_path):
    loaded, _ = world
    state = StateStore(tmp_path / "state.db")
    apply_once(loaded, state, artifact)
    recorded = state.get(NAME)
    order: list[str] = []
    executor = Executor(
        transport(), state, on_event=lambda m: order.append(m.split()[1]) if m.startswith("deleting") else None
    )
    executor.destroy_recorded(NAME)
    position = {name: index for index, name in enumerate(order)}
    assert set(position) == {n for n, r in recorded.resources.items() if r.completed}
    for name, resource in recorded.resources.items():
        for dependency in resource.depends_on:
            assert position[name] < position[dependency], f"{name} must go before {dependency}"
    # spot checks of the chain: the ASG (instances) before the ALB and target group, listeners before the
    # ALB, security groups after the ALB, subnets and gateway before the VPC
    assert position["asg"] < position["alb"] < position["sg-alb"] < position["vpc"]
    assert position["listener-https"] < position["certificate"] and position["igw"] < position["vpc"]


@pytest.mark.slow
@pytest.mark.every_k
def test_failing_any_mutating_call_then_reapplying_converges_and_destroy_leaves_nothing(world, artifact, tmp_path, aws):
    loaded, zone = world
    reference_state = StateStore(tmp_path / "reference.db")
    _, fresh = apply_once(loaded, reference_state, artifact)
    expected = count_resources(transport(), zone)
    expected_records = {
        name for name in record_sets(aws, zone) if not name[0].startswith("_") or "neurondeploy" in name[0]
    }
    t = transport()
    destroy(NAME, Executor(t, reference_state), t, reference_state)
    bucket, key = "neurondeploy-123456789012-us-east-1", artifact_key(artifact)
    # + the artifact's PutObject, the first mutating call of each round (the bucket exists after the reference)
    operations = [("s3", "PutObject")] + [(c.service, c.operation) for c in fresh.mutating_calls() if c.service != "s3"]
    assert len(operations) > 30
    for k in fault_rounds(operations):
        aws.client("s3").delete_object(Bucket=bucket, Key=key)  # so every round uploads it (and k=1 fails that)
        # moto gap: a zone keeps a journal of changes, and a CREATE identical to one in the journal is refused as
        # "already exists" even after the record was deleted (moto/route53/models.py). A new zone per round.
        loaded, zone = zone_and_spec(aws, tmp_path, f"round-{k}")
        state = StateStore(tmp_path / f"state-{k}.db")
        with pytest.raises(NeurondeployError, match="InjectedFault"):
            apply_once(loaded, state, artifact, t=FaultyTransport("us-east-1", k))
        apply_once(loaded, state, artifact)
        assert count_resources(transport(), zone) == expected, f"k={k}"
        assert {
            n for n in record_sets(aws, zone) if not n[0].startswith("_") or "neurondeploy" in n[0]
        } == expected_records, f"k={k}"
        t = transport()
        report = destroy(NAME, Executor(t, state), t, state)
        assert report.remaining == [] and tagged(transport(), zone) == [], f"k={k} leaked {report.remaining}"
        assert record_sets(aws, zone) == {("example.com.", "NS"), ("example.com.", "SOA")}, f"k={k}"


# AddRoleToInstanceProfile: a resource's second request (the profile is half-made); CreateLaunchTemplate: late,
# with most of the network, the ALB and the roles made before it
@pytest.mark.parametrize("operation", ["AddRoleToInstanceProfile", "CreateLaunchTemplate"])
def test_rollback_deletes_what_the_failed_apply_created(world, artifact, tmp_path, aws, operation):
    loaded, zone = world
    state = StateStore(tmp_path / "state.db")
    with pytest.raises(ApplyFailed, match=f"{operation}: InjectedFault"):
        apply_once(loaded, state, artifact, t=FaultyTransport("us-east-1", operation=operation), rollback=True)
    assert tagged(transport(), zone) == []
    assert all(not r.completed for r in state.get(NAME).resources.values()) if state.get(NAME) else True


def test_an_apply_while_another_holds_the_deployment_is_refused_and_state_stays_consistent(world, artifact, tmp_path):
    loaded, _ = world
    state_file = tmp_path / "state.db"
    command = [
        sys.executable,
        "-m",
        "neurondeploy.cli",
        "apply",
        loaded.source.file,
        "--artifact",
        str(artifact),
        "--ami-ssm-parameter",
        AMI_PARAMETER,
        "--state",
        str(state_file),
        "--wait-delay-s",
        "1",
        "--yes",  # no terminal here: apply refuses without it
        "--json",
        "--no-smoke",  # moto runs no load balancer to send it through (test_smoke.py covers it)
    ]
    state = StateStore(state_file)
    with state.lock(NAME, "us-east-1", "inference"):  # this process is the apply that runs
        refused = subprocess.run(command, capture_output=True, text=True, env=os.environ.copy())
        assert refused.returncode == 5
        assert (
            f"deployment {NAME} is being changed by pid {os.getpid()}" in refused.stderr
            and "Traceback" not in refused.stderr
        )
        assert state.get(NAME).resources == {}  # the refused apply touched nothing
    first = subprocess.run(command, capture_output=True, text=True, check=True)
    assert json.loads(first.stdout)["mutating_calls"] > 30
    assert all(r.complete for r in state.get(NAME).resources.values())
    again = subprocess.run(command, capture_output=True, text=True, check=True)
    assert json.loads(again.stdout)["mutating_calls"] == 0


def test_drift_reports_what_changed_outside_the_tool_from_state_alone(world, artifact, tmp_path, aws):
    from neurondeploy.engine.drift import drift

    loaded, _ = world
    state = StateStore(tmp_path / "state.db")
    apply_once(loaded, state, artifact)
    assert drift(NAME, transport(), state) == []
    aws.client("autoscaling").update_auto_scaling_group(AutoScalingGroupName=f"{NAME}-asg", MaxSize=9)
    group_id = state.get(NAME).resources["sg-instances"].outputs["GroupId"]
    aws.client("ec2").authorize_security_group_ingress(
        GroupId=group_id,
        IpPermissions=[{"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}],
    )
    role = state.get(NAME).resources["instance-role"].outputs["RoleName"]
    aws.client("iam").delete_role_permissions_boundary(RoleName=role)  # an administrator's change
    items = drift(NAME, transport(), state)
    assert {(item.resource, item.kind) for item in items} == {
        ("asg", "changed"),
        ("sg-instances", "changed"),
        ("instance-role", "changed"),
    }, items
    assert any("permissions boundary" in item.detail for item in items if item.resource == "instance-role")
    assert any("MaxSize" in item.detail or "max" in item.detail.lower() for item in items if item.resource == "asg")
