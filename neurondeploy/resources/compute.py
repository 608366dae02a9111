"""EC2 serving instances: the DLAMI lookup, launch template (with user data), Auto Scaling group and policy.

AMI: ``ami`` (type ssm:parameter-lookup) reads the Neuron PyTorch DLAMI id from its public SSM parameter
once at apply, plus the image's root device name (Ubuntu and AL2023 differ). The id is then fixed in the
launch template. ``resolve:ssm:`` in the template would let a later scale-out boot a newer DLAMI whose
Neuron runtime no longer matches the compiled artifact.
"""

from __future__ import annotations

import base64
import json
import re
import shlex

from neurondeploy.catalog import replicas_per_instance
from neurondeploy.errors import PlanError
from neurondeploy.resources.kinds import TAGGED, Attr, Caller, Describe, Find, Kind, Scan, Sends, done, it, ours, tagged
from neurondeploy.resources.model import PlanContext, Request, Resource, requests_hash, resource
from neurondeploy.resources.naming import (
    DEPLOYMENT_TAG,
    aws_name,
    ec2_tags,
    ownership_tags,
    split_s3,
    tag_list,
    toolkit_prefix,
)
from neurondeploy.resources.refs import find_refs, ref
from neurondeploy.resources.retag import autoscaling_group_retag, ec2_retag
from neurondeploy.specs import InferenceSpec
from neurondeploy.specs.inference import SERVING_ENV, serving_env_value
from neurondeploy.specs.screening import control_character_problem

USER_DATA_MAX_BYTES = 16 * 1024  # EC2 limit, before base64
INSTALL_SECONDS = 300  # wheel download and pip install + service start, added to the ASG health-check grace period
ACCOUNT_REF = ref("account", "Account")
APP_DIR = "/opt/neurondeploy"
BOOT_TAG = "neurondeploy:boot"  # on the Auto Scaling group: what its launch template boots (boot_digest)


def ami_resource(ctx: PlanContext, min_root_gib: int | None = None) -> Resource:
    """The AMI id, its root device name, and the root volume size: the larger of ``min_root_gib`` and the
    image's snapshot (a smaller size fails to launch; omitting it is refused by some APIs and emulators)."""
    biggest = "max(Images[0].BlockDeviceMappings[].Ebs.VolumeSize || `[]`) || `1`"
    describe_outputs = {
        "RootDeviceName": "Images[0].RootDeviceName",
        "RootVolumeSize": f"max([`{min_root_gib or 1}`, {biggest}])",
    }
    if ctx.ami_id:
        describe = Request(
            "ec2", "DescribeImages", {"ImageIds": [ctx.ami_id]}, {"ImageId": "Images[0].ImageId", **describe_outputs}
        )
        return resource(
            "ami",
            "ec2:image-lookup",
            [describe],
            taggable=False,
            description=f"The given AMI {ctx.ami_id}, its root device and size; reads only",
        )
    get = Request("ssm", "GetParameter", {"Name": ctx.ami_ssm_parameter}, {"ImageId": "Parameter.Value"})
    describe = Request("ec2", "DescribeImages", {"ImageIds": [ref("ami", "ImageId")]}, describe_outputs)
    return resource(
        "ami",
        "ssm:parameter-lookup",
        [get, describe],
        taggable=False,
        description=f"Neuron DLAMI id from the public SSM parameter {ctx.ami_ssm_parameter}; reads only",
    )


CONSTRAINTS_FILE = "constraints.txt"
ENV_FILE = f"{APP_DIR}/service.env"
# In a double-quoted EnvironmentFile value, a backslash before one of these keeps just that character
# (systemd src/basic/env-file.c, DOUBLE_QUOTE_VALUE_ESCAPE with SHELL_NEED_ESCAPE).
ENV_FILE_ESCAPED = re.compile(r'(["\\`$])')


