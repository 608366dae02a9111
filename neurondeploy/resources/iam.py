"""IAM roles with inline least-privilege policies, and the EC2 instance profile.

No AWS managed policy is attached: each role gets exactly the S3 prefixes, ECR repositories and log groups
its deployment uses. Roles live under path /neurondeploy/ so they are easy to audit.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

from neurondeploy.resources.kinds import Attr, Caller, Describe, Expected, Find, Kind, Scan, done, it, ours
from neurondeploy.resources.model import PlanContext, Request, Resource, Wait, resource
from neurondeploy.resources.naming import (
    account,
    aws_name,
    ownership_tags,
    partition,
    s3_bucket_arn,
    s3_prefix_arn,
    split_s3,
    tag_list,
)
from neurondeploy.resources.precompiled import uses_precompiled, without_hub_token
from neurondeploy.resources.refs import ref
from neurondeploy.resources.retag import iam_instance_profile_retag, iam_role_retag
from neurondeploy.specs import Spec

ROLE_PATH = "/neurondeploy/"
ROLE_NAME_MAX = 64
POLICY_NAME = "neurondeploy"
# The managed policy every role neurondeploy creates carries as its permissions boundary: the most any of them
# may ever do, whatever inline policy it is given (infra/iam-boundary.json, made once by an administrator). The
# operator policy creates and changes roles only with it in place, so holding that policy cannot make anyone admin
# (https://docs.aws.amazon.com/IAM/latest/UserGuide/access_policies_boundaries.html).
BOUNDARY_POLICY_NAME = "neurondeploy-boundary"
_ECR = re.compile(
    r"^(?P<account>\$\{[^}]+\}|[^./]+)\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(\.cn)?/(?P<repo>[^:@]+)"
)


def policy_document(statements: list[dict]) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": statements}, separators=(",", ":"))


def _trust(service: str) -> str:
    return policy_document([{"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}])


def boundary_policy_arn(region: str, account_id: str) -> str:
    return f"arn:{partition(region)}:iam::{account_id}:policy{ROLE_PATH}{BOUNDARY_POLICY_NAME}"


def role_resource(
    spec: Spec,
    ctx: PlanContext,
    name: str,
    suffix: str,
    service: str,
    statements: list[dict],
    description: str,
) -> Resource:
    role_name = aws_name(spec, suffix, ROLE_NAME_MAX)
    return resource(
        name,
        "iam:role",
        [
            Request(
                "iam",
                "CreateRole",
                {
                    "RoleName": role_name,
                    "Path": ROLE_PATH,
                    "AssumeRolePolicyDocument": _trust(service),
                    "PermissionsBoundary": boundary_policy_arn(spec.region, account(ctx)),
                    "Description": description,
                    "Tags": tag_list(ownership_tags(spec)),
                },
                {"Arn": "Role.Arn", "RoleName": "Role.RoleName"},
                Wait("RoleExists", {"RoleName": role_name}),
            ),
            Request(
                "iam",
                "PutRolePolicy",
                {"RoleName": role_name, "PolicyName": POLICY_NAME, "PolicyDocument": policy_document(statements)},
            ),
        ],
        [
            Request("iam", "DeleteRolePolicy", {"RoleName": role_name, "PolicyName": POLICY_NAME}),
            Request("iam", "DeleteRole", {"RoleName": role_name}),
        ],
        description=description,
    )


def instance_role_resources(spec: Spec, ctx: PlanContext, artifact_s3_uri: str) -> list[Resource]:
    """Role + instance profile for EC2 serving instances: read the artifact, write their own log group.
    With ``iam.role_arn`` only the profile is created, carrying that role (left unchanged)."""
    region = spec.region
    resources = []
    if spec.iam.role_arn:
        role_name = spec.iam.role_arn.rsplit("/", 1)[1]
    else:
        log_group = f"arn:{partition(region)}:logs:{region}:{account(ctx)}:log-group:/neurondeploy/{spec.name}"
        statements = [
            {
                "Sid": "ReadArtifact",
                "Effect": "Allow",
                "Action": "s3:GetObject",
                "Resource": s3_prefix_arn(artifact_s3_uri, region, parent=True),
            },
            {
                "Sid": "Logs",
                "Effect": "Allow",
                "Action": ["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents"],
                "Resource": [log_group, f"{log_group}:*"],
            },
            # An LLM server over the model compile --remote built reads it, and no Hub token (as on SageMaker).
            *(s3_statements(region, read=[ctx.precompiled_model_uri]) if uses_precompiled(spec, ctx) else []),
            *secret_read_statements(without_hub_token(spec) if uses_precompiled(spec, ctx) else spec),
        ]
        service = "ec2.amazonaws.com.cn" if partition(region) == "aws-cn" else "ec2.amazonaws.com"
        resources.append(
            role_resource(
                spec,
                ctx,
                "instance-role",
                "ec2-role",
                service,
                statements,
                "neurondeploy serving instances: read the artifact prefix, write their log group",
            )
        )
        role_name = ref("instance-role", "RoleName")
    profile_name = aws_name(spec, "ec2-profile", 128)
    resources.append(
        resource(
            "instance-profile",
            "iam:instance-profile",
            [
                Request(
                    "iam",
                    "CreateInstanceProfile",
                    {"InstanceProfileName": profile_name, "Path": ROLE_PATH, "Tags": tag_list(ownership_tags(spec))},
                    {"Arn": "InstanceProfile.Arn"},
                ),
                Request(
                    "iam",
                    "AddRoleToInstanceProfile",
                    {"InstanceProfileName": profile_name, "RoleName": role_name},
                    wait=Wait("InstanceProfileExists", {"InstanceProfileName": profile_name}),
                ),
            ],
            [
                Request(
                    "iam",
                    "RemoveRoleFromInstanceProfile",
                    {"InstanceProfileName": profile_name, "RoleName": role_name},
                    undoes=2,  # AddRoleToInstanceProfile
                ),
                Request("iam", "DeleteInstanceProfile", {"InstanceProfileName": profile_name}),
            ],
            description="Instance profile carrying the instance role (EC2 may take ~10 s to see a new one)",
        )
    )
    return resources


# --- statements ----------------------------------------------------------------------------------------


def s3_statements(region: str, *, read: list[str] = (), write: list[str] = ()) -> list[dict]:
    """GetObject under ``read`` prefixes, Get/PutObject under ``write`` prefixes, ListBucket limited to them."""
    statements = []
    if read:
        statements.append(
            {
                "Sid": "ReadS3",
                "Effect": "Allow",
                "Action": "s3:GetObject",
                "Resource": sorted({s3_prefix_arn(u, region) for u in read}),
            }
        )
    if write:
        statements.append(
            {
                "Sid": "WriteS3",
                "Effect": "Allow",
                "Action": ["s3:GetObject", "s3:PutObject"],
                "Resource": sorted({s3_prefix_arn(u, region) for u in write}),
            }
        )
    by_bucket: dict[str, set[str]] = {}
    for uri in [*read, *write]:
        key = split_s3(uri)[1].strip("/")
        by_bucket.setdefault(s3_bucket_arn(uri, region), set()).update({f"{key}/*", key} if key else {"*"})
    for i, (bucket, prefixes) in enumerate(sorted(by_bucket.items())):
        statements.append(
            {
                "Sid": f"ListS3{i}",
                "Effect": "Allow",
                "Action": "s3:ListBucket",
                "Resource": bucket,
                "Condition": {"StringLike": {"s3:prefix": sorted(prefixes)}},
            }
        )
    return statements


def secret_read_statements(spec: Spec) -> list[dict]:
    """Read on exactly the secrets and parameters the container's env references (resolved at its start), and
    kms:Decrypt only when Secrets Manager or SSM asks on its behalf (the key of a secret is not known here)."""
    container = getattr(getattr(spec, "deployment", None), "container", None)
    secrets = sorted({ref.secret for ref in container.secrets.values() if ref.secret}) if container else []
    parameters = sorted({ref.ssm for ref in container.secrets.values() if ref.ssm}) if container else []
    statements = []
    if secrets:
        statements.append(
            {"Sid": "ReadSecrets", "Effect": "Allow", "Action": "secretsmanager:GetSecretValue", "Resource": secrets}
        )
    if parameters:
        statements.append(
            {"Sid": "ReadParameters", "Effect": "Allow", "Action": "ssm:GetParameter", "Resource": parameters}
        )
    if secrets or parameters:
        services = [
            f"{name}.{spec.region}.amazonaws.com"
            for name, used in (("secretsmanager", secrets), ("ssm", parameters))
            if used
        ]
        statements.append(
            {
                "Sid": "DecryptForThem",
                "Effect": "Allow",
                "Action": "kms:Decrypt",
                "Resource": "*",
                "Condition": {"StringEquals": {"kms:ViaService": services}},
            }
        )
    return statements


def ecr_pull_statements(region: str, images: list[str]) -> list[dict]:
    repositories = set()
    for image in images:
        match = _ECR.match(image)
        # Not an ECR URI (SageMaker can also pull from a VPC registry): no repository to scope to.
        repositories.add(
            f"arn:{partition(match['region'])}:ecr:{match['region']}:{match['account']}:repository/{match['repo']}"
            if match
            else "*"
        )
    return [
        # GetAuthorizationToken has no resource-level permissions.
        {"Sid": "EcrToken", "Effect": "Allow", "Action": "ecr:GetAuthorizationToken", "Resource": "*"},
        {
            "Sid": "EcrPull",
            "Effect": "Allow",
            "Action": ["ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"],
            "Resource": sorted(repositories),
        },
    ]


def sagemaker_log_statements(region: str, ctx: PlanContext, group: str) -> list[dict]:
    arn = f"arn:{partition(region)}:logs:{region}:{account(ctx)}:log-group:/aws/sagemaker/{group}"
    return [
        {
            "Sid": "Logs",
            "Effect": "Allow",
            "Action": ["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"],
            "Resource": [arn, f"{arn}:*"],
        },
        {
            "Sid": "Metrics",
            "Effect": "Allow",
            "Action": "cloudwatch:PutMetricData",
            "Resource": "*",
            "Condition": {"StringLike": {"cloudwatch:namespace": "/aws/sagemaker/*"}},
        },
    ]


def vpc_statements() -> list[dict]:
    # What SageMaker needs to put its ENIs in the deployment's subnets; these EC2 actions take no resource ARNs
    # in any useful way (the subnets' ENIs do not exist yet).
    return [
        {
            "Sid": "VpcEnis",
            "Effect": "Allow",
            "Action": [
                "ec2:CreateNetworkInterface",
                "ec2:CreateNetworkInterfacePermission",
                "ec2:DeleteNetworkInterface",
                "ec2:DeleteNetworkInterfacePermission",
                "ec2:DescribeNetworkInterfaces",
                "ec2:DescribeVpcs",
                "ec2:DescribeDhcpOptions",
                "ec2:DescribeSubnets",
                "ec2:DescribeSecurityGroups",
            ],
            "Resource": "*",
        }
    ]


# --- kinds: how drift describes them, how the sweep finds and deletes leftovers (resources.kinds) ----------------


def _find_iam(scan: Scan) -> None:
    # IAM is global and not in the tagging API; our builders put roles and profiles under ROLE_PATH and name
    # them "<deployment>-...", so only those need their tags read.
    prefix = scan.deployment + "-"
    for page in scan.paged.call("iam", "ListRoles", {"PathPrefix": ROLE_PATH}):
        for role in page.get("Roles", []):
            if role["RoleName"].startswith(prefix):
                tags = scan.call("iam", "ListRoleTags", {"RoleName": role["RoleName"]}).get("Tags")
                if ours(tags, scan.deployment):
                    scan.add("iam:role", role["RoleName"], f"IAM role {role['Arn']}", "global", tags=tags)
    for page in scan.paged.call("iam", "ListInstanceProfiles", {"PathPrefix": ROLE_PATH}):
        for profile in page.get("InstanceProfiles", []):
            if profile["InstanceProfileName"].startswith(prefix):
                # GetInstanceProfile returns the tags (ListInstanceProfiles does not on AWS; moto lacks
                # ListInstanceProfileTags).
                got = scan.call("iam", "GetInstanceProfile", {"InstanceProfileName": profile["InstanceProfileName"]})
                if ours(got["InstanceProfile"].get("Tags"), scan.deployment):
                    scan.add(
                        "iam:instance-profile",
                        profile["InstanceProfileName"],
                        f"instance profile {profile['Arn']}",
                        "global",
                        tags=got["InstanceProfile"].get("Tags"),
                    )


_FIND = Find("iam", 400, _find_iam)


def _policy(document: Any) -> Any:
    if isinstance(document, str):
        try:
            return json.loads(unquote(document) if document.startswith("%7B") else document)
        except ValueError:
            return document
    return document


def _compare_role(aws: Caller, role: dict, ids: Mapping, expected: Expected) -> list[str]:
    problems = []
    name = role["RoleName"]
    trust = expected.value("CreateRole", "AssumeRolePolicyDocument")
    if trust is not None and _policy(role.get("AssumeRolePolicyDocument")) != _policy(trust):
        problems.append("trust policy changed")
    boundary = expected.value("CreateRole", "PermissionsBoundary")
    if boundary is not None and (role.get("PermissionsBoundary") or {}).get("PermissionsBoundaryArn") != boundary:
        problems.append("permissions boundary removed or changed")
    for params in expected.all("PutRolePolicy"):
        got = aws.call("iam", "GetRolePolicy", {"RoleName": name, "PolicyName": params["PolicyName"]})
        if got is None:
            problems.append(f"inline policy {params['PolicyName']} removed")
            continue
        if _policy(got.get("PolicyDocument")) != _policy(params["PolicyDocument"]):
            problems.append(f"inline policy {params['PolicyName']} changed")
    attached = [
        p
        for page in aws.paged.call("iam", "ListAttachedRolePolicies", {"RoleName": name})
        for p in page.get("AttachedPolicies", [])
    ]
    if attached:  # we never attach managed policies
        problems.append("managed policies attached: " + ", ".join(p["PolicyName"] for p in attached))
    return problems


def _delete_instance_profile(d: Caller, name: str) -> bool:
    profile = (d.call("iam", "GetInstanceProfile", {"InstanceProfileName": name}) or {}).get("InstanceProfile", {})
    for role in profile.get("Roles", []):
        d.call("iam", "RemoveRoleFromInstanceProfile", {"InstanceProfileName": name, "RoleName": role["RoleName"]})
    return done(d.call("iam", "DeleteInstanceProfile", {"InstanceProfileName": name}))


def _delete_role(d: Caller, name: str) -> bool:
    for page in d.paged.call("iam", "ListInstanceProfilesForRole", {"RoleName": name}):
        for profile in page.get("InstanceProfiles", []):
            d.call(
                "iam",
                "RemoveRoleFromInstanceProfile",
                {"InstanceProfileName": profile["InstanceProfileName"], "RoleName": name},
            )
    for page in d.paged.call("iam", "ListRolePolicies", {"RoleName": name}):
        for policy in page.get("PolicyNames", []):
            d.call("iam", "DeleteRolePolicy", {"RoleName": name, "PolicyName": policy})
    for page in d.paged.call("iam", "ListAttachedRolePolicies", {"RoleName": name}):
        for policy in page.get("AttachedPolicies", []):
            d.call("iam", "DetachRolePolicy", {"RoleName": name, "PolicyArn": policy["PolicyArn"]})
    return done(d.call("iam", "DeleteRole", {"RoleName": name}))


KINDS = (
    Kind(
        "iam:instance-profile",
        retag=iam_instance_profile_retag,
        describe=Describe(
            Request("iam", "GetInstanceProfile", {"InstanceProfileName": it("InstanceProfileName")}),
            "InstanceProfile",
            (Attr("role", "Roles[0].RoleName", "AddRoleToInstanceProfile", "RoleName"),),
        ),
        find=_FIND,
        delete=_delete_instance_profile,
        uses=("iam:role",),
    ),
    Kind(
        "iam:role",
        retag=iam_role_retag,
        describe=Describe(Request("iam", "GetRole", {"RoleName": it("RoleName")}), "Role", extra=_compare_role),
        find=_FIND,
        delete=_delete_role,
    ),
)
