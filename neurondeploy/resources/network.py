"""VPC, subnets, internet/NAT gateways, route tables and security groups, as pure request builders.

Availability zones: names like us-east-1a are not known offline and not every AZ offers every Neuron type,
so unless the context names them, an ``azs`` lookup (DescribeInstanceTypeOfferings for the instance type)
runs once at apply and subnets use ``${azs.Zone1}``, ``${azs.Zone2}``, ... (sorted by name, so stable).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from neurondeploy.errors import PlanError
from neurondeploy.resources.kinds import TAGGED, Attr, Caller, Describe, Expected, Kind, Sends, done, it, tagged
from neurondeploy.resources.model import PlanContext, Request, Resource, Wait, lookup, resource
from neurondeploy.resources.naming import bucket_name, ec2_tags, partition
from neurondeploy.resources.refs import find_refs, ref
from neurondeploy.resources.retag import ec2_retag
from neurondeploy.specs import Spec

# List prices, us-east-1, unconfirmed (aws.amazon.com/vpc/pricing: NAT gateway $0.045/h plus $0.045/GB
# processed, ignored here; public IPv4 address $0.005/h since 2024-02).
NAT_GATEWAY_USD_PER_HOUR = 0.045
PUBLIC_IPV4_USD_PER_HOUR = 0.005
PRIVATE_HOLDS = "instances, no public IP, egress through the NAT gateway"


@dataclass(frozen=True)
class Network:
    resources: tuple[Resource, ...]
    vpc_id: str  # literal id or ref
    public_subnet_ids: tuple[str, ...]
    instance_subnet_ids: tuple[str, ...]
    public_ready: tuple[str, ...]  # routes + associations the public subnets need before an ALB can serve
    ready: tuple[str, ...]  # the same for every subnet: instances need them before they boot (pip, S3)


def availability_zones(spec: Spec, ctx: PlanContext, instance_type: str) -> tuple[list[str], list[Resource]]:
    """``count`` AZ names: the context's, or refs to an apply-time lookup of where the type is offered."""
    count = spec.network.availability_zones
    if ctx.availability_zones:
        if len(ctx.availability_zones) < count:
            raise PlanError(
                f"{count} availability zones wanted but the context names {len(ctx.availability_zones)}",
                "name more zones or lower network.availability_zones",
            )
        return list(ctx.availability_zones[:count]), []
    outputs = {f"Zone{i + 1}": f"sort_by(InstanceTypeOfferings, &Location)[{i}].Location" for i in range(count)}
    request = Request(
        "ec2",
        "DescribeInstanceTypeOfferings",
        {
            "LocationType": "availability-zone",
            "Filters": [{"Name": "instance-type", "Values": [instance_type]}],
        },
        outputs,
    )
    azs = lookup(
        "azs",
        "ec2:instance-type-offerings-lookup",
        request,
        f"The first {count} AZs (by name) offering {instance_type}; reads only.",
    )
    return [ref("azs", name) for name in outputs], [azs]


def subnet_cidrs(network, zones: int) -> tuple[list[str], list[str]]:
    """Public then private blocks, equal size (the spec checked they are large enough for an ALB); private
    space is reserved even when unused, so switching instance_subnets between public and private never
    moves a public subnet."""
    blocks = [str(b) for b in ipaddress.ip_network(network.vpc_cidr).subnets(new_prefix=network.subnet_prefix)]
    return blocks[:zones], blocks[zones : 2 * zones]


def network_resources(spec: Spec, ctx: PlanContext, instance_type: str) -> Network:
    net = spec.network
    if not net.creates_vpc:
        return _existing_network(spec)
    zones, resources = availability_zones(spec, ctx, instance_type)
    public_cidrs, private_cidrs = subnet_cidrs(net, len(zones))
    private = net.instance_subnets != "public"
    vpc_id = ref("vpc", "VpcId")
    resources += [_vpc(spec), _internet_gateway(spec)]
    if net.empty_default_security_group:
        resources.append(_emptied_default_security_group())
    if net.flow_logs != "off":
        resources.append(_flow_logs(spec, ctx))
    holds = "load balancer and NAT gateway" if private else "load balancer and instances, each with a public IPv4"
    public = [
        _subnet(spec, f"subnet-public-{i + 1}", cidr, zone, map_public_ip=not private, holds=holds)
        for i, (cidr, zone) in enumerate(zip(public_cidrs, zones))
    ]
    resources += public
    resources.append(_route_table(spec, "rt-public", {"GatewayId": ref("igw", "InternetGatewayId")}))
    resources += [_association(f"rta-public-{i + 1}", "rt-public", s.name) for i, s in enumerate(public)]
    public_ids = tuple(ref(s.name, "SubnetId") for s in public)
    public_ready = ("rt-public", *(f"rta-public-{i + 1}" for i in range(len(public))))
    ready = list(public_ready)
    instance_ids = public_ids
    if private:
        subnets = [
            _subnet(spec, f"subnet-private-{i + 1}", cidr, zone, map_public_ip=False, holds=PRIVATE_HOLDS)
            for i, (cidr, zone) in enumerate(zip(private_cidrs, zones))
        ]
        resources += subnets + _nat_gateway(spec, public[0].name)
        resources.append(_route_table(spec, "rt-private", {"NatGatewayId": ref("nat", "NatGatewayId")}))
        resources += [_association(f"rta-private-{i + 1}", "rt-private", s.name) for i, s in enumerate(subnets)]
        instance_ids = tuple(ref(s.name, "SubnetId") for s in subnets)
        ready += ["rt-private", *(f"rta-private-{i + 1}" for i in range(len(subnets)))]
    return Network(tuple(resources), vpc_id, public_ids, instance_ids, public_ready, tuple(ready))