def environment_file(env: dict[str, str]) -> str:
    """The service's environment as systemd's ``EnvironmentFile=`` reads it: ``KEY="VALUE"`` lines, every value
    double-quoted with ``" \\ ` $`` escaped, so it arrives byte for byte (the file's content gets no ``%`` specifier
    or ``$`` expansion: systemd.exec(5), EnvironmentFile=). A key that is not a variable name, or a value with a
    control character, is refused: validate refuses them first, this keeps the builder safe on its own."""
    lines = []
    for key, value in env.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise PlanError(f"environment key {key!r} is not a variable name", "use [A-Za-z_][A-Za-z0-9_]*")
        problem = control_character_problem(value)
        if problem:
            raise PlanError(f"environment value of {key} {problem}", "write it on one line without control characters")
        escaped = ENV_FILE_ESCAPED.sub(r"\\\1", value)
        lines.append(f'{key}="{escaped}"\n')
    return "".join(lines)


def user_data_script(spec: InferenceSpec, artifact_s3_uri: str, ctx: PlanContext) -> str:
    """Boot script: fetch the exact neurondeploy build (wheel and constraints, sha256 checked) and the artifact from
    the deployment's bucket with the instance role, install the wheel into the DLAMI's Neuron PyTorch venv, run
    ``neurondeploy serve`` on the artifact under systemd (restarted on failure, started on every boot).

    It carries only what boot needs: the artifact (its URI names its sha256, so a new artifact is a new launch
    template version and rolls the fleet), the toolkit build (likewise), the serving section (as the container
    contract's $NEURONDEPLOY_SERVING), the replica count, the port and the container env. Capacity, network, load
    balancer, DNS and tags are not in it: changing them touches only the resources they belong to."""
    unresolvable = find_refs(artifact_s3_uri) - {("account", "Account")}
    if unresolvable:
        raise PlanError(
            f"the artifact URI {artifact_s3_uri} holds values known only at apply ({sorted(unresolvable)})",
            "give PlanContext.artifact_s3_uri as a plain s3:// URI",
        )
    if not (ctx.toolkit_sha256 and ctx.toolkit_constraints_sha256):
        raise PlanError(
            "the neurondeploy wheel instances install is not known (PlanContext.toolkit_sha256)",
            "build the context with neurondeploy.planner.context.plan_context",
        )
    venv = ctx.neuron_venv
    bucket, key = split_s3(artifact_s3_uri)
    _, toolkit = split_s3(toolkit_prefix(artifact_s3_uri, ctx.toolkit_sha256))
    downloads = [
        (key, f"{APP_DIR}/artifact.tar.gz", None),
        (toolkit + ctx.toolkit_wheel, f"{APP_DIR}/wheel/{ctx.toolkit_wheel}", ctx.toolkit_sha256),
        (toolkit + CONSTRAINTS_FILE, f"{APP_DIR}/wheel/{CONSTRAINTS_FILE}", ctx.toolkit_constraints_sha256),
    ]
    env = {SERVING_ENV: serving_env_value(spec.serving), **spec.deployment.container.runtime_env()}
    # Base64 is the one form of spec data the script holds: no value can end a heredoc, add a unit directive or a
    # command, whatever it contains.
    env_file = base64.b64encode(environment_file(env).encode()).decode()
    serve = shlex.join(
        [
            f"{venv}/bin/neurondeploy",
            "serve",
            f"{APP_DIR}/artifact",
            "--host",
            "0.0.0.0",
            "--port",
            str(spec.serving.port),
            "--replicas",
            str(replicas_per_instance(spec.deployment.instance_type, spec.deployment.tensor_parallel)),
        ]
    )
    pip = shlex.quote(f"{venv}/bin/pip")
    python = shlex.quote(f"{venv}/bin/python")
    return f"""#!/bin/bash
# neurondeploy {spec.name}: serving instance bootstrap (cloud-init runs it once, as root)
set -euo pipefail
exec > >(tee -a /var/log/neurondeploy-bootstrap.log) 2>&1
mkdir -p {APP_DIR}/artifact {APP_DIR}/wheel
{python} -c 'import boto3' 2>/dev/null || {pip} install --no-cache-dir {shlex.quote(ctx.toolkit_boto3)}
{python} - <<'PY'
import hashlib
import boto3
region, bucket = {json.dumps(spec.region)}, {json.dumps(bucket)}
if {json.dumps(ACCOUNT_REF)} in bucket:  # the shared bucket's name holds the account id: read it here
    account = boto3.client("sts", region_name=region).get_caller_identity()["Account"]
    bucket = bucket.replace({json.dumps(ACCOUNT_REF)}, account)
s3 = boto3.client("s3", region_name=region)
for key, path, sha256 in {downloads!r}:
    s3.download_file(bucket, key, path)
    if sha256:  # the exact build apply uploaded, or nothing
        with open(path, "rb") as handle:
            got = hashlib.sha256(handle.read()).hexdigest()
        if got != sha256:
            raise SystemExit(f"{{key}}: sha256 {{got}}, expected {{sha256}}: refusing to install it")
PY
{pip} install --no-cache-dir -c {APP_DIR}/wheel/{CONSTRAINTS_FILE} {APP_DIR}/wheel/{shlex.quote(ctx.toolkit_wheel)}
tar -xzf {APP_DIR}/artifact.tar.gz -C {APP_DIR}/artifact
rm -f {APP_DIR}/artifact.tar.gz
(umask 077 && printf %s '{env_file}' | base64 --decode > {ENV_FILE})
cat > /etc/systemd/system/neurondeploy.service <<'UNIT'
[Unit]
Description=neurondeploy model server ({spec.name})
After=network-online.target
Wants=network-online.target

[Service]
EnvironmentFile={ENV_FILE}
ExecStart={serve}
Restart=on-failure
RestartSec=5
# Bucketed models open many files (torch_neuronx.bucket_model_trace docs: ulimit -n 65535).
LimitNOFILE=65535
NoNewPrivileges=true
PrivateTmp=true

[Install]
WantedBy=multi-user.target
UNIT
systemctl daemon-reload
systemctl enable --now neurondeploy.service
"""


