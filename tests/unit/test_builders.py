"""AWS request builders as data: every request valid against botocore, refs and dependencies consistent,
ownership tags at creation, least-privilege network rules, and the Neuron/SageMaker specifics."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest

from neurondeploy.errors import PlanError
from neurondeploy.planner.checks import run_checks
from neurondeploy.planner.context import plan_context
from neurondeploy.resources.deployment import deployment_resources
from neurondeploy.resources.graph import check_resources, creation_order
from neurondeploy.resources.model import PlanContext, Request, Resource, extract_outputs
from neurondeploy.resources.naming import DEPLOYMENT_TAG, MANAGED_BY_TAG
from neurondeploy.resources.refs import find_refs, is_ref, ref
from neurondeploy.resources.tags import EXECUTOR_REFS
from neurondeploy.resources.validation import validate_request
from neurondeploy.specs import InferenceSpec, TrainingSpec, load_spec

REPO = Path(__file__).parents[2]
NAME24 = "abcdefghij-klmnopqrst-uv"
TOOLKIT = {"toolkit_sha256": "ab" * 32, "toolkit_constraints_sha256": "cd" * 32}  # a wheel's, as plan_context gives
CTX = PlanContext(
    run_id="r20260901-1", serving_image_uri="111122223333.dkr.ecr.us-east-1.amazonaws.com/neurondeploy:0.1.0", **TOOLKIT
)


def ec2_tls_spec(**network) -> InferenceSpec:
    return InferenceSpec.model_validate(
        {
            "kind": "inference",
            "name": NAME24,
            "task": "feature-extraction",
            "model": {"path": "model"},
            "tags": {"team": "ml"},
            "deployment": {
                "platform": "ec2",
                "instance_type": "inf2.xlarge",
                "instance_count": 2,
                "autoscaling": {"min_instances": 1, "max_instances": 4},
            },
            "network": {
                "instance_subnets": "private",
                "allowed_cidrs": ["203.0.113.0/24", "198.51.100.0/24"],
                **network,
            },
            "dns": {"hosted_zone_id": "Z0123456789ABC", "zone_name": "example.com", "record_name": "api.example.com"},
            "tls": {},
        }
    )


def endpoint_spec(instance_type: str = "inf2.xlarge", **deployment) -> InferenceSpec:
    return InferenceSpec.model_validate(
        {
            "kind": "inference",
            "name": NAME24,
            "task": "text-classification",
            "model": {"path": "model"},
            "deployment": {
                "instance_type": instance_type,
                "autoscaling": {"min_instances": 1, "max_instances": 3},
                **deployment,
            },
        }
    )


def llm_spec(kind: str, **container) -> InferenceSpec:
    return InferenceSpec.model_validate(
        {
            "kind": "inference",
            "name": "llama",
            "task": "text-generation",
            "model": {"hf_model_id": "meta-llama/Llama-3.1-8B-Instruct"},
            "compile": {"batch_sizes": [4], "sequence_lengths": [4096]},
            "deployment": {
                "instance_type": "inf2.48xlarge",
                "tensor_parallel": 24,
                "container": {"kind": kind, **container},
            },
        }
    )


def training_spec(instance_type: str = "trn1.32xlarge", **extra) -> TrainingSpec:
    return TrainingSpec.model_validate(
        {
            "kind": "training",
            "name": NAME24,
            "entry_point": "train.py",
            "instance_type": instance_type,
            "instance_count": 2,
            "distribution": {"tensor_parallel": 8, "zero1": True},
            "checkpoint": {"s3_uri": "s3://my-bucket/ckpt"},
            "spot": {"enabled": True, "max_wait_s": 172800},
            "inputs": {"train": {"s3_uri": "s3://my-bucket/data/train", "distribution": "ShardedByS3Key"}},
            "compile_cache_uri": "s3://my-bucket/neuron-cache",
            "hyperparameters": {"lr": 0.0003, "epochs": 3},
            **extra,
        }
    )


SPECS = {
    "ec2-tls": ec2_tls_spec,
    "sagemaker-inf2": endpoint_spec,
    "sagemaker-hf-vllm": lambda: llm_spec("hf-vllm"),
    "sagemaker-hf-tgi": lambda: llm_spec("hf-tgi"),
    "training-trn1-spot": training_spec,
}


@pytest.fixture(scope="module", params=sorted(SPECS))
def built(request) -> tuple[object, list[Resource]]:
    spec = SPECS[request.param]()
    return spec, deployment_resources(spec, CTX)


def by_name(resources: list[Resource]) -> dict[str, Resource]:
    return {r.name: r for r in resources}


def first(resources: list[Resource], operation: str) -> Request:
    return next(q for r in resources for q in r.create if q.operation == operation)


# --- every spec ----------------------------------------------------------------------------------------


def test_every_request_passes_strict_validation(built):
    _, resources = built
    problems = [
        f"{r.name} {q.operation}: {p}"
        for r in resources
        for q in r.create + r.delete + r.update  # updates in place are sent too
        for p in validate_request(q.service, q.operation, q.params)
    ]
    assert problems == []


def test_every_wait_is_a_botocore_waiter_with_valid_params(built):
    import botocore.session

    session = botocore.session.get_session()
    _, resources = built
    for r in resources:
        for q in r.create + r.delete:
            if q.wait:
                service = q.wait.service or q.service
                operation = session.get_waiter_model(service).get_waiter(q.wait.waiter).operation
                assert validate_request(service, operation, q.wait.params) == [], (r.name, q.wait)


def test_every_ref_names_an_existing_output_of_a_resource_depended_on(built):
    _, resources = built
    index = by_name(resources)
    for r in resources:
        reachable, stack = set(), list(r.depends_on)
        while stack:
            name = stack.pop()
            if name not in reachable:
                reachable.add(name)
                stack.extend(index[name].depends_on)  # KeyError: depends on a resource that does not exist
        for resource_name, attribute in r.refs() - EXECUTOR_REFS:  # ${state.Lineage}: the executor's
            assert resource_name == r.name or resource_name in reachable, (r.name, resource_name)
            outputs = {k for q in index[resource_name].create for k in q.outputs}
            assert attribute in outputs, (r.name, resource_name, attribute)


def test_dependency_graph_is_acyclic(built):
    _, resources = built
    remaining = {r.name: set(r.depends_on) for r in resources}
    while remaining:
        ready = [name for name, deps in remaining.items() if not deps & remaining.keys()]
        assert ready, f"cycle among {sorted(remaining)}"
        for name in ready:
            del remaining[name]


def test_checker_agrees_and_names_are_unique(built):
    _, resources = built
    assert check_resources(resources) == []
    assert len({r.name for r in resources}) == len(resources)
    assert [r.name for r in creation_order(resources)][0] in {r.name for r in resources if not r.depends_on}


def _creation_tags(request: Request) -> list[dict[str, str]]:
    """Every tag set the creating request attaches (several for a launch template: itself, instances, volumes)."""
    params = request.params
    sets = []
    for spec in params.get("TagSpecifications", []) + params.get("LaunchTemplateData", {}).get("TagSpecifications", []):
        sets.append({t["Key"]: t["Value"] for t in spec["Tags"]})
    tags = params.get("Tags")
    if isinstance(tags, dict):
        sets.append(tags)
    elif isinstance(tags, list):
        sets.append({t["Key"]: t["Value"] for t in tags})
    return sets


def test_taggable_resources_carry_ownership_tags_at_creation(built):
    spec, resources = built
    for r in resources:
        if not r.taggable:
            continue
        sets = _creation_tags(r.create[0])
        assert sets, f"{r.name} is taggable but its first request sets no tags"
        for tags in sets:
            assert tags.get(DEPLOYMENT_TAG) == spec.name and tags.get(MANAGED_BY_TAG) == "neurondeploy", r.name
            assert all(tags.get(k) == v for k, v in spec.tags.items()), r.name


def test_only_untaggable_kinds_skip_tags(built):
    _, resources = built
    untagged = {r.type for r in resources if not r.taggable}
    # the VPC's default security group is AWS's, made and deleted with the VPC: tagged, the sweep would try to delete it
    untaggable = {"route53:record", "ec2:route-table-association", "ec2:security-group-ingress"}
    assert untagged <= untaggable | {"ec2:default-security-group"} | {r.type for r in resources if r.is_lookup}
    assert all(not r.delete and not r.taggable for r in resources if r.is_lookup)


def test_every_created_resource_can_be_deleted(built):
    _, resources = built
    # the VPC's default security group goes with the VPC (AWS deletes it with it)
    assert [r.name for r in resources if not r.is_lookup and not r.delete] in ([], ["vpc-default-sg"])


# --- EC2 --------------------------------------------------------------------------------------------------


def ec2_resources(spec=None):
    return deployment_resources(spec or ec2_tls_spec(), CTX)


def test_instance_security_group_admits_only_the_alb_group_on_the_serving_port():
    index = by_name(ec2_resources())
    ingress = [q for q in index["sg-instances"].create if q.operation == "AuthorizeSecurityGroupIngress"]
    permissions = [p for q in ingress for p in q.params["IpPermissions"]]
    assert permissions and all(
        p["IpProtocol"] == "tcp"
        and p["FromPort"] == p["ToPort"] == 8080
        and not p.get("IpRanges")
        and not p.get("Ipv6Ranges")
        and [g["GroupId"] for g in p["UserIdGroupPairs"]] == [ref("sg-alb", "GroupId")]
        for p in permissions
    )
    all_ports = {
        p.get("FromPort")
        for r in index.values()
        for q in r.create
        if q.operation == "AuthorizeSecurityGroupIngress"
        for p in q.params["IpPermissions"]
    }
    assert 22 not in all_ports


def test_alb_admits_only_allowed_cidrs_on_80_and_443_and_reaches_only_instances():
    spec = ec2_tls_spec()
    index = by_name(ec2_resources(spec))
    # The ingress is its own resource, converged in place when allowed_cidrs changes (the group stays).
    assert not any(q.operation == "AuthorizeSecurityGroupIngress" for q in index["sg-alb"].create)
    permissions = [
        p
        for q in index["sg-alb-ingress"].create
        if q.operation == "AuthorizeSecurityGroupIngress"
        for p in q.params["IpPermissions"]
    ]
    assert index["sg-alb-ingress"].create[0].params["GroupId"] == ref("sg-alb", "GroupId")
    assert sorted(p["FromPort"] for p in permissions) == [80, 443]
    for p in permissions:
        assert p["FromPort"] == p["ToPort"] and not p.get("UserIdGroupPairs") and not p.get("Ipv6Ranges")
        assert [r["CidrIp"] for r in p["IpRanges"]] == spec.network.allowed_cidrs
    revoke = next(q for q in index["sg-alb"].create if q.operation == "RevokeSecurityGroupEgress")
    assert revoke.params["IpPermissions"][0]["IpRanges"] == [{"CidrIp": "0.0.0.0/0"}]
    egress = index["sg-alb-egress"].create[0].params["IpPermissions"]
    assert egress == [
        {
            "IpProtocol": "tcp",
            "FromPort": 8080,
            "ToPort": 8080,
            "UserIdGroupPairs": [{"GroupId": ref("sg-instances", "GroupId"), "Description": "instances"}],
        }
    ]


def test_tls_listeners_certificate_and_dns():
    resources = ec2_resources()
    index = by_name(resources)
    https = index["listener-https"].create[0].params
    assert https["Protocol"] == "HTTPS" and https["Port"] == 443
    assert https["Certificates"] == [{"CertificateArn": ref("certificate", "CertificateArn")}]
    assert "cert-validation-record" in index["listener-https"].depends_on  # only a validated certificate attaches
    http = index["listener-http"].create[0].params
    assert (
        http["DefaultActions"][0]["Type"] == "redirect"
        and http["DefaultActions"][0]["RedirectConfig"]["Protocol"] == "HTTPS"
    )
    assert index["certificate"].create[0].params["ValidationMethod"] == "DNS"
    validation = index["cert-validation-record"].create[0]
    record = validation.params["ChangeBatch"]["Changes"][0]["ResourceRecordSet"]
    assert record["Name"] == ref("certificate", "ValidationRecordName") and record["Type"] == "CNAME"
    assert validation.wait.waiter == "CertificateValidated"
    owner = index["dns-owner"].create[0].params["ChangeBatch"]["Changes"][0]
    assert owner["Action"] == "CREATE" and owner["ResourceRecordSet"]["Name"] == "_neurondeploy.api.example.com"
    # Records cannot be tagged: the ownership TXT names the deployment and the state (lineage) that owns it.
    assert owner["ResourceRecordSet"]["ResourceRecords"] == [
        {"Value": f'"deployment={NAME24}" "lineage=${{state.Lineage}}"'}
    ]
    alias = index["dns-alias"].create[0].params["ChangeBatch"]["Changes"][0]["ResourceRecordSet"]
    assert alias["AliasTarget"]["DNSName"] == ref("alb", "DNSName") and "dns-owner" in index["dns-alias"].depends_on
    target_group = index["target-group"].create[0].params
    assert (target_group["HealthCheckPath"], target_group["Matcher"], target_group["Port"]) == (
        "/ping",
        {"HttpCode": "200"},
        8080,
    )


def plain_ec2_spec(**network) -> InferenceSpec:
    """An EC2 deployment without TLS or DNS, every network field at its default unless given."""
    return InferenceSpec.model_validate(
        {
            "kind": "inference",
            "name": "plain",
            "task": "feature-extraction",
            "model": {"path": "m"},
            "deployment": {"platform": "ec2"},
            "network": network,
        }
    )


def test_without_tls_http_forwards_and_only_80_is_open():
    resources = deployment_resources(plain_ec2_spec(), CTX)
    index = by_name(resources)
    assert "listener-https" not in index and "certificate" not in index and "dns-alias" not in index
    assert index["listener-http"].create[0].params["DefaultActions"][0]["Type"] == "forward"
    assert [p["FromPort"] for p in index["sg-alb-ingress"].create[0].params["IpPermissions"]] == [80]
    assert "nat" in index and "subnet-private-2" in index  # instances are private unless the spec says public
    assert check_resources(resources) == []


def test_public_instance_subnets_are_an_opt_out_without_nat_and_with_a_warning():
    spec = plain_ec2_spec(instance_subnets="public", empty_default_security_group=False)
    index = by_name(deployment_resources(spec, CTX))
    assert "nat" not in index and "subnet-private-1" not in index and "vpc-default-sg" not in index
    assert index["asg"].create[0].params["VPCZoneIdentifier"].startswith(ref("subnet-public-1", "SubnetId"))
    assert any(q.operation == "ModifySubnetAttribute" for q in index["subnet-public-1"].create)
    from neurondeploy.planner.checks import check_network_exposure

    fields = [f.field for f in check_network_exposure(type("Loaded", (), {"spec": spec})())]
    assert fields == ["network.instance_subnets", "network.empty_default_security_group"]


def test_flow_logs_are_an_option_delivered_to_the_shared_bucket():
    assert "flow-logs" not in by_name(ec2_resources())  # off by default: billed per GB
    spec = ec2_tls_spec(flow_logs="rejected")
    (create,) = by_name(ec2_resources(spec))["flow-logs"].create
    assert create.params["ResourceIds"] == [ref("vpc", "VpcId")] and create.params["TrafficType"] == "REJECT"
    bucket = f"neurondeploy-{ref('account', 'Account')}-{spec.region}"
    assert create.params["LogDestination"] == f"arn:aws:s3:::{bucket}/{spec.name}/flow-logs/"
    assert validate_request("ec2", "CreateFlowLogs", create.params) == []


def test_the_vpc_default_security_group_is_emptied_of_both_default_rules():
    index = by_name(ec2_resources())
    group = index["vpc-default-sg"]
    describe, ingress, egress = group.create
    assert {f["Name"]: f["Values"] for f in describe.params["Filters"]} == {
        "vpc-id": [ref("vpc", "VpcId")],
        "group-name": ["default"],
    }
    own = ref("vpc-default-sg", "GroupId")
    assert ingress.params["IpPermissions"] == [{"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": own}]}]
    assert egress.params["IpPermissions"] == [{"IpProtocol": "-1", "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}]
    assert group.depends_on == ("vpc",) and group.delete == ()
    assert not any(q.operation == "ModifySubnetAttribute" for q in index["subnet-public-1"].create)


def test_private_instances_sit_behind_one_nat_gateway_and_wait_for_routes():
    index = by_name(ec2_resources())
    asg = index["asg"]
    assert (
        asg.create[0].params["VPCZoneIdentifier"]
        == f"{ref('subnet-private-1', 'SubnetId')},{ref('subnet-private-2', 'SubnetId')}"
    )
    assert {"rt-private", "rta-private-1", "rta-private-2"} <= set(asg.depends_on)
    assert index["nat"].hourly_usd == 0.045 and index["alb"].hourly_usd == 0.0225
    assert index["rt-private"].create[1].params["NatGatewayId"] == ref("nat", "NatGatewayId")


def test_launch_template_imdsv2_encrypted_no_ssh_and_user_data():
    index = by_name(ec2_resources())
    data = index["launch-template"].create[0].params["LaunchTemplateData"]
    assert data["MetadataOptions"]["HttpTokens"] == "required"
    assert data["BlockDeviceMappings"][0]["Ebs"]["Encrypted"] is True
    assert "KeyName" not in data and data["ImageId"] == ref("ami", "ImageId")
    script = base64.b64decode(data["UserData"]).decode()
    assert script.startswith("#!/bin/bash") and "systemctl enable --now neurondeploy.service" in script
    assert "/opt/aws_neuronx_venv_pytorch_2_9/bin/pip install" in script and "neurondeploy serve" in script
    assert index["ami"].create[0].params == {
        "Name": "/aws/service/neuron/dlami/pytorch-2.9/ubuntu-24.04/latest/image_id"
    }


def test_autoscaling_tracks_alb_requests_per_target():
    index = by_name(ec2_resources())
    create = index["asg"].create[0].params
    assert (create["MinSize"], create["MaxSize"], create["DesiredCapacity"]) == (1, 4, 2)
    policy = index["asg"].create[1].params["TargetTrackingConfiguration"]["PredefinedMetricSpecification"]
    assert policy == {
        "PredefinedMetricType": "ALBRequestCountPerTarget",
        "ResourceLabel": f"{ref('alb', 'FullName')}/{ref('target-group', 'FullName')}",
    }


def test_resource_label_outputs_come_from_the_arns():
    index = by_name(ec2_resources())
    alb = extract_outputs(
        index["alb"].create[0],
        {
            "LoadBalancers": [
                {
                    "LoadBalancerArn": "arn:aws:elasticloadbalancing:us-east-1:111122223333:loadbalancer/app/x-alb/50dc6c495c0c9188"
                }
            ]
        },
    )
    group = extract_outputs(
        index["target-group"].create[0],
        {
            "TargetGroups": [
                {
                    "TargetGroupArn": "arn:aws:elasticloadbalancing:us-east-1:111122223333:targetgroup/x-tg/73e2d6bc24d8a067"
                }
            ]
        },
    )
    assert alb["FullName"] == "app/x-alb/50dc6c495c0c9188"
    assert group["FullName"] == "targetgroup/x-tg/73e2d6bc24d8a067"


def test_existing_vpc_creates_no_network():
    spec = ec2_tls_spec(
        vpc_id="vpc-0123456789abcdef0",
        public_subnet_ids=["subnet-0aaaaaaaaaaaaaaaa", "subnet-0bbbbbbbbbbbbbbbb"],
        instance_subnet_ids=["subnet-0cccccccccccccccc"],
    )
    resources = deployment_resources(spec, CTX)
    assert not {r.type for r in resources} & {"ec2:vpc", "ec2:subnet", "ec2:nat-gateway", "ec2:internet-gateway"}
    index = by_name(resources)
    assert index["alb"].create[0].params["Subnets"] == spec.network.public_subnet_ids
    assert index["asg"].create[0].params["VPCZoneIdentifier"] == "subnet-0cccccccccccccccc"
    assert check_resources(resources) == []


def test_given_availability_zones_and_account_skip_the_lookups():
    resources = deployment_resources(
        ec2_tls_spec(),
        PlanContext(availability_zones=("us-east-1c", "us-east-1d"), account_id="111122223333", **TOOLKIT),
    )
    index = by_name(resources)
    assert "azs" not in index and index["subnet-public-2"].create[0].params["AvailabilityZone"] == "us-east-1d"
    assert "account" not in index and check_resources(resources) == []
    assert "111122223333" in index["instance-role"].create[1].params["PolicyDocument"]


def test_shared_bucket_is_private_and_never_destroyed():
    from neurondeploy.resources.s3 import shared_bucket_resource

    bucket = shared_bucket_resource("eu-west-1", PlanContext(account_id="111122223333"))
    assert bucket.delete == ()
    assert bucket.create[0].params == {
        "Bucket": "neurondeploy-111122223333-eu-west-1",
        "CreateBucketConfiguration": {"LocationConstraint": "eu-west-1"},
    }
    assert all(validate_request(q.service, q.operation, q.params) == [] for q in bucket.create)
    assert bucket.create[1].params["PublicAccessBlockConfiguration"]["BlockPublicPolicy"] is True


def test_shared_bucket_refuses_plain_http_is_versioned_and_expires_old_versions():
    import json

    from neurondeploy.aws.policy_evaluation import Authorization, decision
    from neurondeploy.resources.s3 import shared_bucket_resource

    bucket = shared_bucket_resource("us-gov-west-1", PlanContext(account_id="111122223333"))
    requests = {q.operation: q.params for q in bucket.create}
    policy = json.loads(requests["PutBucketPolicy"]["Policy"])
    name = "neurondeploy-111122223333-us-gov-west-1"
    for resource in (f"arn:aws-us-gov:s3:::{name}", f"arn:aws-us-gov:s3:::{name}/models/x.tar.gz"):
        for action in ("s3:GetObject", "s3:PutObject", "s3:ListBucket", "s3:DeleteBucketPolicy"):
            plain = Authorization(action, resource, {"aws:SecureTransport": "false"})
            tls = Authorization(action, resource, {"aws:SecureTransport": "true"})
            assert (decision(policy, plain), decision(policy, tls)) == ("explicit deny", "implicit deny")
    assert requests["PutBucketVersioning"]["VersioningConfiguration"] == {"Status": "Enabled"}
    (rule,) = requests["PutBucketLifecycleConfiguration"]["LifecycleConfiguration"]["Rules"]
    assert rule["Status"] == "Enabled" and rule["NoncurrentVersionExpiration"] == {"NoncurrentDays": 30}
    assert all(validate_request(q.service, q.operation, q.params) == [] for q in bucket.create)


def test_names_fit_aws_limits_for_a_24_character_spec_name():
    limits = {
        "LoadBalancerName": 32,
        "Name": 32,
        "RoleName": 64,
        "InstanceProfileName": 128,
        "LaunchTemplateName": 128,
        "AutoScalingGroupName": 255,
        "GroupName": 255,
        "ModelName": 63,
        "EndpointConfigName": 63,
        "EndpointName": 63,
        "TrainingJobName": 63,
    }
    checked = set()
    for make in SPECS.values():
        spec = make()
        for r in deployment_resources(spec, CTX):
            for q in r.create:
                for key, limit in limits.items():
                    value = q.params.get(key)
                    if isinstance(value, str) and not find_refs(value) and q.operation.startswith("Create"):
                        assert len(value) <= limit, (q.operation, key, value)
                        checked.add(key)
    assert checked >= {"Name", "RoleName", "ModelName", "EndpointConfigName", "TrainingJobName", "LaunchTemplateName"}


# --- SageMaker endpoints ------------------------------------------------------------------------------------


def variant(resources) -> dict:
    return first(resources, "CreateEndpointConfig").params["ProductionVariants"][0]


def test_inf2_endpoint_sends_volume_and_neuron_ami():
    resources = deployment_resources(endpoint_spec(), CTX)
    v = variant(resources)
    assert v["VolumeSizeInGB"] == 30 and v["InstanceType"] == "ml.inf2.xlarge"
    assert v["InferenceAmiVersion"] == "al2-ami-sagemaker-inference-neuron-2"
    model = first(resources, "CreateModel").params
    assert model["PrimaryContainer"]["ModelDataUrl"].endswith(".tar.gz")
    assert model["PrimaryContainer"]["Image"] == CTX.serving_image_uri


def test_trn1_endpoint_never_sends_volume_size():
    assert "VolumeSizeInGB" not in variant(deployment_resources(endpoint_spec("trn1.2xlarge", volume_gib=100), CTX))


def test_volume_grows_with_model_size_and_is_capped():
    assert (
        variant(deployment_resources(endpoint_spec(), PlanContext(serving_image_uri="x", model_size_gib=40.2)))[
            "VolumeSizeInGB"
        ]
        == 121
    )
    assert (
        variant(deployment_resources(endpoint_spec(), PlanContext(serving_image_uri="x", model_size_gib=400)))[
            "VolumeSizeInGB"
        ]
        == 512
    )
    assert variant(deployment_resources(endpoint_spec(volume_gib=64), CTX))["VolumeSizeInGB"] == 64
    with pytest.raises(PlanError):
        deployment_resources(endpoint_spec(volume_gib=600), CTX)


def test_endpoint_autoscaling_tracks_invocations_per_instance():
    index = by_name(deployment_resources(endpoint_spec(), CTX))
    register, policy = (q.params for q in index["endpoint-scaling"].create)
    assert register["ResourceId"] == f"endpoint/{NAME24}/variant/AllTraffic"
    assert register["ScalableDimension"] == "sagemaker:variant:DesiredInstanceCount"
    assert policy["TargetTrackingScalingPolicyConfiguration"]["PredefinedMetricSpecification"] == {
        "PredefinedMetricType": "SageMakerVariantInvocationsPerInstance"
    }
    assert "endpoint" in index["endpoint-scaling"].depends_on


def test_hf_vllm_environment():
    resources = deployment_resources(llm_spec("hf-vllm"), CTX)
    container = first(resources, "CreateModel").params["PrimaryContainer"]
    assert container["Environment"] == {
        "SM_ON_MODEL": "meta-llama/Llama-3.1-8B-Instruct",
        "SM_ON_TENSOR_PARALLEL_SIZE": "24",
        "SM_ON_BATCH_SIZE": "4",
        "SM_ON_SEQUENCE_LENGTH": "4096",
        "SM_ON_PORT": "8080",
    }
    assert "huggingface-vllm-inference-neuronx" in container["Image"] and "ModelDataUrl" not in container
    assert variant(resources)["VolumeSizeInGB"] == 512  # weights come from the Hub; size unknown


def test_hf_tgi_environment_uses_current_names():
    env = first(deployment_resources(llm_spec("hf-tgi"), CTX), "CreateModel").params["PrimaryContainer"]["Environment"]
    assert env["MAX_BATCH_SIZE"] == "4" and env["MAX_TOTAL_TOKENS"] == "4096" and env["MAX_INPUT_TOKENS"] == "2048"
    assert env["HF_NUM_CORES"] == "24" and env["HF_AUTO_CAST_TYPE"] == "bf16" and env["HF_MODEL_ID"]
    assert not {"HF_BATCH_SIZE", "HF_SEQUENCE_LENGTH"} & env.keys()


def test_hf_tgi_refuses_obsolete_variables():
    with pytest.raises(PlanError, match="HF_BATCH_SIZE"):
        deployment_resources(llm_spec("hf-tgi", env={"HF_BATCH_SIZE": "4"}), CTX)


def test_execution_role_is_scoped_and_skipped_when_given():
    index = by_name(deployment_resources(endpoint_spec(), CTX))
    policy = json.loads(index["execution-role"].create[1].params["PolicyDocument"])
    actions = {a for s in policy["Statement"] for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
    assert not any(a.endswith("*") for a in actions)
    read = next(s for s in policy["Statement"] if s["Sid"] == "ReadS3")
    assert read["Resource"] == [f"arn:aws:s3:::neurondeploy-{ref('account', 'Account')}-us-east-1/{NAME24}/artifact/*"]
    given = endpoint_spec().model_copy(
        update={"iam": endpoint_spec().iam.model_copy(update={"role_arn": "arn:aws:iam::111122223333:role/existing"})}
    )
    resources = deployment_resources(given, CTX)
    assert "execution-role" not in by_name(resources)
    assert first(resources, "CreateModel").params["ExecutionRoleArn"] == "arn:aws:iam::111122223333:role/existing"


def test_model_and_config_names_follow_their_content():
    one = first(deployment_resources(endpoint_spec(), CTX), "CreateModel").params["ModelName"]
    same = first(deployment_resources(endpoint_spec(), CTX), "CreateModel").params["ModelName"]
    other = first(
        deployment_resources(
            endpoint_spec(),
            PlanContext(serving_image_uri="111122223333.dkr.ecr.us-east-1.amazonaws.com/neurondeploy:0.2.0"),
        ),
        "CreateModel",
    ).params["ModelName"]
    assert one == same != other


def test_vpc_config_with_existing_subnets_gets_its_own_group():
    spec = InferenceSpec.model_validate(
        {
            "kind": "inference",
            "name": "invpc",
            "task": "feature-extraction",
            "model": {"path": "m"},
            "network": {"vpc_id": "vpc-0123456789abcdef0", "instance_subnet_ids": ["subnet-0cccccccccccccccc"]},
        }
    )
    resources = deployment_resources(spec, CTX)
    assert first(resources, "CreateModel").params["VpcConfig"] == {
        "SecurityGroupIds": [ref("sg-sagemaker", "GroupId")],
        "Subnets": ["subnet-0cccccccccccccccc"],
    }
    assert not any(q.operation == "AuthorizeSecurityGroupIngress" for q in by_name(resources)["sg-sagemaker"].create)
    assert check_resources(resources) == []


# --- training -----------------------------------------------------------------------------------------------


def training_job(spec=None, ctx=CTX) -> dict:
    return first(deployment_resources(spec or training_spec(), ctx), "CreateTrainingJob").params


def test_training_job_request():
    job = training_job()
    assert job["TrainingJobName"] == f"{NAME24}-r20260901-1"
    assert job["ResourceConfig"] == {"InstanceType": "ml.trn1.32xlarge", "InstanceCount": 2}  # NVMe: no volume
    assert job["EnableManagedSpotTraining"] is True
    assert job["StoppingCondition"] == {"MaxRuntimeInSeconds": 86400, "MaxWaitTimeInSeconds": 172800}
    assert job["CheckpointConfig"] == {"S3Uri": "s3://my-bucket/ckpt", "LocalPath": "/opt/ml/checkpoints"}
    assert job["InputDataConfig"][0]["DataSource"]["S3DataSource"]["S3DataDistributionType"] == "ShardedByS3Key"
    assert job["AlgorithmSpecification"]["TrainingInputMode"] == "File"
    assert "pytorch-training-neuronx" in job["AlgorithmSpecification"]["TrainingImage"]
    hp = {k: json.loads(v) for k, v in job["HyperParameters"].items()}
    assert hp["sagemaker_program"] == "train.py" and hp["sagemaker_torch_distributed_enabled"] is True
    assert hp["tensor_parallel_size"] == 8 and hp["zero1"] is True and hp["lr"] == 0.0003
    assert job["HyperParameters"]["sagemaker_torch_distributed_enabled"] == "true"
    env = job["Environment"]
    assert env["NEURON_COMPILE_CACHE_URL"] == "s3://my-bucket/neuron-cache"
    assert "--auto-cast=none" in env["NEURON_CC_FLAGS"] and env["FI_PROVIDER"] == "efa"


def test_trn1n_multi_node_sets_efa_variables_the_container_misses():
    env = training_job(training_spec("trn1n.32xlarge"))["Environment"]
    assert env["FI_PROVIDER"] == "efa" and env["FI_EFA_USE_DEVICE_RDMA"] == "1" and env["FI_EFA_FORK_SAFE"] == "1"


def test_single_node_and_precision_environment():
    spec = TrainingSpec.model_validate(
        {
            "kind": "training",
            "name": "small",
            "entry_point": "t.py",
            "parallel_compile": True,
            "distribution": {"precision": "bf16-stochastic-rounding"},
        }
    )
    env = training_job(spec)["Environment"]
    assert "FI_PROVIDER" not in env and env["RUN_NEURON_PARALLEL_COMPILE"] == "1"
    assert env["NEURON_RT_STOCHASTIC_ROUNDING_EN"] == "1"
    assert "EnableManagedSpotTraining" not in training_job(spec)


def test_a_multi_node_job_encrypts_between_hosts_unless_the_spec_opts_out():
    assert training_job()["EnableInterContainerTrafficEncryption"] is True  # 2 hosts, the default
    single = training_spec(instance_count=1, distribution={"tensor_parallel": 8}, compile_cache_uri=None)
    assert "EnableInterContainerTrafficEncryption" not in training_job(single)  # nothing between containers
    assert "EnableInterContainerTrafficEncryption" not in training_job(training_spec(inter_container_encryption=False))


def test_plan_shows_the_encryption_and_warns_when_it_is_off(tmp_path):
    template = REPO / "templates" / "llama-pretrain-trn1-multinode.yaml"
    shown = subprocess.run(
        [sys.executable, "-m", "neurondeploy.cli", "plan", str(template)], capture_output=True, text=True, check=True
    )
    assert "traffic between hosts encrypted" in shown.stdout
    off = tmp_path / "off.yaml"
    off.write_text(template.read_text() + "inter_container_encryption: false\n")
    findings = [f for f in run_checks(load_spec(off)) if f.field == "inter_container_encryption"]
    assert [f.level for f in findings] == ["warning"] and "unencrypted" in findings[0].message


def test_training_refuses_clashing_hyperparameters_and_long_run_ids():
    with pytest.raises(PlanError, match="zero1"):
        training_job(training_spec(hyperparameters={"zero1": True}))
    with pytest.raises(PlanError, match="at most 63"):
        training_job(ctx=PlanContext(run_id="x" * 40))


def test_training_job_destroy_stops_it():
    index = by_name(deployment_resources(training_spec(), CTX))
    assert [q.operation for q in index["training-job"].delete] == ["StopTrainingJob"]
    role_policy = json.loads(index["execution-role"].create[1].params["PolicyDocument"])
    write = next(s for s in role_policy["Statement"] if s["Sid"] == "WriteS3")
    assert "arn:aws:s3:::my-bucket/ckpt/*" in write["Resource"]


# --- plumbing ---------------------------------------------------------------------------------------------------


def test_checker_catches_missing_dependency_unknown_output_and_cycle():
    a = Resource("a", "x:a", (Request("s", "Op", {"X": ref("b", "Id")}, {"Id": "Id"}),), (), ("c",))
    b = Resource("b", "x:b", (Request("s", "Op", {"Y": ref("a", "Nope")}, {"Id": "Id"}),), (), ("a",))
    c = Resource("c", "x:c", (Request("s", "Op", {}, {"Id": "Id"}),), (), ())
    problems = " | ".join(check_resources([a, b, c]))
    assert "a: uses ${b.Id} but does not depend on b" in problems
    assert "b: ${a.Nope}" in problems
    b_ok = Resource("b", "x:b", (Request("s", "Op", {}, {"Id": "Id"}),), (), ("a",))
    a_cycle = Resource("a", "x:a", (Request("s", "Op", {"X": ref("b", "Id")}, {"Id": "Id"}),), (), ("b",))
    assert any("cycle" in p for p in check_resources([a_cycle, b_ok]))


def test_plan_context_from_a_loaded_spec(tmp_path):
    from neurondeploy.specs import load_spec

    path = tmp_path / "spec.yaml"
    path.write_text("kind: training\nname: job\nentry_point: train.py\n")
    loaded = load_spec(path)
    ctx = plan_context(loaded)
    assert ctx.run_id == loaded.digest[:8]
    resources = deployment_resources(loaded, ctx)
    assert first(resources, "CreateTrainingJob").params["TrainingJobName"] == f"job-{loaded.digest[:8]}"
    assert "account" in by_name(resources)  # the default bucket's name needs the account id
    assert is_ref(first(resources, "CreateTrainingJob").params["RoleArn"])
