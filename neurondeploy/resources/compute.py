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
from dataclasses import dataclass

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
from neurondeploy.resources.precompiled import MODEL_DIR, precompiled_env, uses_precompiled
from neurondeploy.resources.refs import find_refs, ref
from neurondeploy.resources.retag import autoscaling_group_retag, ec2_retag
from neurondeploy.resources.sagemaker_endpoint import model_environment
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
    """Boot script: fetch the exact neurondeploy build (wheel and constraints, sha256 checked) and what the server
    loads from the deployment's bucket with the instance role, install into the DLAMI's venv, run the server under
    systemd (restarted on failure, started on every boot): :func:`our_server_boot` or :func:`llm_server_boot`.

    It carries only what boot needs: what the server loads (an artifact's URI names its sha256, so a new artifact is
    a new launch template version and rolls the fleet), the toolkit build (likewise), the server's settings and the
    container env. Capacity, network, load balancer, DNS and tags are not in it: changing them touches only the
    resources they belong to."""
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
    boot = our_server_boot(spec, artifact_s3_uri, ctx) if spec.container.ours else llm_server_boot(spec, ctx)
    _, toolkit = split_s3(toolkit_prefix(artifact_s3_uri, ctx.toolkit_sha256))
    bucket = split_s3(artifact_s3_uri)[0]
    objects = [(bucket, toolkit + ctx.toolkit_wheel, f"{APP_DIR}/wheel/{ctx.toolkit_wheel}", ctx.toolkit_sha256)]
    objects += [(bucket, key, path, None) for key, path in boot.artifacts]
    # Base64 is the one form of spec data the script holds: no value can end a heredoc, add a unit directive or a
    # command, whatever it contains.
    env_file = base64.b64encode(environment_file(boot.env).encode()).decode()
    python = shlex.quote(f"{ctx.neuron_venv}/bin/python")
    unit_env = "".join(f'Environment="{key}={value}"\n' for key, value in boot.unit_env.items())
    return f"""#!/bin/bash
# neurondeploy {spec.name}: serving instance bootstrap (cloud-init runs it once, as root)
set -euo pipefail
exec > >(tee -a /var/log/neurondeploy-bootstrap.log) 2>&1
mkdir -p {APP_DIR}/wheel
{python} -c 'import boto3' 2>/dev/null || {shlex.quote(f"{ctx.neuron_venv}/bin/pip")} install --no-cache-dir {shlex.quote(ctx.toolkit_boto3)}
{python} - <<'PY'
import hashlib
import os
import boto3
region = {json.dumps(spec.region)}
account = None
def resolved(bucket):  # the shared bucket's name holds the account id: read it here
    global account
    if {json.dumps(ACCOUNT_REF)} not in bucket:
        return bucket
    account = account or boto3.client("sts", region_name=region).get_caller_identity()["Account"]
    return bucket.replace({json.dumps(ACCOUNT_REF)}, account)
s3 = boto3.client("s3", region_name=region)
for bucket, key, path, sha256 in {objects!r}:
    s3.download_file(resolved(bucket), key, path)
    if sha256:  # the exact build apply uploaded, or nothing
        with open(path, "rb") as handle:
            got = hashlib.sha256(handle.read()).hexdigest()
        if got != sha256:
            raise SystemExit(f"{{key}}: sha256 {{got}}, expected {{sha256}}: refusing to install it")
for bucket, prefix, directory in {boot.prefixes!r}:  # a directory compile --remote stored, file by file
    os.makedirs(directory, exist_ok=True)
    directory = os.path.realpath(directory)
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=resolved(bucket), Prefix=prefix):
        for item in page.get("Contents", []):
            path = os.path.realpath(os.path.join(directory, item["Key"][len(prefix):]))
            if item["Key"].endswith("/") or os.path.commonpath([directory, path]) != directory:
                continue
            os.makedirs(os.path.dirname(path), exist_ok=True)
            s3.download_file(resolved(bucket), item["Key"], path)
PY
{boot.install}
(umask 077 && printf %s '{env_file}' | base64 --decode > {ENV_FILE})
cat > /etc/systemd/system/neurondeploy.service <<'UNIT'
[Unit]
Description={boot.description} ({spec.name})
After=network-online.target
Wants=network-online.target

[Service]
EnvironmentFile={ENV_FILE}
{unit_env}ExecStart={boot.exec_start}
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


@dataclass(frozen=True)
class ServerBoot:
    """What a serving instance's boot script does for its server, beside fetching the toolkit's wheel."""

    description: str
    artifacts: list[tuple[str, str]]  # (key in the deployment's bucket, path): objects to fetch
    prefixes: list[tuple[str, str, str]]  # (bucket, key prefix, directory): S3 directories to fetch
    install: str  # shell lines, after the downloads
    env: dict[str, str]  # the service's EnvironmentFile: spec values
    unit_env: dict[str, str]  # the unit's Environment= lines: this module's paths only, never a spec value
    exec_start: str


def our_server_boot(spec: InferenceSpec, artifact_s3_uri: str, ctx: PlanContext) -> ServerBoot:
    """``neurondeploy serve`` on the compiled artifact, the wheel installed with its constraints for the venv."""
    _, key = split_s3(artifact_s3_uri)
    _, toolkit = split_s3(toolkit_prefix(artifact_s3_uri, ctx.toolkit_sha256))
    venv = ctx.neuron_venv
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
    wheel, constraints = f"{APP_DIR}/wheel/{shlex.quote(ctx.toolkit_wheel)}", f"{APP_DIR}/wheel/{CONSTRAINTS_FILE}"
    install = f"""{shlex.quote(f"{venv}/bin/pip")} install --no-cache-dir -c {constraints} {wheel}