def launch_template_resource(spec: InferenceSpec, ctx: PlanContext, artifact_s3_uri: str) -> Resource:
    script = user_data_script(spec, artifact_s3_uri, ctx)
    if len(script.encode()) > USER_DATA_MAX_BYTES:
        raise PlanError(
            f"instance user data is {len(script.encode())} bytes; EC2 allows {USER_DATA_MAX_BYTES}",
            "shorten deployment.container.env",
        )
    name = aws_name(spec, "lt", 128)
    ebs = {
        "Encrypted": True,
        "VolumeType": "gp3",
        "DeleteOnTermination": True,
        "VolumeSize": ref("ami", "RootVolumeSize"),
    }
    instance_tags = [
        {"ResourceType": kind, "Tags": tag_list(ownership_tags(spec))}
        for kind in ("instance", "volume", "network-interface")
    ]
    data = {
        "ImageId": ref("ami", "ImageId"),
        "InstanceType": spec.deployment.instance_type,
        "IamInstanceProfile": {"Arn": ref("instance-profile", "Arn")},
        "SecurityGroupIds": [ref("sg-instances", "GroupId"), *spec.network.security_group_ids],
        # IMDSv2 only, one hop: a process in a container on the host cannot reach the instance credentials.
        "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled", "HttpPutResponseHopLimit": 1},
        "BlockDeviceMappings": [{"DeviceName": ref("ami", "RootDeviceName"), "Ebs": ebs}],
        "UserData": base64.b64encode(script.encode()).decode(),
        "TagSpecifications": instance_tags,
    }
    template_id = ref("launch-template", "LaunchTemplateId")
    return resource(
        "launch-template",
        "ec2:launch-template",
        [
            Request(
                "ec2",
                "CreateLaunchTemplate",
                {
                    "LaunchTemplateName": name,
                    "LaunchTemplateData": data,
                    "TagSpecifications": ec2_tags(spec, "launch-template", name),
                },
                {
                    "LaunchTemplateId": "LaunchTemplate.LaunchTemplateId",
                    "Version": "to_string(LaunchTemplate.LatestVersionNumber)",
                },
            ),
        ],
        delete_launch_template(template_id),
        description=f"{spec.deployment.instance_type}, Neuron DLAMI, IMDSv2, encrypted root volume, no SSH key",
        identity=(name,),
        # A boot change (user data, AMI, instance type) is a new version, made the default; the Auto Scaling
        # group moves to it and rolls its instances (autoscaling_group_resource).
        update=[
            Request(
                "ec2",
                "CreateLaunchTemplateVersion",
                {"LaunchTemplateId": template_id, "LaunchTemplateData": data},
                {"Version": "to_string(LaunchTemplateVersion.VersionNumber)"},
            ),
            Request(
                "ec2",
                "ModifyLaunchTemplate",
                {"LaunchTemplateId": template_id, "DefaultVersion": ref("launch-template", "Version")},
            ),
        ],
    )


