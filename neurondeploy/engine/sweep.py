"""The tag sweep: find (and delete) everything still carrying ``neurondeploy:deployment=<name>``.

State can be lost, an apply can die between a create call and its state write, and someone can copy a
resource by hand: destroy does not trust state alone. :func:`find_leftovers` asks two kinds of source:

- per-service describes, filtered by our tag (EC2) or listed and then checked tag by tag (ELB, Auto Scaling,
  IAM under our role path, ACM, SageMaker). They are authoritative: they see exactly what exists now;
- the Resource Groups Tagging API (GetResources), for anything tagged ours of a type we do not describe. It is
  an eventually consistent index that keeps deleted resources for a while (and terminated instances), so an
  ARN of a type the describes cover counts only if a describe confirms it; the describes win duplicates.

Route 53 records cannot be tagged: in the given hosted zones, ours are the ownership TXT records
``_neurondeploy.<record_name>`` whose value is ``"deployment=<name>"`` (:mod:`neurondeploy.resources.route53`), the
A/AAAA/CNAME records at the names they vouch for, and the DNS-validation CNAMEs of our certificates at such
names.

:data:`DELETE_ORDER` says in which order leftover types are deleted: dependents before what they use.
Every call goes through :meth:`AwsTransport.call`, so it is validated strictly and logged.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from neurondeploy.errors import NeurondeployError
from neurondeploy.resources.route53 import OWNER_PREFIX
from neurondeploy.resources.iam import ROLE_PATH
from neurondeploy.resources.naming import DEPLOYMENT_TAG
from neurondeploy.aws.transport import AwsCallError, AwsTransport

# Deletion order of leftover types: dependents first. The order is a subsequence:
# instances -> target registration -> listeners -> ALB -> target group -> certificate -> records -> security
# groups -> subnets -> route tables -> internet gateways -> VPC. Additions, each where it must be:
# SageMaker (scaling target, endpoint, config, model) and Auto Scaling groups before the instances they run;
# the launch template and instance profile/role once no instance uses them; the NAT gateway (it sits in a
# subnet and holds its Elastic IP) and leftover network interfaces/volumes before security groups and subnets.
# Ownership TXT records go after the records they vouch for (created first, deleted last).
DELETE_ORDER: tuple[str, ...] = (
    "application-autoscaling:scalable-target",
    "sagemaker:endpoint",
    "sagemaker:endpoint-config",
    "sagemaker:model",
    "sagemaker:training-job",  # cannot be deleted: a running one is stopped
    "autoscaling:group",
    "ec2:instance",
    "elbv2:target-registration",
    "elbv2:listener",
    "elbv2:load-balancer",
    "elbv2:target-group",
    "acm:certificate",
    "route53:record",
    "route53:owner-record",
    "ec2:launch-template",
    "iam:instance-profile",
    "iam:role",
    "ec2:nat-gateway",
    "ec2:elastic-ip",
    "ec2:network-interface",
    "ec2:volume",
    "ec2:security-group-rule",
    "ec2:security-group",
    "ec2:subnet",
    "ec2:route-table",
    "ec2:internet-gateway",
    "ec2:vpc",
)
UNCHECKED = "sweep:unchecked"  # a source that could not be read: nothing can be proven about it

# "Already gone" answers of delete calls and describes.
GONE_CODES = ("NotFound", "NoSuchEntity", "NoSuchHostedZone", "ResourceNotFound", "LoadBalancerNotFound",
              "TargetGroupNotFound", "ListenerNotFound", "InvalidTarget", "Gateway.NotAttached",
              "InvalidAssociationID.NotFound", "InvalidAllocationID.NotFound", "InvalidPermission.NotFound")
GONE_MESSAGES = ("not found", "does not exist", "could not find", "cannot find")
# "Not yet": something still uses the resource (ENIs of a deleted ALB or instance linger for minutes).
RETRY_CODES = ("DependencyViolation", "ResourceInUse", "ResourceInUseException", "ScalingActivityInProgress",
               "InvalidNetworkInterface.InUse", "VolumeInUse", "DeleteConflict", "IncorrectState")

_INSTANCE_STATES = ["pending", "running", "stopping", "stopped"]  # not shutting-down / terminated
_NAT_STATES = ["pending", "available", "deleting", "failed"]
_VOLUME_STATES = ["creating", "available", "in-use", "error"]
_ELB_TAGS_PER_CALL = 20
_RECORD_TYPES = ("A", "AAAA", "CNAME")


@dataclass
class Leftover:
    type: str  # a resource type as the builders name it ("ec2:vpc"), or UNCHECKED
    id: str  # what its delete call takes: EC2 id, ARN, name; records "<zone>|<type>|<name>"
    region: str  # "global" for IAM and Route 53
    detail: str


def is_gone(error: AwsCallError) -> bool:
    if error.code and any(marker in error.code for marker in GONE_CODES):
        return True
    return error.code in ("ValidationError", "ValidationException", "InvalidParameterValue", "InvalidInput") and \
        any(marker in error.message.lower() for marker in GONE_MESSAGES)


def is_retryable(error: AwsCallError) -> bool:
    return error.code in RETRY_CODES


def order_index(leftover_type: str) -> int:
    """Position in :data:`DELETE_ORDER`; unknown types (found only by the tagging API) go last."""
    try:
        return DELETE_ORDER.index(leftover_type)
    except ValueError:
        return len(DELETE_ORDER)


def sort_leftovers(leftovers: Iterable[Leftover]) -> list[Leftover]:
    return sorted(leftovers, key=lambda l: order_index(l.type))  # stable: discovery order within a type




# --- finding --------------------------------------------------------------------------------------------------


def find_leftovers(transport: AwsTransport, deployment: str, *, hosted_zone_ids: Iterable[str] = ()) -> list[Leftover]:
    """Everything of ``deployment`` that still exists, in :data:`DELETE_ORDER`. A source that cannot be read
    (access denied, an API the endpoint lacks) becomes an :data:`UNCHECKED` leftover rather than silence."""
    found: dict[tuple[str, str], Leftover] = {}
    region = transport.region

    def add(kind: str, ident: str, detail: str, where: str = region) -> None:
        key = (kind, ident.lower() if kind.startswith("sagemaker:") else ident)  # SageMaker ARNs lower-case names
        found.setdefault(key, Leftover(kind, ident, where, detail))

    finder = _Finder(transport, deployment, add)
    finder.ec2()
    for label, fn in [("elbv2", finder.elbv2), ("autoscaling", finder.autoscaling), ("iam", finder.iam),
                      ("sagemaker", finder.sagemaker)]:
        finder.source(label, fn)
    certificates = finder.source("acm", finder.acm) or []
    for zone in dict.fromkeys(zone_id(z) for z in hosted_zone_ids):
        finder.source(f"route53 zone {zone}", finder.records, zone, certificates)
    finder.source("resourcegroupstaggingapi", finder.tagging_api)
    return sort_leftovers(found.values())


def find_owned_records(transport: AwsTransport, deployment: str, hosted_zone_ids: Iterable[str]) -> list[Leftover]:
    """Only the Route 53 part of :func:`find_leftovers`. Destroy runs it before the recorded delete removes
    the ownership TXT records that make the other records recognisable as ours."""
    found: dict[tuple[str, str], Leftover] = {}

    def add(kind: str, ident: str, detail: str, where: str = transport.region) -> None:
        found.setdefault((kind, ident), Leftover(kind, ident, where, detail))

    finder = _Finder(transport, deployment, add)
    for zone in dict.fromkeys(zone_id(z) for z in hosted_zone_ids):
        finder.source(f"route53 zone {zone}", finder.records, zone, [])
    return sort_leftovers(found.values())


def list_hosted_zones(transport: AwsTransport) -> list[str]:
    """Every hosted zone id of the account (destroy's fallback when state names none)."""
    pages = _Paged(transport, "Marker", "NextMarker").call("route53", "ListHostedZones", {})
    return [zone_id(z["Id"]) for page in pages for z in page.get("HostedZones", [])]


class _Paged:
    """``_Paged(transport).call(service, operation, params)``: every page of a paginated list call (each one
    a ``transport.call``). Spelt like a call so that :mod:`neurondeploy.aws.iam_policy` sees the operation."""

    def __init__(self, transport: AwsTransport, token_in: str = "NextToken", token_out: str | None = None) -> None:
        self.transport, self.token_in, self.token_out = transport, token_in, token_out or token_in

    def call(self, service: str, operation: str, params: dict) -> Iterator[dict]:
        params = dict(params)
        while True:
            page = self.transport.call(service, operation, params)
            yield page
            token = page.get(self.token_out)
            if not token or (service == "iam" and not page.get("IsTruncated")):
                return
            params[self.token_in] = token


class _Finder:
    def __init__(self, transport: AwsTransport, deployment: str, add) -> None:
        self.t, self.name, self.add = transport, deployment, add
        self.ours_filter = [{"Name": f"tag:{DEPLOYMENT_TAG}", "Values": [deployment]}]

    def source(self, label: str, fn, *args) -> Any:
        """Run one discovery; a failure becomes an UNCHECKED leftover, so destroy never calls it clean."""
        try:
            return fn(*args)
        except AwsCallError as exc:
            self.add(UNCHECKED, label, f"could not list: {exc.message}")
            return None

    def ec2(self) -> None:
        f = self.ours_filter
        paged = _Paged(self.t)

        def listing(pages: Iterator[dict], key: str, id_key: str, kind: str) -> None:
            for page in pages:
                for item in page.get(key, []):
                    self.add(kind, item[id_key], _ec2_detail(kind, item))

        def instances(pages: Iterator[dict]) -> None:
            for page in pages:
                for reservation in page.get("Reservations", []):
                    for i in reservation.get("Instances", []):
                        self.add("ec2:instance", i["InstanceId"], f"instance {i.get('InstanceType')} {i['State']['Name']}")

        def nat_gateways(pages: Iterator[dict]) -> None:
            for page in pages:
                for nat in page.get("NatGateways", []):
                    self.add("ec2:nat-gateway", nat["NatGatewayId"], f"NAT gateway {nat.get('State')} in {nat.get('SubnetId')}")

        def addresses() -> None:  # not paginated
            for address in self.t.call("ec2", "DescribeAddresses", {"Filters": f}).get("Addresses", []):
                self.add("ec2:elastic-ip", address["AllocationId"], f"Elastic IP {address.get('PublicIp')}")

        # Generators: each call happens inside source(), which turns a refusal into an UNCHECKED leftover.
        live = {"Name": "instance-state-name", "Values": _INSTANCE_STATES}
        self.source("ec2 DescribeInstances", instances, paged.call("ec2", "DescribeInstances", {"Filters": [*f, live]}))
        for label, pages, key, id_key, kind in [
            ("DescribeVpcs", paged.call("ec2", "DescribeVpcs", {"Filters": f}), "Vpcs", "VpcId", "ec2:vpc"),
            ("DescribeSubnets", paged.call("ec2", "DescribeSubnets", {"Filters": f}), "Subnets", "SubnetId", "ec2:subnet"),
            ("DescribeSecurityGroups", paged.call("ec2", "DescribeSecurityGroups", {"Filters": f}),
             "SecurityGroups", "GroupId", "ec2:security-group"),
            ("DescribeSecurityGroupRules", paged.call("ec2", "DescribeSecurityGroupRules", {"Filters": f}),
             "SecurityGroupRules", "SecurityGroupRuleId", "ec2:security-group-rule"),
            ("DescribeRouteTables", paged.call("ec2", "DescribeRouteTables", {"Filters": f}),
             "RouteTables", "RouteTableId", "ec2:route-table"),
            ("DescribeInternetGateways", paged.call("ec2", "DescribeInternetGateways", {"Filters": f}),
             "InternetGateways", "InternetGatewayId", "ec2:internet-gateway"),
            ("DescribeLaunchTemplates", paged.call("ec2", "DescribeLaunchTemplates", {"Filters": f}),
             "LaunchTemplates", "LaunchTemplateId", "ec2:launch-template"),
            ("DescribeNetworkInterfaces", paged.call("ec2", "DescribeNetworkInterfaces", {"Filters": f}),
             "NetworkInterfaces", "NetworkInterfaceId", "ec2:network-interface"),
            ("DescribeVolumes", paged.call("ec2", "DescribeVolumes", {"Filters": [*f, {"Name": "status", "Values": _VOLUME_STATES}]}),
             "Volumes", "VolumeId", "ec2:volume"),
        ]:
            self.source(f"ec2 {label}", listing, pages, key, id_key, kind)
        # DescribeNatGateways calls its filter list "Filter".
        self.source("ec2 DescribeNatGateways", nat_gateways,
                    paged.call("ec2", "DescribeNatGateways", {"Filter": [*f, {"Name": "state", "Values": _NAT_STATES}]}))
        self.source("ec2 DescribeAddresses", addresses)

    def elbv2(self) -> None:
        paged = _Paged(self.t, "Marker", "NextMarker")
        balancers = [lb["LoadBalancerArn"] for page in paged.call("elbv2", "DescribeLoadBalancers", {})
                     for lb in page.get("LoadBalancers", [])]
        ours_lbs = self._elb_ours(balancers)
        for arn in ours_lbs:
            self.add("elbv2:load-balancer", arn, f"load balancer {arn.split('/')[-2]}")
        listeners = [listener["ListenerArn"] for lb in ours_lbs
                     for page in paged.call("elbv2", "DescribeListeners", {"LoadBalancerArn": lb})
                     for listener in page.get("Listeners", [])]
        for arn in self._elb_ours(listeners):
            self.add("elbv2:listener", arn, "listener")
        groups = [tg["TargetGroupArn"] for page in paged.call("elbv2", "DescribeTargetGroups", {})
                  for tg in page.get("TargetGroups", [])]
        for arn in self._elb_ours(groups):
            self.add("elbv2:target-group", arn, f"target group {arn.split('/')[-2]}")
            health = self.t.call("elbv2", "DescribeTargetHealth", {"TargetGroupArn": arn})
            targets = [d["Target"] for d in health.get("TargetHealthDescriptions", [])]
            if targets:
                ids = ",".join(f"{t['Id']}:{t.get('Port', '')}" for t in targets)
                self.add("elbv2:target-registration", arn, f"targets {ids} still registered")

    def _elb_ours(self, arns: list[str]) -> list[str]:
        ours = []
        for start in range(0, len(arns), _ELB_TAGS_PER_CALL):
            chunk = arns[start:start + _ELB_TAGS_PER_CALL]
            for description in self.t.call("elbv2", "DescribeTags", {"ResourceArns": chunk}).get("TagDescriptions", []):
                if _ours(description.get("Tags"), self.name):
                    ours.append(description["ResourceArn"])
        return ours

    def autoscaling(self) -> None:
        # Auto Scaling groups are not in the tagging API's GetResources (AWS documents it; moto agrees).
        params = {"Filters": [{"Name": "tag-key", "Values": [DEPLOYMENT_TAG]}, {"Name": "tag-value", "Values": [self.name]}]}
        for page in _Paged(self.t).call("autoscaling", "DescribeAutoScalingGroups", params):
            for group in page.get("AutoScalingGroups", []):
                if _ours(group.get("Tags"), self.name):  # the two filters match the key and the value separately
                    status = f" ({group['Status']})" if group.get("Status") else ""
                    self.add("autoscaling:group", group["AutoScalingGroupName"],
                             f"Auto Scaling group, {len(group.get('Instances', []))} instances{status}")

    def iam(self) -> None:
        # IAM is global and not in the tagging API; our builders put roles and profiles under ROLE_PATH and name
        # them "<deployment>-...", so only those need their tags read.
        prefix = self.name + "-"
        paged = _Paged(self.t, "Marker")
        for page in paged.call("iam", "ListRoles", {"PathPrefix": ROLE_PATH}):
            for role in page.get("Roles", []):
                if role["RoleName"].startswith(prefix):
                    tags = self.t.call("iam", "ListRoleTags", {"RoleName": role["RoleName"]}).get("Tags")
                    if _ours(tags, self.name):
                        self.add("iam:role", role["RoleName"], f"IAM role {role['Arn']}", "global")
        for page in paged.call("iam", "ListInstanceProfiles", {"PathPrefix": ROLE_PATH}):
            for profile in page.get("InstanceProfiles", []):
                if profile["InstanceProfileName"].startswith(prefix):
                    # GetInstanceProfile returns the tags (ListInstanceProfiles does not on AWS; moto lacks
                    # ListInstanceProfileTags).
                    got = self.t.call("iam", "GetInstanceProfile", {"InstanceProfileName": profile["InstanceProfileName"]})
                    if _ours(got["InstanceProfile"].get("Tags"), self.name):
                        self.add("iam:instance-profile", profile["InstanceProfileName"],
                                 f"instance profile {profile['Arn']}", "global")

    def acm(self) -> list[dict]:
        """Our certificates' descriptions: the records pass needs their validation CNAMEs. (ListCertificates
        without Includes lists RSA_2048 certificates, the only kind RequestCertificate makes by default.)"""
        ours = []
        for page in _Paged(self.t).call("acm", "ListCertificates", {}):
            for summary in page.get("CertificateSummaryList", []):
                arn = summary["CertificateArn"]
                if _ours(self.t.call("acm", "ListTagsForCertificate", {"CertificateArn": arn}).get("Tags"), self.name):
                    self.add("acm:certificate", arn, f"certificate for {summary.get('DomainName')} ({summary.get('Status')})")
                    ours.append(self.t.call("acm", "DescribeCertificate", {"CertificateArn": arn})["Certificate"])
        return ours

    def sagemaker(self) -> None:
        # Every name our builders give contains the deployment name: NameContains saves a ListTags per object.
        paged, named = _Paged(self.t), {"NameContains": self.name}
        endpoints = []
        for pages, key, name_key, arn_key, kind in [
            (paged.call("sagemaker", "ListEndpoints", named), "Endpoints", "EndpointName", "EndpointArn", "sagemaker:endpoint"),
            (paged.call("sagemaker", "ListEndpointConfigs", named), "EndpointConfigs", "EndpointConfigName", "EndpointConfigArn",
             "sagemaker:endpoint-config"),
            (paged.call("sagemaker", "ListModels", named), "Models", "ModelName", "ModelArn", "sagemaker:model"),
            # Jobs cannot be deleted; only a running one is a leftover (destroy stops it).
            (paged.call("sagemaker", "ListTrainingJobs", {**named, "StatusEquals": "InProgress"}), "TrainingJobSummaries",
             "TrainingJobName", "TrainingJobArn", "sagemaker:training-job"),
        ]:
            for page in pages:
                for item in page.get(key, []):
                    tags = self.t.call("sagemaker", "ListTags", {"ResourceArn": item[arn_key]}).get("Tags")
                    if _ours(tags, self.name):
                        self.add(kind, item[name_key], f"{kind.split(':')[1]} {item[name_key]}")
                        if kind == "sagemaker:endpoint":
                            endpoints.append(item[name_key])
        if endpoints:  # scaling targets of our endpoints are ours (moto keeps no tags on scaling targets)
            prefixes = tuple(f"endpoint/{e}/" for e in endpoints)
            for page in paged.call("application-autoscaling", "DescribeScalableTargets", {"ServiceNamespace": "sagemaker"}):
                for target in page.get("ScalableTargets", []):
                    if target["ResourceId"].startswith(prefixes):
                        ident = "|".join((target["ServiceNamespace"], target["ScalableDimension"], target["ResourceId"]))
                        self.add("application-autoscaling:scalable-target", ident, f"scaling of {target['ResourceId']}")

    def records(self, zone: str, certificates: list[dict]) -> None:
        records = [r for page in _record_pages(self.t, zone) for r in page]
        owned = set()
        for r in records:
            if r["Type"] == "TXT" and _dns(r["Name"]).startswith(OWNER_PREFIX) and \
                    any(v.get("Value") == f'"deployment={self.name}"' for v in r.get("ResourceRecords", [])):
                owned.add(_dns(r["Name"])[len(OWNER_PREFIX):])
                self.add("route53:owner-record", _record_id(zone, r), f"ownership TXT {_dns(r['Name'])} in {zone}", "global")
        validation = {(_dns(o["ResourceRecord"]["Name"]), _dns(o["ResourceRecord"]["Value"]))
                      for c in certificates if _dns(c.get("DomainName", "")) in owned
                      for o in c.get("DomainValidationOptions", []) if o.get("ResourceRecord")}
        for r in records:
            name = _dns(r["Name"])
            values = {_dns(v.get("Value", "")) for v in r.get("ResourceRecords", [])}
            if (name in owned and r["Type"] in _RECORD_TYPES) or \
                    (r["Type"] == "CNAME" and any((name, v) in validation for v in values)):
                self.add("route53:record", _record_id(zone, r), f"{r['Type']} {name} in {zone}", "global")

    def tagging_api(self) -> None:
        covered = set(DELETE_ORDER)
        params = {"TagFilters": [{"Key": DEPLOYMENT_TAG, "Values": [self.name]}], "ResourcesPerPage": 100}
        for page in _Paged(self.t, "PaginationToken").call("resourcegroupstaggingapi", "GetResources", params):
            for mapping in page.get("ResourceTagMappingList", []):
                kind, _ = arn_to_type_id(mapping["ResourceARN"])
                if kind in covered:
                    continue  # a describe above is authoritative; the index also keeps deleted resources a while
                self.add(kind, mapping["ResourceARN"], "found only by the Resource Groups Tagging API")


# ARN resource-type part -> our type, for the services we describe. Anything else keeps "<service>:<type>".
_ARN_TYPES = {
    ("ec2", "natgateway"): "ec2:nat-gateway",
    ("elasticloadbalancing", "loadbalancer"): "elbv2:load-balancer",
    ("elasticloadbalancing", "targetgroup"): "elbv2:target-group",
    ("elasticloadbalancing", "listener"): "elbv2:listener",
    ("autoscaling", "autoScalingGroup"): "autoscaling:group",
    ("application-autoscaling", "scalable-target"): "application-autoscaling:scalable-target",
}


def arn_to_type_id(arn: str) -> tuple[str, str]:
    """``arn:aws:ec2:r:a:vpc/vpc-1`` -> ("ec2:vpc", "vpc-1"); ELB and ACM keep the ARN as id; SageMaker the name."""
    parts = arn.split(":", 5)
    service, rest = parts[2], parts[5] if len(parts) > 5 else ""
    # "type/id" or "type:id", whichever separator comes first (autoScalingGroup:uuid:autoScalingGroupName/x)
    cut = min((i for i in (rest.find("/"), rest.find(":")) if i >= 0), default=len(rest))
    resource_type, ident = rest[:cut], rest[cut + 1:]
    kind = _ARN_TYPES.get((service, resource_type), f"{service}:{resource_type}")
    if service in ("ec2", "sagemaker"):
        return kind, ident
    return kind, arn


def _ours(tags: Any, deployment: str) -> bool:
    if not tags:
        return False
    if isinstance(tags, dict):
        return tags.get(DEPLOYMENT_TAG) == deployment
    return any(t.get("Key") == DEPLOYMENT_TAG and t.get("Value") == deployment for t in tags)


def _ec2_detail(kind: str, item: dict) -> str:
    name = next((t["Value"] for t in item.get("Tags", item.get("TagSet", [])) or [] if t.get("Key") == "Name"), "")
    extra = {"ec2:vpc": item.get("CidrBlock"), "ec2:subnet": item.get("CidrBlock"),
             "ec2:security-group": item.get("GroupName"), "ec2:security-group-rule": item.get("GroupId"),
             "ec2:launch-template": item.get("LaunchTemplateName"), "ec2:network-interface": item.get("Status"),
             "ec2:volume": item.get("State")}.get(kind)
    return " ".join(str(x) for x in (kind.split(":")[1], name, extra) if x)


def _record_pages(transport: AwsTransport, zone: str) -> Iterator[list[dict]]:
    params: dict = {"HostedZoneId": zone}
    while True:
        page = transport.call("route53", "ListResourceRecordSets", params)
        yield page.get("ResourceRecordSets", [])
        if not page.get("IsTruncated"):
            return
        params = {"HostedZoneId": zone, "StartRecordName": page["NextRecordName"], "StartRecordType": page["NextRecordType"]}
        if page.get("NextRecordIdentifier"):
            params["StartRecordIdentifier"] = page["NextRecordIdentifier"]


def zone_id(zone: str) -> str:
    return zone.rsplit("/", 1)[-1]


def _dns(name: str) -> str:
    return name.lower().rstrip(".")


def _record_id(zone: str, record: dict) -> str:
    return f"{zone}|{record['Type']}|{_dns(record['Name'])}"


# --- deleting -------------------------------------------------------------------------------------------------


class SweepError(NeurondeployError):
    exit_code = 6


def delete_leftover(transport: AwsTransport, leftover: Leftover, *, poll_s: float = 5.0, wait_s: float = 900.0) -> bool:
    """Delete one leftover with the calls its type needs (detach, disassociate, empty, then delete; wait for
    the slow ones). True if it deleted it, False if it was already gone. Raises :class:`AwsCallError` when
    AWS refuses (:func:`is_retryable` tells whether waiting may help) and :class:`SweepError` for a type it
    cannot delete. Call it in :data:`DELETE_ORDER` (:func:`sort_leftovers`), security groups after
    :func:`release_security_groups`."""
    handler = _DELETERS.get(leftover.type)
    if handler is None:
        raise SweepError(f"cannot delete {leftover.type} {leftover.id}: neurondeploy never creates that type",
                         "delete it yourself (it carries this deployment's tag)")
    try:
        return bool(handler(_Deleter(transport, poll_s, wait_s), leftover.id))
    except AwsCallError as exc:
        if is_gone(exc):
            return False
        raise


def record_exists(transport: AwsTransport, leftover: Leftover) -> bool:
    """Whether the record a ``route53:*`` leftover names is still there."""
    return _find_record(_Deleter(transport, 0, 0), leftover.id) is not None


def release_security_groups(transport: AwsTransport, group_ids: Iterable[str]) -> None:
    """Revoke every rule of these groups that names another group, so groups referring to each other (the
    ALB's egress to the instances, their ingress from the ALB) can be deleted in any order."""
    group_ids = list(group_ids)
    if not group_ids:
        return
    d = _Deleter(transport, 0, 0)
    for page in _Paged(transport).call("ec2", "DescribeSecurityGroupRules",
                                       {"Filters": [{"Name": "group-id", "Values": group_ids}]}):
        for rule in page.get("SecurityGroupRules", []):
            if rule.get("ReferencedGroupInfo", {}).get("GroupId"):
                _revoke(d, rule)


@dataclass
class _Deleter:
    """``call`` answers None where AWS says "already gone"; the other answers and errors pass through."""

    t: AwsTransport
    poll_s: float
    wait_s: float

    def call(self, service: str, operation: str, params: dict) -> dict | None:
        try:
            return self.t.call(service, operation, params)
        except AwsCallError as exc:
            if is_gone(exc):
                return None
            raise

    def wait(self, service: str, waiter: str, params: dict) -> None:
        self.t.wait(service, waiter, params)

    def poll_until_gone(self, what: str, describe) -> None:
        deadline = time.monotonic() + self.wait_s
        while describe():
            if time.monotonic() > deadline:
                raise SweepError(f"{what} is still being deleted after {self.wait_s:.0f} s", "run destroy again later")
            time.sleep(self.poll_s)


def _done(response: dict | None) -> bool:
    return response is not None


def _find_record(d: _Deleter, ident: str) -> dict | None:
    zone, record_type, name = ident.split("|", 2)
    page = d.call("route53", "ListResourceRecordSets", {
        "HostedZoneId": zone, "StartRecordName": name, "StartRecordType": record_type, "MaxItems": "1"}) or {}
    for record in page.get("ResourceRecordSets", [])[:1]:  # the first record at or after (name, type)
        if _dns(record["Name"]) == name and record["Type"] == record_type:
            return record
    return None


def _revoke(d: _Deleter, rule: dict) -> bool:
    params = {"GroupId": rule["GroupId"], "SecurityGroupRuleIds": [rule["SecurityGroupRuleId"]]}
    if rule.get("IsEgress"):
        return _done(d.call("ec2", "RevokeSecurityGroupEgress", params))
    return _done(d.call("ec2", "RevokeSecurityGroupIngress", params))


def _delete_scalable_target(d: _Deleter, ident: str) -> bool:
    namespace, dimension, resource_id = ident.split("|", 2)
    return _done(d.call("application-autoscaling", "DeregisterScalableTarget",
                        {"ServiceNamespace": namespace, "ScalableDimension": dimension, "ResourceId": resource_id}))


def _delete_endpoint(d: _Deleter, name: str) -> bool:
    deleted = _done(d.call("sagemaker", "DeleteEndpoint", {"EndpointName": name}))
    if deleted:
        d.wait("sagemaker", "EndpointDeleted", {"EndpointName": name})
    return deleted


def _stop_training_job(d: _Deleter, name: str) -> bool:
    try:
        stopped = _done(d.call("sagemaker", "StopTrainingJob", {"TrainingJobName": name}))
    except AwsCallError as exc:
        if exc.code != "ValidationException":  # already finished: nothing to stop
            raise
        stopped = False
    d.wait("sagemaker", "TrainingJobCompletedOrStopped", {"TrainingJobName": name})
    return stopped


def _delete_group(d: _Deleter, name: str) -> bool:
    deleted = _done(d.call("autoscaling", "DeleteAutoScalingGroup", {"AutoScalingGroupName": name, "ForceDelete": True}))
    # No botocore waiter: the group exists ("Delete in progress") until its instances are terminated.
    d.poll_until_gone(f"Auto Scaling group {name}", lambda: (d.call(
        "autoscaling", "DescribeAutoScalingGroups", {"AutoScalingGroupNames": [name]}) or {}).get("AutoScalingGroups"))
    return deleted


def _terminate_instance(d: _Deleter, instance_id: str) -> bool:
    terminated = _done(d.call("ec2", "TerminateInstances", {"InstanceIds": [instance_id]}))
    if terminated:
        d.wait("ec2", "InstanceTerminated", {"InstanceIds": [instance_id]})
    return terminated


def _deregister_targets(d: _Deleter, target_group_arn: str) -> bool:
    health = d.call("elbv2", "DescribeTargetHealth", {"TargetGroupArn": target_group_arn}) or {}
    deregistered = False
    for description in health.get("TargetHealthDescriptions", []):
        target = {k: v for k, v in description["Target"].items() if k in ("Id", "Port", "AvailabilityZone")}
        # A terminated instance is refused as InvalidTarget: it is no target any more, which is the goal.
        deregistered |= _done(d.call("elbv2", "DeregisterTargets", {"TargetGroupArn": target_group_arn, "Targets": [target]}))
    return deregistered


def _delete_load_balancer(d: _Deleter, arn: str) -> bool:
    deleted = _done(d.call("elbv2", "DeleteLoadBalancer", {"LoadBalancerArn": arn}))
    if deleted:
        d.wait("elbv2", "LoadBalancersDeleted", {"LoadBalancerArns": [arn]})
    return deleted


def _delete_record(d: _Deleter, ident: str) -> bool:
    record = _find_record(d, ident)
    if record is None:
        return False
    return _done(d.call("route53", "ChangeResourceRecordSets", {"HostedZoneId": ident.split("|", 1)[0], "ChangeBatch": {
        "Comment": "neurondeploy destroy (sweep)", "Changes": [{"Action": "DELETE", "ResourceRecordSet": record}]}}))


def _delete_instance_profile(d: _Deleter, name: str) -> bool:
    profile = (d.call("iam", "GetInstanceProfile", {"InstanceProfileName": name}) or {}).get("InstanceProfile", {})
    for role in profile.get("Roles", []):
        d.call("iam", "RemoveRoleFromInstanceProfile", {"InstanceProfileName": name, "RoleName": role["RoleName"]})
    return _done(d.call("iam", "DeleteInstanceProfile", {"InstanceProfileName": name}))


def _delete_role(d: _Deleter, name: str) -> bool:
    paged = _Paged(d.t, "Marker")
    for page in paged.call("iam", "ListInstanceProfilesForRole", {"RoleName": name}):
        for profile in page.get("InstanceProfiles", []):
            d.call("iam", "RemoveRoleFromInstanceProfile", {"InstanceProfileName": profile["InstanceProfileName"], "RoleName": name})
    for page in paged.call("iam", "ListRolePolicies", {"RoleName": name}):
        for policy in page.get("PolicyNames", []):
            d.call("iam", "DeleteRolePolicy", {"RoleName": name, "PolicyName": policy})
    for page in paged.call("iam", "ListAttachedRolePolicies", {"RoleName": name}):
        for policy in page.get("AttachedPolicies", []):
            d.call("iam", "DetachRolePolicy", {"RoleName": name, "PolicyArn": policy["PolicyArn"]})
    return _done(d.call("iam", "DeleteRole", {"RoleName": name}))


def _delete_nat_gateway(d: _Deleter, nat_id: str) -> bool:
    deleted = _done(d.call("ec2", "DeleteNatGateway", {"NatGatewayId": nat_id}))
    if deleted:
        d.wait("ec2", "NatGatewayDeleted", {"NatGatewayIds": [nat_id]})  # then its Elastic IP is free
    return deleted


def _release_address(d: _Deleter, allocation_id: str) -> bool:
    addresses = (d.call("ec2", "DescribeAddresses", {"AllocationIds": [allocation_id]}) or {}).get("Addresses", [])
    for address in addresses:
        if address.get("AssociationId"):  # an instance's; a deleted NAT gateway's association is gone on AWS
            d.call("ec2", "DisassociateAddress", {"AssociationId": address["AssociationId"]})
    return bool(addresses) and _done(d.call("ec2", "ReleaseAddress", {"AllocationId": allocation_id}))


def _delete_security_group_rule(d: _Deleter, rule_id: str) -> bool:
    found = d.call("ec2", "DescribeSecurityGroupRules", {"SecurityGroupRuleIds": [rule_id]}) or {}
    revoked = [_revoke(d, rule) for rule in found.get("SecurityGroupRules", [])]  # every one, no short cut
    return any(revoked)


def _delete_route_table(d: _Deleter, table_id: str) -> bool:
    tables = (d.call("ec2", "DescribeRouteTables", {"RouteTableIds": [table_id]}) or {}).get("RouteTables", [])
    for association in (tables[0].get("Associations", []) if tables else []):
        if association.get("Main"):
            return False  # the VPC's main table goes with the VPC
        d.call("ec2", "DisassociateRouteTable", {"AssociationId": association["RouteTableAssociationId"]})
    return _done(d.call("ec2", "DeleteRouteTable", {"RouteTableId": table_id}))


def _delete_internet_gateway(d: _Deleter, gateway_id: str) -> bool:
    found = d.call("ec2", "DescribeInternetGateways", {"InternetGatewayIds": [gateway_id]}) or {}
    for gateway in found.get("InternetGateways", []):
        for attachment in gateway.get("Attachments", []):
            d.call("ec2", "DetachInternetGateway", {"InternetGatewayId": gateway_id, "VpcId": attachment["VpcId"]})
    return _done(d.call("ec2", "DeleteInternetGateway", {"InternetGatewayId": gateway_id}))


_DELETERS = {
    "application-autoscaling:scalable-target": _delete_scalable_target,
    "sagemaker:endpoint": _delete_endpoint,
    "sagemaker:endpoint-config": lambda d, name: _done(d.call("sagemaker", "DeleteEndpointConfig", {"EndpointConfigName": name})),
    "sagemaker:model": lambda d, name: _done(d.call("sagemaker", "DeleteModel", {"ModelName": name})),
    "sagemaker:training-job": _stop_training_job,
    "autoscaling:group": _delete_group,
    "ec2:instance": _terminate_instance,
    "elbv2:target-registration": _deregister_targets,
    "elbv2:listener": lambda d, arn: _done(d.call("elbv2", "DeleteListener", {"ListenerArn": arn})),
    "elbv2:load-balancer": _delete_load_balancer,
    "elbv2:target-group": lambda d, arn: _done(d.call("elbv2", "DeleteTargetGroup", {"TargetGroupArn": arn})),
    "acm:certificate": lambda d, arn: _done(d.call("acm", "DeleteCertificate", {"CertificateArn": arn})),
    "route53:record": _delete_record,
    "route53:owner-record": _delete_record,
    "ec2:launch-template": lambda d, i: _done(d.call("ec2", "DeleteLaunchTemplate", {"LaunchTemplateId": i})),
    "iam:instance-profile": _delete_instance_profile,
    "iam:role": _delete_role,
    "ec2:nat-gateway": _delete_nat_gateway,
    "ec2:elastic-ip": _release_address,
    "ec2:network-interface": lambda d, i: _done(d.call("ec2", "DeleteNetworkInterface", {"NetworkInterfaceId": i})),
    "ec2:volume": lambda d, i: _done(d.call("ec2", "DeleteVolume", {"VolumeId": i})),
    "ec2:security-group-rule": _delete_security_group_rule,
    "ec2:security-group": lambda d, i: _done(d.call("ec2", "DeleteSecurityGroup", {"GroupId": i})),
    "ec2:subnet": lambda d, i: _done(d.call("ec2", "DeleteSubnet", {"SubnetId": i})),
    "ec2:route-table": _delete_route_table,
    "ec2:internet-gateway": _delete_internet_gateway,
    "ec2:vpc": lambda d, i: _done(d.call("ec2", "DeleteVpc", {"VpcId": i})),
}
assert set(_DELETERS) == set(DELETE_ORDER), "every type in DELETE_ORDER needs a deleter"