mkdir -p {APP_DIR}/artifact
tar -xzf {APP_DIR}/artifact.tar.gz -C {APP_DIR}/artifact
rm -f {APP_DIR}/artifact.tar.gz"""
    return ServerBoot(
        "neurondeploy model server",
        [(key, f"{APP_DIR}/artifact.tar.gz"), (toolkit + CONSTRAINTS_FILE, constraints)],
        [],
        install,
        {SERVING_ENV: serving_env_value(spec.serving), **spec.deployment.container.runtime_env()},
        {},
        serve,
    )


# What the vLLM Neuron wrapper adds to its image, beside neurondeploy without its dependencies: the secret
# resolver's imports (infra/hf-secrets/Dockerfile's RUN line; the DLAMI's venv keeps its own torch and vLLM).
WRAPPER_REQUIREMENTS = ("boto3>=1.35", "pydantic>=2.7,<3", "PyYAML>=6")


def llm_server_boot(spec: InferenceSpec, ctx: PlanContext) -> ServerBoot:
    """An LLM container kind's server as its image would run it (data/containers.yaml's wrapper_entrypoint), in the
    venv of the DLAMI that serves the kind (data/dlami.yaml), with the SageMaker model's environment: the model
    compile --remote built, fetched to /opt/ml/model as SageMaker lays it out, or the Hub id. neurondeploy goes in
    as the wrapper image puts it (no dependencies: the venv's vLLM, torch and transformers stay as the DLAMI ships
    them); the secret resolver reads the Hub token through the instance role, as the wrapper's entrypoint does."""
    kind = spec.container
    venv = ctx.neuron_venv
    env = model_environment(spec, ctx)
    paths = precompiled_env(spec) if uses_precompiled(spec, ctx) else {}
    prefixes = []
    if paths:
        bucket, prefix = split_s3(ctx.precompiled_model_uri.rstrip("/") + "/")
        prefixes.append((bucket, prefix, MODEL_DIR))
    pip = shlex.quote(f"{venv}/bin/pip")
    install = (
        f"{pip} install --no-cache-dir --no-deps {APP_DIR}/wheel/{shlex.quote(ctx.toolkit_wheel)}\n"
        f"{pip} install --no-cache-dir {shlex.join(WRAPPER_REQUIREMENTS)}"
    )
    python = f"{venv}/bin/python"
    launcher = shlex.split(kind.wrapper_entrypoint.replace("python3", python, 1))
    command = [python, "-m", "neurondeploy.aws.secrets", "--", *launcher, "--port", str(spec.serving.port)]
    return ServerBoot(
        f"{kind.name} server",
        [],
        prefixes,
        install,
        {key: value for key, value in env.items() if key not in paths},
        paths,
        shlex.join(command),
    )


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


def autoscaling_group_resource(
    spec: InferenceSpec, subnet_ids: list[str], *, after: list[str], boot: str = ""
) -> Resource:
    """``boot``: :func:`boot_digest` of the launch template. It is a tag of the group, so a boot change is a change
    of the group, updated in place: the new template version, then an instance refresh that keeps every
    instance serving until its replacement is healthy (MinHealthyPercentage 100)."""
    name = aws_name(spec, "asg", 255)
    low, high, desired = spec.deployment.capacity
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
