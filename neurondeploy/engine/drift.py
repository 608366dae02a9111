"""`drift NAME`: what changed outside the tool since apply.

For each recorded, complete resource (lookups skipped), :data:`CHECKS` says how to describe it from what
state recorded (its outputs, and the ids its resolved delete requests name), how to tell it is gone, and which
live attributes to compare with the create requests that made it. Three kinds of finding:

- ``missing``: the describe says it does not exist (or it is being deleted);
- ``changed``: a compared attribute differs from what the create requests asked for, or a bad state;
- ``untagged``: a taggable resource no longer carries ``neurondeploy:deployment=<name>``.

The expected values come from create requests: the plan's :class:`Resource` objects passed as ``resources``
(refs resolved from state's outputs), or a ``create_requests`` list on the recorded resource when the state
schema keeps one (``[{"service", "operation", "params"}]``, like ``delete_requests``). Without either, only
existence and tags are checked, plus Route 53 records, whose recorded delete request holds the whole record.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from neurondeploy.resources.refs import ref, resolve
from neurondeploy.resources.naming import DEPLOYMENT_TAG
from neurondeploy.resources.model import Request, Resource
from neurondeploy.engine.state import ResourceState, StateStore
from neurondeploy.engine.sweep import is_gone
from neurondeploy.aws.transport import AwsCallError, AwsTransport

__all__ = ["CHECKS", "Check", "DriftItem", "drift"]


@dataclass
class DriftItem:
    resource: str  # logical name in state
    type: str
    kind: str  # "missing" | "changed" | "untagged"
    detail: str


@dataclass(frozen=True)
class Attr:
    """Live value at ``live`` (JMESPath into the described object) must equal the value at ``expected``
    (JMESPath into the params of the create request ``operation``)."""

    label: str
    live: str
    operation: str
    expected: str
    unordered: bool = False  # compare lists as sets


@dataclass(frozen=True)
class Check:
    describe: Request  # its params name the resource by ``${it.<Id>}`` refs to its ids (outputs + delete params)
    found: str  # JMESPath to the object in the response; nothing there means missing
    attrs: tuple[Attr, ...] = ()
    gone: tuple[str, tuple[str, ...]] | None = None  # (state path, values): exists but on its way out
    bad: tuple[str, tuple[str, ...]] | None = None  # (state path, values): reported as changed
    tags: str | Callable[[AwsTransport, dict, Mapping[str, Any]], Any] | None = "Tags"
    extra: Callable[[AwsTransport, dict, Mapping[str, Any], _Expected], list[str]] | None = None


# --- extra comparisons ---------------------------------------------------------------------------------------


def _rule_set(permissions: Iterable[dict]) -> set[tuple]:
    """IpPermissions as comparable rules: (protocol, from, to, source)."""
    rules = set()
    for p in permissions or []:
        key = (str(p.get("IpProtocol")), p.get("FromPort"), p.get("ToPort"))
        if key[0] == "-1":
            key = ("-1", None, None)
        sources = [f"cidr {r['CidrIp']}" for r in p.get("IpRanges", [])]
        sources += [f"cidr6 {r['CidrIpv6']}" for r in p.get("Ipv6Ranges", [])]
        sources += [f"group {g['GroupId']}" for g in p.get("UserIdGroupPairs", [])]
        sources += [f"prefix-list {x['PrefixListId']}" for x in p.get("PrefixListIds", [])]
        rules.update((*key, source) for source in sources)
    return rules


def _show(rule: tuple) -> str:
    protocol, low, high, source = rule
    ports = "all" if protocol == "-1" else f"{protocol} {low}" + (f"-{high}" if high != low else "")
    return f"{ports} from {source}"


def _ingress(transport: AwsTransport, group: dict, ids: Mapping, expected: _Expected) -> list[str]:
    # Egress is not compared here: the one egress rule we add is its own resource (ec2:security-group-rule).
    wanted = [p for params in expected.all("AuthorizeSecurityGroupIngress") for p in params.get("IpPermissions", [])]
    if not expected.has("CreateSecurityGroup"):
        return []  # no create requests known: nothing to compare with
    want, have = _rule_set(wanted), _rule_set(group.get("IpPermissions"))
    problems = [f"ingress rule added outside the tool: {_show(r)}" for r in sorted(have - want, key=str)]
    problems += [f"ingress rule removed: {_show(r)}" for r in sorted(want - have, key=str)]
    return problems


def _routes(transport: AwsTransport, table: dict, ids: Mapping, expected: _Expected) -> list[str]:
    problems = []
    live = {(r.get("DestinationCidrBlock"), r.get("GatewayId") or r.get("NatGatewayId")): r.get("State")
            for r in table.get("Routes", [])}
    for params in expected.all("CreateRoute"):
        target = params.get("GatewayId") or params.get("NatGatewayId")
        state = live.get((params.get("DestinationCidrBlock"), target))
        if state is None:
            problems.append(f"route {params.get('DestinationCidrBlock')} -> {target} removed")
        elif state != "active":
            problems.append(f"route {params.get('DestinationCidrBlock')} -> {target} is {state}")
    return problems


def _association(transport: AwsTransport, table: dict, ids: Mapping, expected: _Expected) -> list[str]:
    mine = [a for a in table.get("Associations", []) if a.get("RouteTableAssociationId") == ids.get("AssociationId")]
    want = expected.value("AssociateRouteTable", "SubnetId")
    if mine and want is not None and mine[0].get("SubnetId") != want:
        return [f"associated with {mine[0].get('SubnetId')}, not {want}"]
    return []


def _role(transport: AwsTransport, role: dict, ids: Mapping, expected: _Expected) -> list[str]:
    problems = []
    name = role["RoleName"]
    trust = expected.value("CreateRole", "AssumeRolePolicyDocument")
    if trust is not None and _policy(role.get("AssumeRolePolicyDocument")) != _policy(trust):
        problems.append("trust policy changed")
    for params in expected.all("PutRolePolicy"):
        try:
            got = transport.call("iam", "GetRolePolicy", {"RoleName": name, "PolicyName": params["PolicyName"]})
        except AwsCallError as exc:
            if not is_gone(exc):
                raise
            problems.append(f"inline policy {params['PolicyName']} removed")
            continue
        if _policy(got.get("PolicyDocument")) != _policy(params["PolicyDocument"]):
            problems.append(f"inline policy {params['PolicyName']} changed")
    attached = transport.call("iam", "ListAttachedRolePolicies", {"RoleName": name}).get("AttachedPolicies", [])
    if attached:  # we never attach managed policies
        problems.append("managed policies attached: " + ", ".join(p["PolicyName"] for p in attached))
    return problems


def _policy(document: Any) -> Any:
    if isinstance(document, str):
        try:
            return json.loads(unquote(document) if document.startswith("%7B") else document)
        except ValueError:
            return document
    return document


def _record(transport: AwsTransport, record: dict, ids: Mapping, expected: _Expected) -> list[str]:
    want = ids.get("_record") or {}
    problems = []
    if "TTL" in want and record.get("TTL") != want["TTL"]:
        problems.append(f"TTL {record.get('TTL')}, expected {want['TTL']}")
    values = lambda r: sorted(v.get("Value") for v in r.get("ResourceRecords", []))
    if "ResourceRecords" in want and values(record) != values(want):
        problems.append(f"values {values(record)}, expected {values(want)}")
    if "AliasTarget" in want:
        live = _dns((record.get("AliasTarget") or {}).get("DNSName", ""))
        target = _dns(want["AliasTarget"].get("DNSName", ""))
        if live.removeprefix("dualstack.") != target.removeprefix("dualstack."):
            problems.append(f"alias target {live or 'none'}, expected {target}")
    return problems


def _dns(name: str) -> str:
    return name.lower().rstrip(".")


# --- tag readers (for services whose describe does not return tags) ------------------------------------------


def _elb_tags(transport: AwsTransport, obj: dict, ids: Mapping) -> Any:
    arn = obj.get("LoadBalancerArn") or obj.get("TargetGroupArn") or obj.get("ListenerArn")
    descriptions = transport.call("elbv2", "DescribeTags", {"ResourceArns": [arn]}).get("TagDescriptions", [])
    return descriptions[0].get("Tags") if descriptions else []


def _acm_tags(transport: AwsTransport, obj: dict, ids: Mapping) -> Any:
    return transport.call("acm", "ListTagsForCertificate", {"CertificateArn": obj["CertificateArn"]}).get("Tags")


def _sagemaker_tags(arn_key: str):
    return lambda transport, obj, ids: transport.call("sagemaker", "ListTags", {"ResourceArn": obj[arn_key]}).get("Tags")


# --- the table -------------------------------------------------------------------------------------------------


def _it(attribute: str) -> str:
    """The ref a describe uses for one of the recorded resource's ids (its outputs and delete params)."""
    return ref("it", attribute)