def startup_grace_s(spec: InferenceSpec) -> int:
    """How long an instance may take from launch to serving: the model's download and load budgets and the
    install. The Auto Scaling group's health-check grace period, and how long apply's smoke test waits for it."""
    deployment = spec.deployment
    return deployment.model_download_timeout_s + deployment.health_check_timeout_s + INSTALL_SECONDS


def boot_digest(template: Resource) -> str:
    """16 hex characters naming what a launch template boots (its data as built, refs unresolved)."""
    return requests_hash(template.create)[:16]


def capacity(spec: InferenceSpec) -> tuple[int, int, int]:
    """(min, max, desired) from instance_count and autoscaling."""
    count, scaling = spec.deployment.instance_count, spec.deployment.autoscaling
    if not scaling:
        return count, count, count
    return scaling.min_instances, scaling.max_instances, min(max(count, scaling.min_instances), scaling.max_instances)


def autoscaling_group_resource(
    spec: InferenceSpec, subnet_ids: list[str], *, after: list[str], boot: str = ""
) -> Resource:
    """``boot``: :func:`boot_digest` of the launch template. It is a tag of the group, so a boot change is a change
    of the group, updated in place: the new template version, then an instance refresh that keeps every
    instance serving until its replacement is healthy (MinHealthyPercentage 100)."""
    name = aws_name(spec, "asg", 255)
    low, high, desired = capacity(spec)
    deployment = spec.deployment
    grace = startup_grace_s(spec)
    tags = [
        {"Key": k, "Value": v, "PropagateAtLaunch": True, "ResourceId": name, "ResourceType": "auto-scaling-group"}
        for k, v in ownership_tags(spec).items()
    ]
    if boot:
        tags.append(
            {
                "Key": BOOT_TAG,
                "Value": boot,
                "PropagateAtLaunch": False,
                "ResourceId": name,
                "ResourceType": "auto-scaling-group",
            }
        )
    create = [
        Request(
            "autoscaling",
            "CreateAutoScalingGroup",
            {
                "AutoScalingGroupName": name,
                "LaunchTemplate": {
                    "LaunchTemplateId": ref("launch-template", "LaunchTemplateId"),
                    "Version": ref("launch-template", "Version"),
                },
                "MinSize": low,
                "MaxSize": high,
                "DesiredCapacity": desired,
                "VPCZoneIdentifier": ",".join(subnet_ids),
                "TargetGroupARNs": [ref("target-group", "TargetGroupArn")],
                # ELB health: an instance whose /ping fails is replaced, after time to install, download and load.
                "HealthCheckType": "ELB",
                "HealthCheckGracePeriod": grace,
                "Tags": tags,
            },
        )
    ]
    if deployment.autoscaling:
        # EC2 target tracking has one warm-up, not the spec's per-direction cooldowns (those are SageMaker's).
        create.append(
            Request(
                "autoscaling",
                "PutScalingPolicy",
                {
                    "AutoScalingGroupName": name,
                    "PolicyName": f"{spec.name}-requests-per-target",
                    "PolicyType": "TargetTrackingScaling",
                    "EstimatedInstanceWarmup": grace,
                    "TargetTrackingConfiguration": {
                        "PredefinedMetricSpecification": {
                            "PredefinedMetricType": "ALBRequestCountPerTarget",
                            "ResourceLabel": f"{ref('alb', 'FullName')}/{ref('target-group', 'FullName')}",
                        },
                        "TargetValue": float(deployment.autoscaling.target_invocations_per_instance),
                    },
                },
            )
        )
    # No botocore waiter for ASG deletion: the executor polls DescribeAutoScalingGroups until the group is
    # gone (its instances terminated) before deleting the launch template and security groups.
    group = create[0].params
    updatable = ("LaunchTemplate", "MinSize", "MaxSize", "DesiredCapacity", "VPCZoneIdentifier", "HealthCheckType")
    update = [
        Request(
            "autoscaling",
            "UpdateAutoScalingGroup",
            {"AutoScalingGroupName": name, **{key: group[key] for key in updatable}, "HealthCheckGracePeriod": grace},
        ),
        Request("autoscaling", "CreateOrUpdateTags", {"Tags": group["Tags"]}, when="Tags"),
        *create[1:],  # PutScalingPolicy replaces the policy of that name
        Request(
            "autoscaling",
            "StartInstanceRefresh",
            {
                "AutoScalingGroupName": name,
                "Strategy": "Rolling",
                # Launch before terminate: every instance keeps serving until its replacement passes health checks.
                "Preferences": {"MinHealthyPercentage": 100, "MaxHealthyPercentage": 200, "InstanceWarmup": grace},
            },
            when=f"Tags[?Key=='{BOOT_TAG}'] | [0].Value",
        ),
    ]
    return resource(
        "asg",
        "autoscaling:group",
        create,
        [Request("autoscaling", "DeleteAutoScalingGroup", {"AutoScalingGroupName": name, "ForceDelete": True})],
        after=after,
        identity=(name,),
        update=update,
        description=f"{low}-{high} × {deployment.instance_type} behind the target group (ELB health checks)"
        + ("; target tracking on ALBRequestCountPerTarget" if deployment.autoscaling else ""),
    )