def _existing_network(spec: Spec) -> Network:
    net = spec.network  # the spec guarantees 2+ public subnets, and instance subnets when they are private
    instance_ids = net.instance_subnet_ids or net.public_subnet_ids
    return Network((), net.vpc_id, tuple(net.public_subnet_ids), tuple(instance_ids), (), ())


def _vpc(spec: Spec) -> Resource:
    vpc = ref("vpc", "VpcId")
    return resource(
        "vpc",
        "ec2:vpc",
        [
            Request(
                "ec2",
                "CreateVpc",
                {"CidrBlock": spec.network.vpc_cidr, "TagSpecifications": ec2_tags(spec, "vpc", spec.name)},
                {"VpcId": "Vpc.VpcId"},
                Wait("VpcAvailable", {"VpcIds": [vpc]}),
            ),
            # One attribute per call (the API refuses both at once); hostnames let instances resolve S3/SSM names.
            Request("ec2", "ModifyVpcAttribute", {"VpcId": vpc, "EnableDnsSupport": {"Value": True}}),
            Request("ec2", "ModifyVpcAttribute", {"VpcId": vpc, "EnableDnsHostnames": {"Value": True}}),
        ],
        delete_vpc(vpc),
        description=f"VPC {spec.network.vpc_cidr}",
    )