# Every type the EC2 + ALB + DNS + TLS template and the SageMaker endpoint create. A type with no attrs/extra
# is checked for existence (and tags) only: launch templates (versions are immutable and the group pins one),
# Elastic IPs (nothing of ours to compare), SageMaker models and endpoint configs (immutable: a change makes
# new ones under a new name). Scalable targets' tags are not read (moto has no ListTagsForResource for them).
CHECKS: dict[str, Check] = {
    "ec2:vpc": Check(Request("ec2", "DescribeVpcs", {"VpcIds": [_it("VpcId")]}), "Vpcs[0]",
                     (Attr("CIDR", "CidrBlock", "CreateVpc", "CidrBlock"),)),
    "ec2:subnet": Check(Request("ec2", "DescribeSubnets", {"SubnetIds": [_it("SubnetId")]}), "Subnets[0]", (
        Attr("CIDR", "CidrBlock", "CreateSubnet", "CidrBlock"),
        Attr("availability zone", "AvailabilityZone", "CreateSubnet", "AvailabilityZone"),
        Attr("public IP on launch", "MapPublicIpOnLaunch", "ModifySubnetAttribute", "MapPublicIpOnLaunch.Value"))),
    "ec2:internet-gateway": Check(Request("ec2", "DescribeInternetGateways", {"InternetGatewayIds": [_it("InternetGatewayId")]}),
                                  "InternetGateways[0]",
                                  (Attr("attached VPC", "Attachments[0].VpcId", "AttachInternetGateway", "VpcId"),)),
    "ec2:route-table": Check(Request("ec2", "DescribeRouteTables", {"RouteTableIds": [_it("RouteTableId")]}),
                             "RouteTables[0]", extra=_routes),
    "ec2:route-table-association": Check(
        Request("ec2", "DescribeRouteTables",
                {"Filters": [{"Name": "association.route-table-association-id", "Values": [_it("AssociationId")]}]}),
        "RouteTables[0]", extra=_association, tags=None),
    "ec2:elastic-ip": Check(Request("ec2", "DescribeAddresses", {"AllocationIds": [_it("AllocationId")]}), "Addresses[0]"),
    "ec2:nat-gateway": Check(Request("ec2", "DescribeNatGateways", {"NatGatewayIds": [_it("NatGatewayId")]}), "NatGateways[0]",
                             (Attr("subnet", "SubnetId", "CreateNatGateway", "SubnetId"),),
                             gone=("State", ("deleting", "deleted")), bad=("State", ("failed",))),
    "ec2:security-group": Check(Request("ec2", "DescribeSecurityGroups", {"GroupIds": [_it("GroupId")]}),
                                "SecurityGroups[0]", extra=_ingress),
    "ec2:security-group-rule": Check(
        Request("ec2", "DescribeSecurityGroupRules", {"SecurityGroupRuleIds": [_it("SecurityGroupRuleId")]}),
        "SecurityGroupRules[0]", (
            Attr("protocol", "IpProtocol", "AuthorizeSecurityGroupEgress", "IpPermissions[0].IpProtocol"),
            Attr("port", "FromPort", "AuthorizeSecurityGroupEgress", "IpPermissions[0].FromPort"),
            Attr("referenced group", "ReferencedGroupInfo.GroupId", "AuthorizeSecurityGroupEgress",
                 "IpPermissions[0].UserIdGroupPairs[0].GroupId"))),
    "ec2:launch-template": Check(Request("ec2", "DescribeLaunchTemplates", {"LaunchTemplateIds": [_it("LaunchTemplateId")]}),
                                 "LaunchTemplates[0]"),
    "elbv2:load-balancer": Check(Request("elbv2", "DescribeLoadBalancers", {"LoadBalancerArns": [_it("LoadBalancerArn")]}),
                                 "LoadBalancers[0]", (
                                     Attr("scheme", "Scheme", "CreateLoadBalancer", "Scheme"),
                                     Attr("security groups", "SecurityGroups", "CreateLoadBalancer", "SecurityGroups", True)),
                                 bad=("State.Code", ("failed",)), tags=_elb_tags),
    "elbv2:target-group": Check(Request("elbv2", "DescribeTargetGroups", {"TargetGroupArns": [_it("TargetGroupArn")]}),
                                "TargetGroups[0]", (
                                    Attr("port", "Port", "CreateTargetGroup", "Port"),
                                    Attr("protocol", "Protocol", "CreateTargetGroup", "Protocol"),
                                    Attr("health check path", "HealthCheckPath", "CreateTargetGroup", "HealthCheckPath"),
                                    Attr("health check codes", "Matcher.HttpCode", "CreateTargetGroup", "Matcher.HttpCode")),
                                tags=_elb_tags),
    "elbv2:listener": Check(Request("elbv2", "DescribeListeners", {"ListenerArns": [_it("ListenerArn")]}), "Listeners[0]", (
        Attr("port", "Port", "CreateListener", "Port"),
        Attr("protocol", "Protocol", "CreateListener", "Protocol"),
        Attr("certificate", "Certificates[0].CertificateArn", "CreateListener", "Certificates[0].CertificateArn"),
        Attr("default action", "DefaultActions[0].Type", "CreateListener", "DefaultActions[0].Type")), tags=_elb_tags),
    "acm:certificate": Check(Request("acm", "DescribeCertificate", {"CertificateArn": _it("CertificateArn")}), "Certificate",
                             (Attr("domain", "DomainName", "RequestCertificate", "DomainName"),),
                             bad=("Status", ("EXPIRED", "REVOKED", "FAILED", "VALIDATION_TIMED_OUT")), tags=_acm_tags),
    # The recorded delete request holds the whole record: what it should be, with or without create requests.
    "route53:record": Check(Request("route53", "ListResourceRecordSets", {
        "HostedZoneId": _it("HostedZoneId"), "StartRecordName": _it("RecordName"), "StartRecordType": _it("RecordType"),
        "MaxItems": "1"}), "ResourceRecordSets[0]", extra=_record, tags=None),
    "iam:role": Check(Request("iam", "GetRole", {"RoleName": _it("RoleName")}), "Role", extra=_role),
    "iam:instance-profile": Check(Request("iam", "GetInstanceProfile", {"InstanceProfileName": _it("InstanceProfileName")}),
                                  "InstanceProfile",
                                  (Attr("role", "Roles[0].RoleName", "AddRoleToInstanceProfile", "RoleName"),)),
    "autoscaling:group": Check(
        Request("autoscaling", "DescribeAutoScalingGroups", {"AutoScalingGroupNames": [_it("AutoScalingGroupName")]}),
        "AutoScalingGroups[0]", (
            Attr("min size", "MinSize", "CreateAutoScalingGroup", "MinSize"),
            Attr("max size", "MaxSize", "CreateAutoScalingGroup", "MaxSize"),
            # Desired capacity moves with scaling; compared only for a fixed-size group (min == max).
            Attr("desired capacity", "DesiredCapacity", "CreateAutoScalingGroup",
                 "MinSize == MaxSize && DesiredCapacity || `null`"),
            Attr("launch template", "LaunchTemplate.LaunchTemplateId", "CreateAutoScalingGroup", "LaunchTemplate.LaunchTemplateId"),
            Attr("target groups", "TargetGroupARNs", "CreateAutoScalingGroup", "TargetGroupARNs", True)),
        gone=("Status", ("Delete in progress",))),
    "sagemaker:model": Check(Request("sagemaker", "DescribeModel", {"ModelName": _it("ModelName")}), "@",
                             tags=_sagemaker_tags("ModelArn")),
    "sagemaker:endpoint-config": Check(Request("sagemaker", "DescribeEndpointConfig", {"EndpointConfigName": _it("EndpointConfigName")}),
                                       "@", tags=_sagemaker_tags("EndpointConfigArn")),
    "sagemaker:endpoint": Check(Request("sagemaker", "DescribeEndpoint", {"EndpointName": _it("EndpointName")}), "@",
                                (Attr("endpoint config", "EndpointConfigName", "CreateEndpoint", "EndpointConfigName"),),
                                gone=("EndpointStatus", ("Deleting",)), bad=("EndpointStatus", ("Failed", "OutOfService")),
                                tags=_sagemaker_tags("EndpointArn")),
    "application-autoscaling:scalable-target": Check(
        Request("application-autoscaling", "DescribeScalableTargets", {
            "ServiceNamespace": _it("ServiceNamespace"), "ResourceIds": [_it("ResourceId")],
            "ScalableDimension": _it("ScalableDimension")}),
        "ScalableTargets[0]", (
            Attr("min capacity", "MinCapacity", "RegisterScalableTarget", "MinCapacity"),
            Attr("max capacity", "MaxCapacity", "RegisterScalableTarget", "MaxCapacity")), tags=None),
}
# Not checked: sagemaker:training-job (a job ends by design; `status` reports it) and lookups (read-only).


