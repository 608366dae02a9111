"""What IAM authorizes for each request a deployment's resources send: the action, the resource it names, and the
context keys a policy can condition on.

A model of IAM's request context, written from the AWS documentation, made to evaluate the operator policy offline
(:mod:`neurondeploy.aws.policy_evaluation`) against every request of a plan:

- the action is the request's IAM action (:func:`neurondeploy.aws.iam_policy.iam_action`);
- tags a request gives (``Tags``, ``TagSpecifications``) are ``aws:RequestTag/<key>`` and ``aws:TagKeys``
  (https://docs.aws.amazon.com/IAM/latest/UserGuide/access_tags.html);
- a request on an object that exists (any request but the one that makes the object, and that one too when it
  names another object of the deployment, as a subnet names its VPC) sees that object's tags as
  ``aws:ResourceTag/<key>``: every object of a deployment carries its ownership tags;
- a create that tags also needs the service's tagging action, with the create named in ``ec2:CreateAction``
  (and its kin) (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/supported-iam-actions-tagging.html);
- a role's permissions boundary, given by ``CreateRole`` or carried by the role a request changes, is
  ``iam:PermissionsBoundary`` (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_iam-condition-keys.html);
- a Route 53 change names its hosted zone and, normalized, the names, types and actions of its records
  (https://docs.aws.amazon.com/Route53/latest/DeveloperGuide/specifying-rrset-conditions.html); a name known only at
  apply (ACM's validation CNAME, ``_<hash>.<domain>``) is modelled by that shape;
- every request has ``aws:PrincipalAccount``, the account of whoever sends it;
- a role handed to a service needs ``iam:PassRole`` on that role with ``iam:PassedToService``
  (https://docs.aws.amazon.com/IAM/latest/UserGuide/id_roles_use_passrole.html); an Auto Scaling group from a
  launch template also needs ``ec2:RunInstances`` with the group's tags and ``iam:PassRole`` for the template's
  instance profile (https://docs.aws.amazon.com/autoscaling/ec2/userguide/ec2-auto-scaling-launch-template-permissions.html).

Only IAM, S3, SSM and Route 53 resources get real ARNs; other services' statements are conditioned on tags, not ARNs, so
their requests name a placeholder ARN of the right service. What IAM really evaluates can differ in detail (a
request touching several objects is authorized once per object); this model is the test's, not a simulator.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from neurondeploy.aws.iam_policy import IMPLIED, authorization_table, iam_action
from neurondeploy.aws.policy_evaluation import Authorization
from neurondeploy.catalog._data import load
from neurondeploy.resources.model import Request, Resource
from neurondeploy.resources.refs import contains_ref, find_refs, is_ref, resolve
from neurondeploy.resources.tags import MANAGED_BY_TAG, tag_dict

ROLE_KEYS = {"ExecutionRoleArn": "sagemaker.amazonaws.com", "RoleArn": "sagemaker.amazonaws.com"}


def request_tags(params: Mapping) -> dict[str, str]:
    """The tags a request gives the object it makes (top level only: a launch template's instance tags are the
    instances', given when they launch)."""
    found = tag_dict(params.get("Tags"))
    for specification in params.get("TagSpecifications") or []:
        found.update(tag_dict(specification.get("Tags")))
    return found


def _tag_context(request: dict[str, str], resource: dict[str, str] | None) -> dict:
    context: dict = {}
    if request:
        context.update({f"aws:RequestTag/{k}": v for k, v in request.items()})
        context["aws:TagKeys"] = tuple(request)
    if resource:
        context.update({f"aws:ResourceTag/{k}": v for k, v in resource.items()})
    return context


class DeploymentAuthorizations:
    """The authorizations of every request of ``resources`` (one deployment's plan) in ``account``/``region``."""

    def __init__(self, resources: Sequence[Resource], account: str, region: str) -> None:
        self.resources = {resource.name: resource for resource in resources}
        self.account = account
        self.region = region
        self.ownership = next(
            (tags for r in resources for q in r.create[:1] if (tags := request_tags(q.params)).get(MANAGED_BY_TAG)),
            {},
        )

    # -- resource ARNs ---------------------------------------------------------------------------------------
    def _iam_path(self, name_key: str, name) -> str:
        """The path the plan makes a role or instance profile under; ``/`` for one it does not make."""
        for resource in self.resources.values():
            for request in resource.create:
                if request.params.get(name_key) == name and "Path" in request.params:
                    return request.params["Path"]
        return "/"

    def role_arn(self, value) -> str:
        """A role ARN given literally or as a ref to a role of the plan."""
        if not is_ref(value):
            return value
        (resource_name, _), *_ = find_refs(value)
        create = self.resources[resource_name].create[0].params
        return f"arn:aws:iam::{self.account}:role{create.get('Path', '/')}{create['RoleName']}"

    def _boundary(self, params: Mapping) -> dict:
        """``iam:PermissionsBoundary`` of a role request: the one CreateRole gives, or the one the plan's role has."""
        create = params if "AssumeRolePolicyDocument" in params else None
        if create is None and "RoleName" in params:
            named = self.role_arn(params["RoleName"]) if is_ref(params["RoleName"]) else params["RoleName"]
            create = next(
                (
                    r.create[0].params
                    for r in self.resources.values()
                    if r.create
                    and r.create[0].operation == "CreateRole"
                    and r.create[0].params["RoleName"] == named.rsplit("/", 1)[-1]
                ),
                None,
            )
        boundary = (create or {}).get("PermissionsBoundary")
        if boundary is None:
            return {}
        # The only ref in it is the account's (naming.account), known here.
        return {"iam:PermissionsBoundary": resolve(boundary, dict.fromkeys(find_refs(boundary), self.account))}

    def _record_context(self, params: Mapping) -> dict:
        changes = params["ChangeBatch"]["Changes"]
        names = []
        for change in changes:
            name = change["ResourceRecordSet"]["Name"]
            if contains_ref(name):  # ACM's validation record, _<32 hex>.<the certificate's domain>
                name = f"_{'0' * 32}.{self._certificate_domain()}"
            names.append(name.rstrip(".").lower())
        return {
            "route53:ChangeResourceRecordSetsNormalizedRecordNames": tuple(names),
            "route53:ChangeResourceRecordSetsRecordTypes": tuple(c["ResourceRecordSet"]["Type"] for c in changes),
            "route53:ChangeResourceRecordSetsActions": tuple(c["Action"] for c in changes),
        }

    def _certificate_domain(self) -> str:
        return next(
            r.create[0].params["DomainName"]
            for r in self.resources.values()
            if r.create and r.create[0].operation == "RequestCertificate"
        )

    def _resource_arn(self, request: Request) -> str:
        params = request.params
        if request.service == "route53" and "HostedZoneId" in params:
            return f"arn:aws:route53:::hostedzone/{params['HostedZoneId'].removeprefix('/hostedzone/')}"
        if request.service == "iam":
            if "InstanceProfileName" in params:
                name = params["InstanceProfileName"]
                return (
                    f"arn:aws:iam::{self.account}:instance-profile{self._iam_path('InstanceProfileName', name)}{name}"
                )
            if "RoleName" in params:
                name = params["RoleName"]
                name = self.role_arn(name).rsplit("/", 1)[1] if is_ref(name) else name
                return f"arn:aws:iam::{self.account}:role{self._iam_path('RoleName', name)}{name}"
            return "*"
        if request.service == "s3":
            key = params.get("Key")
            return f"arn:aws:s3:::{params.get('Bucket', '')}" + (f"/{key}" if key else "")
        if request.service == "ssm":
            return f"arn:aws:ssm:{self.region}::parameter{params.get('Name', '')}"
        return f"arn:aws:{iam_action(request.service, request.operation).split(':')[0]}:{self.region}:{self.account}:*"

    # -- authorizations --------------------------------------------------------------------------------------
    def _acts_on_existing(self, resource: Resource, request: Request, makes_object: bool) -> bool:
        if not makes_object:
            return True
        named = {name for name, _ in find_refs(request.params)} - {resource.name}
        return any(self.resources.get(name) and not self.resources[name].is_lookup for name in named)

    def of_request(self, resource: Resource, request: Request, makes_object: bool) -> Iterator[Authorization]:
        action = iam_action(request.service, request.operation)
        given = request_tags(request.params)
        own_tags = request_tags(resource.create[0].params) if resource.create else {}
        existing = (own_tags or self.ownership) if self._acts_on_existing(resource, request, makes_object) else None
        context = {**_tag_context(given, existing), "aws:PrincipalAccount": self.account}
        if action in ("iam:CreateRole", "iam:PutRolePolicy", "iam:AttachRolePolicy", "iam:PutRolePermissionsBoundary"):
            context.update(self._boundary(request.params))
        if action == "route53:ChangeResourceRecordSets":
            context.update(self._record_context(request.params))
        yield Authorization(action, self._resource_arn(request), context)
        table = authorization_table()
        prefix = action.split(":")[0]
        key = load("iam_authorization")["services"].get(prefix, {}).get("create_action_key")
        if given and key:
            for tagging in table.get(action, {}).get("dependent", []):
                if table.get(tagging, {}).get("access") == "Tagging":
                    yield Authorization(tagging, "*", {**context, key: request.operation})
        for param, service in ROLE_KEYS.items():
            if param in request.params:
                role = self.role_arn(request.params[param])
                yield Authorization("iam:PassRole", role, {"iam:PassedToService": service})
        if action.startswith("autoscaling:") and action in IMPLIED:
            yield from self._launches(request, given or self.ownership)
        elif action == "ec2:CreateFlowLogs":
            bucket = request.params["LogDestination"].split(":::", 1)[1].split("/", 1)[0]
            yield Authorization("logs:CreateLogDelivery", "*", {})
            for bucket_action in ("s3:GetBucketPolicy", "s3:PutBucketPolicy"):
                yield Authorization(bucket_action, f"arn:aws:s3:::{bucket}", {})
        elif action in IMPLIED:
            yield from (Authorization(extra, "*", {}) for extra in IMPLIED[action])

    def _launches(self, request: Request, group_tags: dict[str, str]) -> Iterator[Authorization]:
        """An Auto Scaling group's launches: RunInstances with its tags, PassRole for the instance profile."""
        template = next((r for r in self.resources.values() if r.type == "ec2:launch-template"), None)
        if template is None:
            return
        yield Authorization("ec2:RunInstances", self._resource_arn(request), _tag_context(group_tags, None))
        yield Authorization(
            "ec2:CreateTags", "*", {**_tag_context(group_tags, None), "ec2:CreateAction": "RunInstances"}
        )
        data = template.create[0].params.get("LaunchTemplateData", {})
        if data.get("IamInstanceProfile"):
            for resource in self.resources.values():
                for step in resource.create:
                    if step.operation == "AddRoleToInstanceProfile":
                        role = self.role_arn(step.params["RoleName"])
                        yield Authorization("iam:PassRole", role, {"iam:PassedToService": "ec2.amazonaws.com"})

    def all(self) -> Iterator[tuple[str, Request, Authorization]]:
        """(resource name, request, authorization) for every create, update and delete request of the plan."""
        for resource in self.resources.values():
            for index, request in enumerate(resource.create):
                for authorization in self.of_request(resource, request, makes_object=index == 0):
                    yield resource.name, request, authorization
            for request in (*resource.update, *resource.delete):
                for authorization in self.of_request(resource, request, makes_object=False):
                    yield resource.name, request, authorization
