"""Before a paid call (a training job, a compile job, an endpoint or instances), read-only checks of everything the
plan's requests name outside the deployment: nothing paid starts on what a read call could have found missing.

What is checked comes from the requests themselves, so a check cannot drift from what is sent:

- a training or compile job's input channels: the bucket exists and the prefix holds objects (an empty channel
  starts 16 instances that stop at their first read); its output and checkpoint buckets exist (the shared bucket is
  made by the run itself and is not checked);
- a role the spec names (``iam.role_arn``): it exists and trusts the service that will assume it, and IAM's policy
  simulator (``SimulatePrincipalPolicy``) allows it what the job does with the rest: read the channels, write the
  outputs, pull the image, read the secrets ("not checked" where this identity may not simulate);
- the permissions boundary every role neurondeploy makes carries (``infra/iam-boundary.json``), where the plan
  makes one: IAM refuses ``CreateRole`` naming a policy that does not exist, after the network was made;
- a job's image in the account's own ECR (a wrapper, a custom training image): ``DescribeImages`` (an endpoint's
  is apply's ``engine.uploads.check_container_image``);
- secrets and SSM parameters a container reads at start: their metadata only (``DescribeSecret``,
  ``DescribeParameters``), never the value;
- a hosted zone a record goes in.

Every missing piece is one line naming the spec field and the fix (:class:`PreflightError`, all of them at once);
nothing is created. What this account's permissions do not let us read is said as "not checked", not as missing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from urllib.parse import unquote

from neurondeploy.aws.errors import is_ecr_image_missing, is_gone, is_s3_missing_bucket
from neurondeploy.aws.transport import AwsCallError, AwsTransport
from neurondeploy.errors import NeurondeployError
from neurondeploy.planner.image_push import image_to_push
from neurondeploy.resources.iam import BOUNDARY_POLICY_NAME, ROLE_PATH, boundary_policy_arn
from neurondeploy.resources.model import Request, Resource
from neurondeploy.resources.naming import split_s3
from neurondeploy.resources.refs import contains_ref

DENIED_CODES = ("AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "403")


class PreflightError(NeurondeployError):
    """What a paid call would have met missing: one problem per line."""

    exit_code = 2

    def __init__(self, problems: list[NeurondeployError]) -> None:
        super().__init__(problems[0].message, problems[0].hint)
        self.problems = problems


@dataclass(frozen=True)
class Finding:
    field: str  # the spec field it is about
    message: str
    fix: str
    checked: bool = True  # False: our permissions did not let us look (said, not refused)

    def error(self) -> NeurondeployError:
        return NeurondeployError(f"{self.field}: {self.message}", self.fix)


def _denied(exc: AwsCallError) -> bool:
    return exc.code in DENIED_CODES


# --- what the requests name ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Needs:
    """What a plan's requests name outside the deployment, with the spec field each comes from."""

    channels: tuple[tuple[str, str, str], ...] = ()  # (field, s3 uri, what fills it)
    buckets: tuple[tuple[str, str], ...] = ()  # (field, s3 uri) whose bucket must exist
    roles: tuple[tuple[str, str, str], ...] = ()  # (field, role ARN, service that assumes it)
    images: tuple[tuple[str, str], ...] = ()  # (field, image URI)
    secrets: tuple[tuple[str, str], ...] = ()  # (field, ARN)
    parameters: tuple[tuple[str, str], ...] = ()  # (field, ARN)
    zones: tuple[tuple[str, str], ...] = ()  # (field, hosted zone id)
    makes_roles: bool = False
    region: str = ""
    account: str = ""
    spec: object = None  # what an image's build commands come from (planner/image_push.py)