# --- running --------------------------------------------------------------------------------------------------


class _Expected:
    """The resolved create requests of one resource, by operation."""

    def __init__(self, requests: list[tuple[str, dict]]) -> None:
        self.requests = requests

    def has(self, operation: str) -> bool:
        return any(op == operation for op, _ in self.requests)

    def all(self, operation: str) -> list[dict]:
        return [params for op, params in self.requests if op == operation]

    def value(self, operation: str, path: str) -> Any:
        import jmespath

        for params in self.all(operation):
            found = jmespath.search(path, params)
            if found is not None:
                return found
        return None


def drift(name: str, transport: AwsTransport, state: StateStore, *,
          resources: Iterable[Resource] | None = None) -> list[DriftItem]:
    """Compare every recorded, complete resource of deployment ``name`` with what exists (module doc)."""
    deployment = state.get(name)
    if deployment is None:
        return []
    planned = {r.name: r for r in resources or ()}
    outputs = {(r.name, attr): value for r in deployment.resources.values() for attr, value in r.outputs.items()}
    items: list[DriftItem] = []
    for recorded in deployment.resources.values():
        check = CHECKS.get(recorded.type)
        if recorded.type.endswith("-lookup") or not recorded.complete or check is None:
            continue
        expected = _Expected(_create_requests(recorded, planned.get(recorded.name), outputs))
        items += _check(name, transport, recorded, check, _ids(recorded, outputs), expected)
    return items