# --- kinds: how drift describes them, how the sweep finds and deletes leftovers (resources.kinds) ----------------

_INSTANCE_STATES = ["pending", "running", "stopping", "stopped"]  # not shutting-down / terminated
_VOLUME_STATES = ["creating", "available", "in-use", "error"]


def _find_groups(scan: Scan) -> None:
    # Auto Scaling groups are not in the tagging API's GetResources (AWS documents it; moto agrees).
    params = {
        "Filters": [{"Name": "tag-key", "Values": [DEPLOYMENT_TAG]}, {"Name": "tag-value", "Values": [scan.deployment]}]
    }
    for page in scan.paged.call("autoscaling", "DescribeAutoScalingGroups", params):
        for group in page.get("AutoScalingGroups", []):
            if ours(group.get("Tags"), scan.deployment):  # the two filters match the key and the value separately
                status = f" ({group['Status']})" if group.get("Status") else ""
                scan.add(
                    "autoscaling:group",
                    group["AutoScalingGroupName"],
                    f"Auto Scaling group, {len(group.get('Instances', []))} instances{status}",
                    tags=group.get("Tags"),
                )


def delete_launch_template(template_id: str) -> list[Request]:
    """Its delete requests, recorded by its builder (a ref for the id) and sent by the sweep (kinds.Sends)."""
    return [Request("ec2", "DeleteLaunchTemplate", {"LaunchTemplateId": template_id})]


def _delete_group(d: Caller, name: str) -> bool:
    deleted = done(d.call("autoscaling", "DeleteAutoScalingGroup", {"AutoScalingGroupName": name, "ForceDelete": True}))
    # No botocore waiter: the group exists ("Delete in progress") until its instances are terminated.
    d.poll_until_gone(
        f"Auto Scaling group {name}",
        lambda: (d.call("autoscaling", "DescribeAutoScalingGroups", {"AutoScalingGroupNames": [name]}) or {}).get(
            "AutoScalingGroups"
        ),
    )
    return deleted


def _terminate_instance(d: Caller, instance_id: str) -> bool:
    terminated = done(d.call("ec2", "TerminateInstances", {"InstanceIds": [instance_id]}))
    if terminated:
        d.wait("ec2", "InstanceTerminated", {"InstanceIds": [instance_id]})
    return terminated