def needs_of(spec, resources: list[Resource], account: str, *, shared_bucket: str | None = None) -> Needs:
    """Pure: what ``resources`` (one plan's) name outside the deployment, by the spec fields they come from."""
    channels, buckets, roles, images = [], [], [], []
    makes_roles = False
    image_field = "image_uri" if spec.kind == "training" else "deployment.container.image_uri"
    for resource in resources:
        for request in resource.create:
            params = request.params
            if request.operation == "CreateRole":
                makes_roles = True
            elif request.operation == "CreateTrainingJob":
                formats = {name: channel.format for name, channel in getattr(spec, "inputs", {}).items()}
                for channel in params.get("InputDataConfig", []):
                    uri = channel["DataSource"]["S3DataSource"]["S3Uri"]
                    name = channel["ChannelName"]
                    if contains_ref(uri) or split_s3(uri)[0] == shared_bucket:
                        continue  # written by this run (the compile job's source)
                    filler = "tokenized" if formats.get(name) == "tokenized" else "files"
                    channels.append((f"inputs.{name}.s3_uri", uri, filler))
                output = params.get("OutputDataConfig", {}).get("S3OutputPath")
                if output and split_s3(output)[0] != shared_bucket:
                    buckets.append(("output_s3_uri", output))
                checkpoint = params.get("CheckpointConfig", {}).get("S3Uri")
                if checkpoint and split_s3(checkpoint)[0] != shared_bucket:
                    buckets.append(("checkpoint.s3_uri", checkpoint))
                role = params.get("RoleArn")
                if role and not contains_ref(role):
                    roles.append(("iam.role_arn", role, "sagemaker.amazonaws.com"))
                images.append((image_field, params["AlgorithmSpecification"]["TrainingImage"]))
            elif request.operation == "CreateModel":
                # An endpoint's image is apply's check_container_image's (with its docker build): not read twice.
                role = params.get("ExecutionRoleArn")
                if role and not contains_ref(role):
                    roles.append(("iam.role_arn", role, "sagemaker.amazonaws.com"))
    container = getattr(getattr(spec, "deployment", None), "container", None)
    secrets = tuple(
        (f"deployment.container.env.{key}", ref.secret)
        for key, ref in sorted(getattr(container, "secrets", {}).items())
        if ref.secret
    )
    parameters = tuple(
        (f"deployment.container.env.{key}", ref.ssm)
        for key, ref in sorted(getattr(container, "secrets", {}).items())
        if ref.ssm
    )
    writes_records = any(r.operation == "ChangeResourceRecordSets" for res in resources for r in res.create)
    dns = getattr(spec, "dns", None) if writes_records else None  # a compile job of the same spec writes none
    given_role = getattr(getattr(spec, "iam", None), "role_arn", None)
    if given_role and spec.kind == "inference" and spec.deployment.platform == "ec2":
        roles.append(("iam.role_arn", given_role, "ec2.amazonaws.com"))
    return Needs(
        tuple(channels),
        tuple(dict.fromkeys(buckets)),
        tuple(dict.fromkeys(roles)),
        tuple(dict.fromkeys(images)),
        secrets,
        parameters,
        (("dns.hosted_zone_id", dns.hosted_zone_id),) if dns else (),
        makes_roles,
        spec.region,
        account,
        spec,
    )


# --- the reads ---------------------------------------------------------------------------------------------------


def _look(
    transport: AwsTransport, request: Request, field: str, what: str, is_missing, missing: str, fix: str
) -> tuple[dict | None, list[Finding]]:
    """(the answer, []) of a read; or (None, [the finding]) when what it reads is missing, or when this identity may
    not read it (said, not refused)."""
    try:
        return transport.call(request.service, request.operation, request.params), []
    except AwsCallError as exc:
        if is_missing(exc):
            return None, [Finding(field, missing, fix)]
        if _denied(exc):
            return None, [Finding(field, f"{what}: not checked, this identity may not read it ({exc.code})", "", False)]
        raise


def _channel(transport: AwsTransport, field: str, uri: str, filler: str) -> list[Finding]:
    bucket, key = split_s3(uri)
    listed, found = _look(
        transport,
        Request("s3", "ListObjectsV2", {"Bucket": bucket, "Prefix": key, "MaxKeys": 1}),
        field,
        uri,
        is_s3_missing_bucket,
        f"bucket {bucket} does not exist ({uri})",
        f"create it, or fix {field}",
    )
    if listed is not None and not listed.get("KeyCount") and not listed.get("Contents"):
        fill = (
            "write it with `neurondeploy data SPEC --corpus FILE --tokenizer DIR`"
            if filler == "tokenized"
            else f"upload the data first: aws s3 sync DIR {uri}"
        )
        found.append(Finding(field, f"{uri} holds no objects: the job would start on an empty channel", fill))
    return found


def _bucket(transport: AwsTransport, field: str, uri: str) -> list[Finding]:
    bucket = split_s3(uri)[0]
    missing = f"bucket {bucket} does not exist ({uri})"
    request = Request("s3", "HeadBucket", {"Bucket": bucket})
    return _look(
        transport, request, field, f"bucket {bucket}", is_s3_missing_bucket, missing, f"create it, or fix {field}"
    )[1]