def _create_requests(recorded: ResourceState, planned: Resource | None, outputs: Mapping) -> list[tuple[str, dict]]:
    if planned is not None:
        raw = [(r.operation, r.params) for r in planned.create]
    else:
        raw = [(r.get("operation"), r.get("params", {})) for r in getattr(recorded, "create_requests", None) or []]
    requests = []
    for operation, params in raw:
        try:
            requests.append((operation, resolve(params, outputs)))
        except KeyError:
            continue  # a value known only to a resource not in state: nothing to compare for this request
    return requests


def _ids(recorded: ResourceState, outputs: Mapping) -> dict[str, Any]:
    """What a describe can address the resource by: the delete requests' params (state keeps them with their
    ${refs}; resolved here from every resource's outputs), then the outputs."""
    ids: dict[str, Any] = {}
    for request in recorded.delete_requests:
        try:
            params = resolve(request.get("params", {}), outputs)
        except KeyError:
            params = request.get("params", {})
        ids.update({k: v for k, v in params.items() if not isinstance(v, (dict, list))})
        if request.get("service") == "route53":
            changes = params.get("ChangeBatch", {}).get("Changes", [])
            if changes:
                record = changes[0].get("ResourceRecordSet") or {}
                ids.update({"_record": record, "RecordName": record.get("Name"), "RecordType": record.get("Type")})
    ids.update(recorded.outputs)
    return ids