def _emptied_default_security_group() -> Resource:
    """The VPC's default security group, which AWS makes with it, left with no rule: anything put in it by mistake
    reaches nothing and nothing reaches it (CIS AWS Foundations Benchmark 5.4, Security Hub EC2.2:
    https://docs.aws.amazon.com/securityhub/latest/userguide/ec2-controls.html#ec2-2). It goes with the VPC, so
    there is nothing to delete; its rules are AWS's defaults (https://docs.aws.amazon.com/vpc/latest/userguide/
    default-security-group.html): all traffic from its own members in, all traffic out."""
    group = ref("vpc-default-sg", "GroupId")
    everything = {"IpProtocol": "-1"}
    return resource(
        "vpc-default-sg",
        "ec2:default-security-group",
        [
            Request(
                "ec2",
                "DescribeSecurityGroups",
                {
                    "Filters": [
                        {"Name": "vpc-id", "Values": [ref("vpc", "VpcId")]},
                        {"Name": "group-name", "Values": ["default"]},
                    ]
                },
                {"GroupId": "SecurityGroups[0].GroupId"},
            ),
            Request(
                "ec2",
                "RevokeSecurityGroupIngress",
                {"GroupId": group, "IpPermissions": [{**everything, "UserIdGroupPairs": [{"GroupId": group}]}]},
            ),
            Request(
                "ec2",
                "RevokeSecurityGroupEgress",
                {"GroupId": group, "IpPermissions": [{**everything, "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}]},
            ),
        ],
        taggable=False,
        description="The VPC's default security group emptied of its rules (nothing in, nothing out)",
    )


def _flow_logs(spec: Spec, ctx: PlanContext) -> Resource:
    """The VPC's flow logs, delivered to the shared bucket. Delivery to S3 needs no role: AWS adds its log-delivery
    statement to the bucket policy (https://docs.aws.amazon.com/vpc/latest/userguide/flow-logs-s3-permissions.html)."""
    destination = f"arn:{partition(spec.region)}:s3:::{bucket_name(spec.region, ctx)}/{spec.name}/flow-logs/"
    traffic = {"all": "ALL", "rejected": "REJECT"}[spec.network.flow_logs]
    return resource(
        "flow-logs",
        "ec2:flow-log",
        [
            Request(
                "ec2",
                "CreateFlowLogs",
                {
                    "ResourceIds": [ref("vpc", "VpcId")],
                    "ResourceType": "VPC",
                    "TrafficType": traffic,
                    "LogDestinationType": "s3",
                    "LogDestination": destination,
                    "TagSpecifications": ec2_tags(spec, "vpc-flow-log", f"{spec.name}-flow-logs"),
                },
                {"FlowLogId": "FlowLogIds[0]"},
                expect={"length(Unsuccessful || `[]`)": 0},
            )
        ],
        delete_flow_logs(ref("flow-logs", "FlowLogId")),
        description=f"Flow logs of the VPC ({spec.network.flow_logs} traffic) to {destination}; $0.25/GB delivered "
        "(list price, unconfirmed)",
    )


def _internet_gateway(spec: Spec) -> Resource:
    igw, vpc = ref("igw", "InternetGatewayId"), ref("vpc", "VpcId")
    return resource(
        "igw",
        "ec2:internet-gateway",
        [
            Request(
                "ec2",
                "CreateInternetGateway",
                {"TagSpecifications": ec2_tags(spec, "internet-gateway", spec.name)},
                {"InternetGatewayId": "InternetGateway.InternetGatewayId"},
            ),
            Request("ec2", "AttachInternetGateway", {"InternetGatewayId": igw, "VpcId": vpc}),
        ],
        [
            Request("ec2", "DetachInternetGateway", {"InternetGatewayId": igw, "VpcId": vpc}),
            Request("ec2", "DeleteInternetGateway", {"InternetGatewayId": igw}),
        ],
        description="Internet gateway attached to the VPC",
    )


def _subnet(spec: Spec, name: str, cidr: str, zone: str, *, map_public_ip: bool, holds: str) -> Resource:
    subnet = ref(name, "SubnetId")
    create = [
        Request(
            "ec2",
            "CreateSubnet",
            {
                "VpcId": ref("vpc", "VpcId"),
                "CidrBlock": cidr,
                "AvailabilityZone": zone,
                "TagSpecifications": ec2_tags(spec, "subnet", f"{spec.name}-{name.removeprefix('subnet-')}"),
            },
            {"SubnetId": "Subnet.SubnetId"},
        )
    ]
    if map_public_ip:  # instances in public subnets reach S3/PyPI directly; their SG admits only the ALB
        create.append(
            Request("ec2", "ModifySubnetAttribute", {"SubnetId": subnet, "MapPublicIpOnLaunch": {"Value": True}})
        )
    return resource(
        name,
        "ec2:subnet",
        create,
        delete_subnet(subnet),
        description=f"{'Private' if name.startswith('subnet-private') else 'Public'} subnet {cidr}: {holds}",
    )


def _route_table(spec: Spec, name: str, target: dict) -> Resource:
    table = ref(name, "RouteTableId")
    return resource(
        name,
        "ec2:route-table",
        [
            Request(
                "ec2",
                "CreateRouteTable",
                {
                    "VpcId": ref("vpc", "VpcId"),
                    "TagSpecifications": ec2_tags(spec, "route-table", f"{spec.name}-{name[3:]}"),
                },
                {"RouteTableId": "RouteTable.RouteTableId"},
            ),
            Request("ec2", "CreateRoute", {"RouteTableId": table, "DestinationCidrBlock": "0.0.0.0/0", **target}),
        ],
        [Request("ec2", "DeleteRouteTable", {"RouteTableId": table})],
        description="Route table with a default route to the "
        + ("internet gateway" if "GatewayId" in target else "NAT gateway"),
    )


def _association(name: str, table: str, subnet: str) -> Resource:
    return resource(
        name,
        "ec2:route-table-association",
        [
            Request(
                "ec2",
                "AssociateRouteTable",
                {"RouteTableId": ref(table, "RouteTableId"), "SubnetId": ref(subnet, "SubnetId")},
                {"AssociationId": "AssociationId"},
            ),
        ],
        [Request("ec2", "DisassociateRouteTable", {"AssociationId": ref(name, "AssociationId")})],
        taggable=False,
        description=f"Associates {subnet} with {table} (associations cannot be tagged)",
    )


def _nat_gateway(spec: Spec, public_subnet: str) -> list[Resource]:
    allocation, nat = ref("eip-nat", "AllocationId"), ref("nat", "NatGatewayId")
    eip = resource(
        "eip-nat",
        "ec2:elastic-ip",
        [
            Request(
                "ec2",
                "AllocateAddress",
                {"Domain": "vpc", "TagSpecifications": ec2_tags(spec, "elastic-ip", f"{spec.name}-nat")},
                {"AllocationId": "AllocationId"},
            ),
        ],
        [Request("ec2", "ReleaseAddress", {"AllocationId": allocation})],
        hourly_usd=PUBLIC_IPV4_USD_PER_HOUR,
        description="Elastic IP of the NAT gateway; public IPv4 $0.005/h (list price, us-east-1, unconfirmed)",
    )
    # One NAT gateway, not one per AZ: the cheap choice; instances in other AZs lose egress if its AZ fails.
    gateway = resource(
        "nat",
        "ec2:nat-gateway",
        [
            Request(
                "ec2",
                "CreateNatGateway",
                {
                    "SubnetId": ref(public_subnet, "SubnetId"),
                    "AllocationId": allocation,
                    "ConnectivityType": "public",
                    "TagSpecifications": ec2_tags(spec, "natgateway", spec.name),
                },
                {"NatGatewayId": "NatGateway.NatGatewayId"},
                Wait("NatGatewayAvailable", {"NatGatewayIds": [nat]}),
            ),
        ],
        delete_nat_gateway(nat),
        after=["igw"],
        hourly_usd=NAT_GATEWAY_USD_PER_HOUR,
        description="NAT gateway for private instances; $0.045/h + $0.045/GB (list price, us-east-1, unconfirmed)",
    )
    return [eip, gateway]


# --- security groups ---------------------------------------------------------------------------------------


def security_group_resources(spec: Spec, vpc_id: str, *, port: int, listener_ports: list[int]) -> list[Resource]:
    """ALB: ``listener_ports`` from allowed_cidrs only, egress only to the instances' port. Instances:
    ``port`` only from the ALB's group, no SSH; egress open (S3, PyPI, SSM)."""
    alb, inst = ref("sg-alb", "GroupId"), ref("sg-instances", "GroupId")
    cidrs = [{"CidrIp": cidr, "Description": "allowed_cidrs"} for cidr in spec.network.allowed_cidrs]
    alb_sg = resource(
        "sg-alb",
        "ec2:security-group",
        [
            _create_group(spec, "alb", vpc_id, "neurondeploy load balancer: listener ports from allowed_cidrs"),
            # A new group allows all egress; the ALB only needs to reach the instances (sg-alb-egress).
            Request(
                "ec2",
                "RevokeSecurityGroupEgress",
                {"GroupId": alb, "IpPermissions": [{"IpProtocol": "-1", "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}]},
            ),
        ],
        delete_security_group(alb),
        description="Load balancer security group",
    )
    instances_group = _create_group(
        spec, "instances", vpc_id, "neurondeploy instances: serving port from the load balancer only"
    )
    instances_sg = resource(
        "sg-instances",
        "ec2:security-group",
        [
            instances_group,
            Request(
                "ec2",
                "AuthorizeSecurityGroupIngress",
                {
                    "GroupId": inst,
                    "IpPermissions": [
                        {
                            "IpProtocol": "tcp",
                            "FromPort": port,
                            "ToPort": port,
                            "UserIdGroupPairs": [{"GroupId": alb, "Description": "load balancer"}],
                        }
                    ],
                },
            ),
        ],
        delete_security_group(inst),
        description="Instance security group",
        # The group is what CreateSecurityGroup names; its ingress rule converges in place (the kind's converge),
        # so a changed or drifted rule never replaces the group, and with it the launch template and the fleet.
        # A VPC this deployment makes is a ref: replacing it replaces what is in it, the group included.
        identity=(spec.name, instances_group.params["Description"], *([] if find_refs(vpc_id) else [vpc_id])),
    )
    # Its own resource: the ALB group referring to the instance group and back would be a cycle.
    egress = resource(
        "sg-alb-egress",
        "ec2:security-group-rule",
        [
            Request(
                "ec2",
                "AuthorizeSecurityGroupEgress",
                {
                    "GroupId": alb,
                    "IpPermissions": [
                        {
                            "IpProtocol": "tcp",
                            "FromPort": port,
                            "ToPort": port,
                            "UserIdGroupPairs": [{"GroupId": inst, "Description": "instances"}],
                        }
                    ],
                    "TagSpecifications": ec2_tags(spec, "security-group-rule"),
                },
                {"SecurityGroupRuleId": "SecurityGroupRules[0].SecurityGroupRuleId"},
            ),
        ],
        [
            Request(
                "ec2",
                "RevokeSecurityGroupEgress",
                {"GroupId": alb, "SecurityGroupRuleIds": [ref("sg-alb-egress", "SecurityGroupRuleId")]},
            )
        ],
        description="Load balancer egress to the instances' serving port only",
    )
    # Its own resource too: a change of allowed_cidrs converges these rules in place (authorize what is new,
    # revoke what is not wanted, an out-of-band rule included) and leaves the group and the ALB alone.
    permissions = [{"IpProtocol": "tcp", "FromPort": p, "ToPort": p, "IpRanges": cidrs} for p in listener_ports]
    ingress = resource(
        "sg-alb-ingress",
        "ec2:security-group-ingress",
        [Request("ec2", "AuthorizeSecurityGroupIngress", {"GroupId": alb, "IpPermissions": permissions})],
        [Request("ec2", "RevokeSecurityGroupIngress", {"GroupId": alb, "IpPermissions": permissions})],
        taggable=False,
        description=f"Load balancer ingress: ports {', '.join(map(str, listener_ports))} from allowed_cidrs",
        identity=("sg-alb",),
    )
    return [alb_sg, ingress, instances_sg, egress]


def _create_group(spec: Spec, suffix: str, vpc_id: str, description: str) -> Request:
    name = f"{spec.name}-{suffix}"
    return Request(
        "ec2",
        "CreateSecurityGroup",
        {
            "GroupName": name,
            "Description": description,
            "VpcId": vpc_id,
            "TagSpecifications": ec2_tags(spec, "security-group", name),
        },
        {"GroupId": "GroupId"},
    )


# --- kinds: how drift describes them, how the sweep finds and deletes leftovers (resources.kinds) ----------------

_NAT_STATES = ["pending", "available", "deleting", "failed"]


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


def _ingress(aws: Caller, group: dict, ids: Mapping, expected: Expected) -> list[str]:
    # Egress is not compared here: the one egress rule we add is its own resource (ec2:security-group-rule).
    wanted = [p for params in expected.all("AuthorizeSecurityGroupIngress") for p in params.get("IpPermissions", [])]
    if not expected.has("AuthorizeSecurityGroupIngress"):
        return []  # no create requests known, or the group's ingress is its own resource (which compares it)
    want, have = _rule_set(wanted), _rule_set(group.get("IpPermissions"))
    problems = [f"ingress rule added outside the tool: {_show(r)}" for r in sorted(have - want, key=str)]
    problems += [f"ingress rule removed: {_show(r)}" for r in sorted(want - have, key=str)]
    return problems


def _default_group_rules(aws: Caller, group: dict, ids: Mapping, expected: Expected) -> list[str]:
    rules = [("ingress", r) for r in _rule_set(group.get("IpPermissions"))]
    rules += [("egress", r) for r in _rule_set(group.get("IpPermissionsEgress"))]
    return [f"{way} rule added to the emptied default group: {_show(rule)}" for way, rule in sorted(rules, key=str)]


def _routes(aws: Caller, table: dict, ids: Mapping, expected: Expected) -> list[str]:
    problems = []
    live = {
        (r.get("DestinationCidrBlock"), r.get("GatewayId") or r.get("NatGatewayId")): r.get("State")
        for r in table.get("Routes", [])
    }
    for params in expected.all("CreateRoute"):
        target = params.get("GatewayId") or params.get("NatGatewayId")
        state = live.get((params.get("DestinationCidrBlock"), target))
        if state is None:
            problems.append(f"route {params.get('DestinationCidrBlock')} -> {target} removed")
        elif state != "active":
            problems.append(f"route {params.get('DestinationCidrBlock')} -> {target} is {state}")
    return problems


def _compare_association(aws: Caller, table: dict, ids: Mapping, expected: Expected) -> list[str]:
    mine = [a for a in table.get("Associations", []) if a.get("RouteTableAssociationId") == ids.get("AssociationId")]
    want = expected.value("AssociateRouteTable", "SubnetId")
    if mine and want is not None and mine[0].get("SubnetId") != want:
        return [f"associated with {mine[0].get('SubnetId')}, not {want}"]
    return []


def converge_group_ingress(aws: Caller, ids: Mapping, expected: Expected) -> list[str]:
    """:func:`converge_ingress` for a group whose create requests authorize its ingress; a group whose ingress is
    its own resource (ec2:security-group-ingress) is left to that resource."""
    return converge_ingress(aws, ids, expected) if expected.has("AuthorizeSecurityGroupIngress") else []


def converge_ingress(aws: Caller, ids: Mapping, expected: Expected) -> list[str]:
    """Make the group's ingress exactly what ``expected`` authorizes: revoke every other rule (one added out of band
    included), then authorize what is missing. Returns what it did, one line per rule."""
    group = (aws.call("ec2", "DescribeSecurityGroups", {"GroupIds": [ids["GroupId"]]}) or {}).get("SecurityGroups")
    if not group:
        return []
    wanted = [p for params in expected.all("AuthorizeSecurityGroupIngress") for p in params.get("IpPermissions", [])]
    want, have = _rule_set(wanted), _rule_set(group[0].get("IpPermissions"))
    extra, missing = sorted(have - want, key=str), sorted(want - have, key=str)
    if extra:
        aws.call("ec2", "RevokeSecurityGroupIngress", {"GroupId": ids["GroupId"], "IpPermissions": _permissions(extra)})
    if missing:
        aws.call(
            "ec2", "AuthorizeSecurityGroupIngress", {"GroupId": ids["GroupId"], "IpPermissions": _permissions(missing)}
        )
    return [f"revoked {_show(r)}" for r in extra] + [f"authorized {_show(r)}" for r in missing]


def _permissions(rules: Iterable[tuple]) -> list[dict]:
    """:func:`_rule_set` rules back as IpPermissions (one per rule)."""
    permissions = []
    for protocol, low, high, source in rules:
        kind, _, value = source.partition(" ")
        permission: dict = {"IpProtocol": protocol}
        if protocol != "-1":
            permission.update(FromPort=low, ToPort=high)
        key, item = {
            "cidr": ("IpRanges", "CidrIp"),
            "cidr6": ("Ipv6Ranges", "CidrIpv6"),
            "group": ("UserIdGroupPairs", "GroupId"),
            "prefix-list": ("PrefixListIds", "PrefixListId"),
        }[kind]
        permission[key] = [{item: value}]
        permissions.append(permission)
    return permissions


def revoke_rule(d: Caller, rule: dict) -> bool:
    """Revoke one described security group rule (ingress or egress)."""
    params = {"GroupId": rule["GroupId"], "SecurityGroupRuleIds": [rule["SecurityGroupRuleId"]]}
    if rule.get("IsEgress"):
        return done(d.call("ec2", "RevokeSecurityGroupEgress", params))
    return done(d.call("ec2", "RevokeSecurityGroupIngress", params))


def release_security_groups(d: Caller, group_ids: list[str]) -> None:
    """Revoke every rule of these groups that names another group (see the sweep's release_security_groups)."""
    for page in d.paged.call(
        "ec2", "DescribeSecurityGroupRules", {"Filters": [{"Name": "group-id", "Values": group_ids}]}
    ):
        for rule in page.get("SecurityGroupRules", []):
            if rule.get("ReferencedGroupInfo", {}).get("GroupId"):
                revoke_rule(d, rule)


# Each kind's delete requests, recorded by its builder (a ref for the id) and sent by the sweep (kinds.Sends).


def delete_vpc(vpc_id: str) -> list[Request]:
    return [Request("ec2", "DeleteVpc", {"VpcId": vpc_id})]


def delete_flow_logs(flow_log_id: str) -> list[Request]:
    return [Request("ec2", "DeleteFlowLogs", {"FlowLogIds": [flow_log_id]})]


def delete_subnet(subnet_id: str) -> list[Request]:
    return [Request("ec2", "DeleteSubnet", {"SubnetId": subnet_id})]


def delete_security_group(group_id: str) -> list[Request]:
    return [Request("ec2", "DeleteSecurityGroup", {"GroupId": group_id})]


def delete_nat_gateway(nat_id: str) -> list[Request]:
    # The wait: once it is deleted its Elastic IP is free to release.
    return [
        Request(
            "ec2",
            "DeleteNatGateway",
            {"NatGatewayId": nat_id},
            wait=Wait("NatGatewayDeleted", {"NatGatewayIds": [nat_id]}),
        )
    ]


def _release_address(d: Caller, allocation_id: str) -> bool:
    addresses = (d.call("ec2", "DescribeAddresses", {"AllocationIds": [allocation_id]}) or {}).get("Addresses", [])
    for address in addresses:
        if address.get("AssociationId"):  # an instance's; a deleted NAT gateway's association is gone on AWS
            d.call("ec2", "DisassociateAddress", {"AssociationId": address["AssociationId"]})
    return bool(addresses) and done(d.call("ec2", "ReleaseAddress", {"AllocationId": allocation_id}))


def _delete_security_group_rule(d: Caller, rule_id: str) -> bool:
    found = d.call("ec2", "DescribeSecurityGroupRules", {"SecurityGroupRuleIds": [rule_id]}) or {}
    revoked = [revoke_rule(d, rule) for rule in found.get("SecurityGroupRules", [])]  # every one, no short cut
    return any(revoked)


def _delete_route_table(d: Caller, table_id: str) -> bool:
    tables = (d.call("ec2", "DescribeRouteTables", {"RouteTableIds": [table_id]}) or {}).get("RouteTables", [])
    for association in tables[0].get("Associations", []) if tables else []:
        if association.get("Main"):
            return False  # the VPC's main table goes with the VPC
        d.call("ec2", "DisassociateRouteTable", {"AssociationId": association["RouteTableAssociationId"]})
    return done(d.call("ec2", "DeleteRouteTable", {"RouteTableId": table_id}))


def _delete_internet_gateway(d: Caller, gateway_id: str) -> bool:
    found = d.call("ec2", "DescribeInternetGateways", {"InternetGatewayIds": [gateway_id]}) or {}
    for gateway in found.get("InternetGateways", []):
        for attachment in gateway.get("Attachments", []):
            d.call("ec2", "DetachInternetGateway", {"InternetGatewayId": gateway_id, "VpcId": attachment["VpcId"]})
    return done(d.call("ec2", "DeleteInternetGateway", {"InternetGatewayId": gateway_id}))


# Elastic IPs have nothing of ours to compare: drift checks that they exist (and their tags) only.
KINDS = (
    Kind(
        "ec2:vpc",
        retag=ec2_retag,
        describe=Describe(
            Request("ec2", "DescribeVpcs", {"VpcIds": [it("VpcId")]}),
            "Vpcs[0]",
            (Attr("CIDR", "CidrBlock", "CreateVpc", "CidrBlock"),),
        ),
        find=tagged(
            "ec2:vpc", Request("ec2", "DescribeVpcs", {"Filters": TAGGED}), "Vpcs", "VpcId", 20, extra="CidrBlock"
        ),
        delete=Sends(delete_vpc),
    ),
    Kind(
        "ec2:flow-log",
        retag=ec2_retag,
        describe=Describe(Request("ec2", "DescribeFlowLogs", {"FlowLogIds": [it("FlowLogId")]}), "FlowLogs[0]"),
        find=tagged(
            "ec2:flow-log",
            Request("ec2", "DescribeFlowLogs", {"Filter": TAGGED}),
            "FlowLogs",
            "FlowLogId",
            25,
            detail=lambda log: f"flow log of {log.get('ResourceId')} to {log.get('LogDestination')}",
        ),
        delete=Sends(delete_flow_logs),
        uses=("ec2:vpc",),
        arn=("ec2", "vpc-flow-log"),
    ),
    Kind(
        "ec2:subnet",
        retag=ec2_retag,
        describe=Describe(
            Request("ec2", "DescribeSubnets", {"SubnetIds": [it("SubnetId")]}),
            "Subnets[0]",
            (
                Attr("CIDR", "CidrBlock", "CreateSubnet", "CidrBlock"),
                Attr("availability zone", "AvailabilityZone", "CreateSubnet", "AvailabilityZone"),
                Attr(
                    "public IP on launch", "MapPublicIpOnLaunch", "ModifySubnetAttribute", "MapPublicIpOnLaunch.Value"
                ),
            ),
        ),
        find=tagged(
            "ec2:subnet",
            Request("ec2", "DescribeSubnets", {"Filters": TAGGED}),
            "Subnets",
            "SubnetId",
            30,
            extra="CidrBlock",
        ),
        delete=Sends(delete_subnet),
        uses=("ec2:vpc",),
    ),
    Kind(
        "ec2:internet-gateway",
        retag=ec2_retag,
        describe=Describe(
            Request("ec2", "DescribeInternetGateways", {"InternetGatewayIds": [it("InternetGatewayId")]}),
            "InternetGateways[0]",
            (Attr("attached VPC", "Attachments[0].VpcId", "AttachInternetGateway", "VpcId"),),
        ),
        find=tagged(
            "ec2:internet-gateway",
            Request("ec2", "DescribeInternetGateways", {"Filters": TAGGED}),
            "InternetGateways",
            "InternetGatewayId",
            70,
        ),
        delete=_delete_internet_gateway,
        uses=("ec2:vpc",),
    ),
    Kind(
        "ec2:route-table",
        retag=ec2_retag,
        describe=Describe(
            Request("ec2", "DescribeRouteTables", {"RouteTableIds": [it("RouteTableId")]}),
            "RouteTables[0]",
            extra=_routes,
        ),
        find=tagged(
            "ec2:route-table",
            Request("ec2", "DescribeRouteTables", {"Filters": TAGGED}),
            "RouteTables",
            "RouteTableId",
            60,
        ),
        delete=_delete_route_table,
        uses=("ec2:nat-gateway", "ec2:internet-gateway", "ec2:vpc"),
    ),
    Kind(
        "ec2:route-table-association",
        retag=ec2_retag,  # goes with its route table
        describe=Describe(
            Request(
                "ec2",
                "DescribeRouteTables",
                {"Filters": [{"Name": "association.route-table-association-id", "Values": [it("AssociationId")]}]},
            ),
            "RouteTables[0]",
            extra=_compare_association,
            tags=None,
        ),
    ),
    Kind(
        "ec2:elastic-ip",
        retag=ec2_retag,
        describe=Describe(Request("ec2", "DescribeAddresses", {"AllocationIds": [it("AllocationId")]}), "Addresses[0]"),
        find=tagged(
            "ec2:elastic-ip",
            Request("ec2", "DescribeAddresses", {"Filters": TAGGED}),
            "Addresses",
            "AllocationId",
            120,
            detail=lambda a: f"Elastic IP {a.get('PublicIp')}",
            paged=False,
        ),
        delete=_release_address,
        uses=("ec2:internet-gateway",),  # a mapped public address keeps the gateway attached
    ),
    Kind(
        "ec2:nat-gateway",
        retag=ec2_retag,
        describe=Describe(
            Request("ec2", "DescribeNatGateways", {"NatGatewayIds": [it("NatGatewayId")]}),
            "NatGateways[0]",
            (Attr("subnet", "SubnetId", "CreateNatGateway", "SubnetId"),),
            gone=("State", ("deleting", "deleted")),
            bad=("State", ("failed",)),
        ),
        # DescribeNatGateways calls its filter list "Filter".
        find=tagged(
            "ec2:nat-gateway",
            Request("ec2", "DescribeNatGateways", {"Filter": [*TAGGED, {"Name": "state", "Values": _NAT_STATES}]}),
            "NatGateways",
            "NatGatewayId",
            110,
            detail=lambda nat: f"NAT gateway {nat.get('State')} in {nat.get('SubnetId')}",
        ),
        delete=Sends(delete_nat_gateway),
        uses=("ec2:elastic-ip", "ec2:subnet", "ec2:internet-gateway"),
        arn=("ec2", "natgateway"),
    ),
    Kind(
        "ec2:security-group",
        retag=ec2_retag,
        describe=Describe(
            Request("ec2", "DescribeSecurityGroups", {"GroupIds": [it("GroupId")]}), "SecurityGroups[0]", extra=_ingress
        ),
        find=tagged(
            "ec2:security-group",
            Request("ec2", "DescribeSecurityGroups", {"Filters": TAGGED}),
            "SecurityGroups",
            "GroupId",
            40,
            extra="GroupName",
        ),
        # After release_security_groups (the sweep's): groups referring to each other delete in any order.
        delete=Sends(delete_security_group),
        uses=("ec2:vpc",),
        converge=converge_group_ingress,
    ),
    Kind(
        "ec2:default-security-group",
        retag=ec2_retag,  # goes with its VPC
        describe=Describe(
            Request("ec2", "DescribeSecurityGroups", {"GroupIds": [it("GroupId")]}),
            "SecurityGroups[0]",
            extra=_default_group_rules,
            tags=None,
        ),
    ),
    Kind(
        "ec2:security-group-ingress",
        retag=ec2_retag,
        describe=Describe(
            Request("ec2", "DescribeSecurityGroups", {"GroupIds": [it("GroupId")]}),
            "SecurityGroups[0]",
            extra=_ingress,
            tags=None,
        ),
        converge=converge_ingress,
    ),
    Kind(
        "ec2:security-group-rule",
        retag=ec2_retag,
        describe=Describe(
            Request("ec2", "DescribeSecurityGroupRules", {"SecurityGroupRuleIds": [it("SecurityGroupRuleId")]}),
            "SecurityGroupRules[0]",
            (
                Attr("protocol", "IpProtocol", "AuthorizeSecurityGroupEgress", "IpPermissions[0].IpProtocol"),
                Attr("port", "FromPort", "AuthorizeSecurityGroupEgress", "IpPermissions[0].FromPort"),
                Attr(
                    "referenced group",
                    "ReferencedGroupInfo.GroupId",
                    "AuthorizeSecurityGroupEgress",
                    "IpPermissions[0].UserIdGroupPairs[0].GroupId",
                ),
            ),
        ),
        find=tagged(
            "ec2:security-group-rule",
            Request("ec2", "DescribeSecurityGroupRules", {"Filters": TAGGED}),
            "SecurityGroupRules",
            "SecurityGroupRuleId",
            50,
            extra="GroupId",
        ),
        delete=_delete_security_group_rule,
        uses=("ec2:security-group",),
    ),
)