def _trusts(document, service: str) -> bool:
    if isinstance(document, str):
        document = json.loads(unquote(document))
    statements = document.get("Statement", [])
    for statement in [statements] if isinstance(statements, dict) else statements:
        principals = statement.get("Principal") if isinstance(statement.get("Principal"), dict) else {}
        services = principals.get("Service", [])
        services = [services] if isinstance(services, str) else services
        actions = statement.get("Action", [])
        actions = [actions] if isinstance(actions, str) else actions
        if statement.get("Effect") == "Allow" and service in services and "sts:AssumeRole" in actions:
            return True
    return False


def _role(transport: AwsTransport, field: str, arn: str, service: str) -> list[Finding]:
    fix = f"create it (trusted by {service}), or remove iam.role_arn to let neurondeploy make one"
    request = Request("iam", "GetRole", {"RoleName": arn.rsplit("/", 1)[-1]})
    got, found = _look(transport, request, field, f"role {arn}", is_gone, f"role {arn} does not exist", fix)
    if got is not None and not _trusts(got["Role"].get("AssumeRolePolicyDocument", {}), service):
        found.append(
            Finding(
                field,
                f"role {arn} does not trust {service}, which would assume it",
                f"add {service} to the role's trust policy (sts:AssumeRole)",
            )
        )
    return found


# --- what a given role may do ----------------------------------------------------------------------------------

PROBE_KEY = "neurondeploy-preflight-probe"  # a key under a prefix: the object ARN a prefix's policy must match
ROLE_CHECK_FIX = "grant the role {action} on {resource} (or remove iam.role_arn to let neurondeploy make a role)"


def _s3_object(uri: str) -> str:
    bucket, key = split_s3(uri)
    return f"arn:aws:s3:::{bucket}/{key.strip('/') + '/' if key.strip('/') else ''}{PROBE_KEY}"


def role_uses(needs: Needs) -> list[tuple[str, str, tuple[str, ...]]]:
    """Pure: (what for, resource ARN, actions) the job or endpoint does with a role the spec names: read each
    channel, write the output and checkpoints, pull an image from the account's ECR, read each secret. What the
    SageMaker execution role documentation lists for these uses
    (https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-roles.html)."""
    uses: list[tuple[str, str, tuple[str, ...]]] = []
    for field, uri, _ in needs.channels:
        uses.append((f"read {field}", f"arn:aws:s3:::{split_s3(uri)[0]}", ("s3:ListBucket",)))
        uses.append((f"read {field}", _s3_object(uri), ("s3:GetObject",)))
    for field, uri in needs.buckets:
        uses.append((f"write {field}", _s3_object(uri), ("s3:PutObject",)))
    for field, image in needs.images:
        push = image_to_push(needs.spec, image)
        if push is not None and push.image.account == needs.account:
            arn = f"arn:aws:ecr:{push.image.region}:{push.image.account}:repository/{push.image.repository}"
            uses.append((f"pull {field}", arn, ("ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer")))
            uses.append((f"pull {field}", "*", ("ecr:GetAuthorizationToken",)))
    for field, arn in needs.secrets:
        uses.append((f"read {field}", arn, ("secretsmanager:GetSecretValue",)))
    for field, arn in needs.parameters:
        uses.append((f"read {field}", arn, ("ssm:GetParameters",)))
    return uses


def _role_may(transport: AwsTransport, field: str, role: str, uses) -> list[Finding]:
    """IAM's own policy simulator on the role (its identity policies and boundary), for each use; "not checked"
    when this identity may not simulate, or the simulator does not answer."""
    found: list[Finding] = []
    for why, resource, actions in uses:
        request = Request(
            "iam",
            "SimulatePrincipalPolicy",
            {"PolicySourceArn": role, "ActionNames": list(actions), "ResourceArns": [resource]},
        )
        try:
            answer = transport.call(request.service, request.operation, request.params)
        except AwsCallError as exc:
            what = f"role {role}'s permissions: not checked, IAM's policy simulator did not answer ({exc.code or exc.message})"
            return [Finding(field, what, "", False)]
        for result in answer.get("EvaluationResults", []):
            if result.get("EvalDecision") != "allowed":
                action = result.get("EvalActionName")
                found.append(
                    Finding(
                        field,
                        f"role {role} may not {action} on {resource} ({result.get('EvalDecision')}): the job would "
                        f"fail to {why}",
                        ROLE_CHECK_FIX.format(action=action, resource=resource),
                    )
                )
    return found