def _check(deployment: str, transport: AwsTransport, recorded: ResourceState, check: Check, ids: Mapping,
           expected: _Expected) -> list[DriftItem]:
    import jmespath

    item = lambda kind, detail: DriftItem(recorded.name, recorded.type, kind, detail)
    describe = check.describe
    try:
        params = resolve(describe.params, {("it", key): value for key, value in ids.items()})
    except KeyError:
        return []  # state holds no id to look it up by (not a finding about AWS)
    try:
        response = transport.call(describe.service, describe.operation, params)
    except AwsCallError as exc:
        if is_gone(exc):
            return [item("missing", f"{describe.operation}: {exc.message}")]
        raise
    obj = jmespath.search(check.found, response)
    if recorded.type == "route53:record" and obj is not None:
        want = ids.get("_record") or {}
        if _dns(obj.get("Name", "")) != _dns(want.get("Name", "")) or obj.get("Type") != want.get("Type"):
            obj = None  # ListResourceRecordSets starts at the name: the next record is not this one
    if not obj:
        return [item("missing", f"{describe.operation} finds nothing")]
    if check.gone and jmespath.search(check.gone[0], obj) in check.gone[1]:
        return [item("missing", f"{check.gone[0]} is {jmespath.search(check.gone[0], obj)}")]
    items = []
    if check.bad and jmespath.search(check.bad[0], obj) in check.bad[1]:
        items.append(item("changed", f"{check.bad[0]} is {jmespath.search(check.bad[0], obj)}"))
    for attr in check.attrs:
        want = expected.value(attr.operation, attr.expected)
        if want is None:
            continue
        have = jmespath.search(attr.live, obj)
        if not _equal(have, want, attr.unordered):
            items.append(item("changed", f"{attr.label} is {have!r}, expected {want!r}"))
    if check.extra:
        items += [item("changed", detail) for detail in check.extra(transport, obj, ids, expected)]
    if recorded.taggable and check.tags:
        tags = check.tags(transport, obj, ids) if callable(check.tags) else jmespath.search(check.tags, obj)
        if _tag(tags, DEPLOYMENT_TAG) != deployment:
            items.append(item("untagged", f"{DEPLOYMENT_TAG} is {_tag(tags, DEPLOYMENT_TAG)!r}, expected {deployment!r}"))
    return items


def _tag(tags: Any, key: str) -> str | None:
    if isinstance(tags, dict):
        return tags.get(key)
    return next((t.get("Value") for t in tags or [] if t.get("Key") == key), None)


def _equal(have: Any, want: Any, unordered: bool) -> bool:
    if unordered and isinstance(have, list) and isinstance(want, list):
        return sorted(map(str, have)) == sorted(map(str, want))
    if isinstance(have, (int, float)) and isinstance(want, (int, float)) and not isinstance(have, bool):
        return float(have) == float(want)
    return have == want