# Launch templates are checked for existence (and tags) only: versions are immutable and the group pins one.
KINDS = (
    Kind(
        "ec2:instance",
        retag=ec2_retag,
        find=tagged(
            "ec2:instance",
            Request(
                "ec2",
                "DescribeInstances",
                {"Filters": [*TAGGED, {"Name": "instance-state-name", "Values": _INSTANCE_STATES}]},
            ),
            "Reservations[].Instances[]",
            "InstanceId",
            10,
            detail=lambda i: f"instance {i.get('InstanceType')} {i['State']['Name']}",
        ),
        delete=_terminate_instance,
        uses=(
            "ec2:launch-template",
            "iam:instance-profile",
            "ec2:subnet",
            "ec2:security-group",
            "ec2:network-interface",
            "ec2:volume",
            "ec2:internet-gateway",  # its public address keeps the gateway attached
        ),
    ),
    Kind(
        "ec2:launch-template",
        retag=ec2_retag,
        describe=Describe(
            Request("ec2", "DescribeLaunchTemplates", {"LaunchTemplateIds": [it("LaunchTemplateId")]}),
            "LaunchTemplates[0]",
        ),
        find=tagged(
            "ec2:launch-template",
            Request("ec2", "DescribeLaunchTemplates", {"Filters": TAGGED}),
            "LaunchTemplates",
            "LaunchTemplateId",
            80,
            extra="LaunchTemplateName",
        ),
        delete=Sends(delete_launch_template),
        uses=("ec2:security-group", "iam:instance-profile"),
    ),
    Kind(
        "ec2:network-interface",
        retag=ec2_retag,
        find=tagged(
            "ec2:network-interface",
            Request("ec2", "DescribeNetworkInterfaces", {"Filters": TAGGED}),
            "NetworkInterfaces",
            "NetworkInterfaceId",
            90,
            extra="Status",
        ),
        delete=Sends(lambda i: [Request("ec2", "DeleteNetworkInterface", {"NetworkInterfaceId": i})]),
        uses=("ec2:subnet", "ec2:security-group"),
    ),
    Kind(
        "ec2:volume",
        retag=ec2_retag,
        find=tagged(
            "ec2:volume",
            Request("ec2", "DescribeVolumes", {"Filters": [*TAGGED, {"Name": "status", "Values": _VOLUME_STATES}]}),
            "Volumes",
            "VolumeId",
            100,
            extra="State",
        ),
        delete=Sends(lambda i: [Request("ec2", "DeleteVolume", {"VolumeId": i})]),
    ),
    Kind(
        "autoscaling:group",
        retag=autoscaling_group_retag,
        describe=Describe(
            Request(
                "autoscaling", "DescribeAutoScalingGroups", {"AutoScalingGroupNames": [it("AutoScalingGroupName")]}
            ),
            "AutoScalingGroups[0]",
            (
                Attr("min size", "MinSize", "CreateAutoScalingGroup", "MinSize"),
                Attr("max size", "MaxSize", "CreateAutoScalingGroup", "MaxSize"),
                # Desired capacity moves with scaling; compared only for a fixed-size group (min == max).
                Attr(
                    "desired capacity",
                    "DesiredCapacity",
                    "CreateAutoScalingGroup",
                    "MinSize == MaxSize && DesiredCapacity || `null`",
                ),
                Attr(
                    "launch template",
                    "LaunchTemplate.LaunchTemplateId",
                    "CreateAutoScalingGroup",
                    "LaunchTemplate.LaunchTemplateId",
                ),
                Attr("target groups", "TargetGroupARNs", "CreateAutoScalingGroup", "TargetGroupARNs", True),
            ),
            gone=("Status", ("Delete in progress",)),
        ),
        find=Find("autoscaling", 300, _find_groups),
        delete=_delete_group,
        # It runs its instances and registers them with its target groups: deleted under it, they are replaced.
        uses=(
            "ec2:instance",
            "elbv2:target-registration",
            "ec2:launch-template",
            "ec2:subnet",
            "ec2:route-table",
            "elbv2:target-group",
            "elbv2:listener",
            "elbv2:load-balancer",
        ),
        arn=("autoscaling", "autoScalingGroup"),
    ),
)