def _boundary(transport: AwsTransport, region: str, account: str) -> list[Finding]:
    arn = boundary_policy_arn(region, account)
    missing = f"the permissions boundary {arn}, which every role neurondeploy makes carries, does not exist"
    fix = (
        f"an administrator creates it once: aws iam create-policy --path {ROLE_PATH} --policy-name "
        f"{BOUNDARY_POLICY_NAME} --policy-document file://infra/iam-boundary.json"
    )
    return _look(transport, Request("iam", "GetPolicy", {"PolicyArn": arn}), "iam", arn, is_gone, missing, fix)[1]


def _image(transport: AwsTransport, field: str, uri: str, account: str, spec) -> list[Finding]:
    push = image_to_push(spec, uri)
    if push is None or push.image.account != account:
        return []  # AWS's own images (the DLCs) live in AWS's accounts; another account's is its owner's to push
    request = Request(
        "ecr",
        "DescribeImages",
        {"repositoryName": push.image.repository, "imageIds": [push.image.image_id], "registryId": account},
    )
    missing = f"image {uri} is not in ECR"
    fix = "push it: " + " && ".join(push.commands)
    return _look(transport, request, field, f"image {uri}", is_ecr_image_missing, missing, fix)[1]


def _secret(transport: AwsTransport, field: str, arn: str) -> list[Finding]:
    name = arn.split(":secret:", 1)[-1]
    missing = f"secret {arn} does not exist: the container would fail at start"
    fix = f"create it: aws secretsmanager create-secret --name {name} --secret-string file://VALUE"
    request = Request("secretsmanager", "DescribeSecret", {"SecretId": arn})  # metadata: never the value
    return _look(transport, request, field, f"secret {arn}", is_gone, missing, fix)[1]


def _parameter(transport: AwsTransport, field: str, arn: str) -> list[Finding]:
    name = "/" + arn.split(":parameter/", 1)[-1]
    request = Request(
        "ssm", "DescribeParameters", {"ParameterFilters": [{"Key": "Name", "Option": "Equals", "Values": [name]}]}
    )
    found, findings_ = _look(transport, request, field, f"parameter {arn}", lambda exc: False, "", "")
    if found is not None and not found.get("Parameters"):
        findings_.append(
            Finding(
                field,
                f"SSM parameter {name} does not exist: the container would fail at start",
                f"create it: aws ssm put-parameter --name {name} --type SecureString --value file://VALUE",
            )
        )
    return findings_


def _zone(transport: AwsTransport, field: str, zone: str) -> list[Finding]:
    missing = f"hosted zone {zone} does not exist in this account"
    request = Request("route53", "GetHostedZone", {"Id": zone})
    return _look(transport, request, field, f"hosted zone {zone}", is_gone, missing, f"fix {field}")[1]


def findings(transport: AwsTransport, needs: Needs) -> list[Finding]:
    """Every read of ``needs``, in the order of the spec's fields a user reads top down."""
    found: list[Finding] = []
    for field, uri, filler in needs.channels:
        found += _channel(transport, field, uri, filler)
    for field, uri in needs.buckets:
        found += _bucket(transport, field, uri)
    for field, arn, service in needs.roles:
        about_role = _role(transport, field, arn, service)
        found += about_role
        if not about_role:  # it exists and trusts the service: what may it do with what the spec names?
            found += _role_may(transport, field, arn, role_uses(needs))
    if needs.makes_roles:
        found += _boundary(transport, needs.region, needs.account)
    for field, image in needs.images:
        found += _image(transport, field, image, needs.account, needs.spec)
    for field, arn in needs.secrets:
        found += _secret(transport, field, arn)
    for field, arn in needs.parameters:
        found += _parameter(transport, field, arn)
    for field, zone in needs.zones:
        found += _zone(transport, field, zone)
    return found


def preflight(transport: AwsTransport, needs: Needs, on_event=None) -> None:
    """Refuse, with every missing piece at once, before a paid call; say what could not be checked."""
    found = findings(transport, needs)
    for finding in found:
        if not finding.checked and on_event is not None:
            on_event(f"preflight: {finding.field}: {finding.message}")
    missing = [finding.error() for finding in found if finding.checked]
    if missing:
        raise PreflightError(missing)
