"""VPC, subnets, internet/NAT gateways, route tables and security groups, as pure request builders.

Availability zones: names like us-east-1a are not known offline and not every AZ offers every Neuron type,
so unless the context names them, an ``azs`` lookup (DescribeInstanceTypeOfferings for the instance type)
runs once at apply and subnets use ``${azs.Zone1}``, ``${azs.Zone2}``, ... (sorted by name, so stable).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from neurondeploy.errors import PlanError
from neurondeploy.resources.refs import ref
from neurondeploy.resources.model import PlanContext, Request, Resource, Wait, lookup, resource
from neurondeploy.resources.naming import ec2_tags

# List prices, us-east-1, unconfirmed (aws.amazon.com/vpc/pricing: NAT gateway $0.045/h plus $0.045/GB
# processed, ignored here; public IPv4 address $0.005/h since 2024-02).
NAT_GATEWAY_USD_PER_HOUR = 0.045
PUBLIC_IPV4_USD_PER_HOUR = 0.005


@dataclass(frozen=True)
class Network:
    resources: tuple[Resource, ...]
    vpc_id: str  # literal id or ref
    public_subnet_ids: tuple[str, ...]
    instance_subnet_ids: tuple[str, ...]
    public_ready: tuple[str, ...]  # routes + associations the public subnets need before an ALB can serve
    ready: tuple[str, ...]  # the same for every subnet: instances need them before they boot (pip, S3)


def availability_zones(spec, ctx: PlanContext, instance_type: str) -> tuple[list[str], list[Resource]]:
    """``count`` AZ names: the context's, or refs to an apply-time lookup of where the type is offered."""
    count = spec.network.availability_zones
    if ctx.availability_zones:
        if len(ctx.availability_zones) < count:
            raise PlanError(f"{count} availability zones wanted but the context names {len(ctx.availability_zones)}",
                            "name more zones or lower network.availability_zones")
        return list(ctx.availability_zones[:count]), []
    outputs = {f"Zone{i + 1}": f"sort_by(InstanceTypeOfferings, &Location)[{i}].Location" for i in range(count)}
    request = Request("ec2", "DescribeInstanceTypeOfferings", {
        "LocationType": "availability-zone",
        "Filters": [{"Name": "instance-type", "Values": [instance_type]}],
    }, outputs)
    azs = lookup("azs", "ec2:instance-type-offerings-lookup", request,
                 f"The first {count} AZs (by name) offering {instance_type}; reads only.")
    return [ref("azs", name) for name in outputs], [azs]


def subnet_cidrs(network, zones: int) -> tuple[list[str], list[str]]:
    """Public then private blocks, equal size (the spec checked they are large enough for an ALB); private
    space is reserved even when unused, so switching instance_subnets between public and private never
    moves a public subnet."""
    blocks = [str(b) for b in ipaddress.ip_network(network.vpc_cidr).subnets(new_prefix=network.subnet_prefix)]
    return blocks[:zones], blocks[zones:2 * zones]


def network_resources(spec, ctx: PlanContext, instance_type: str) -> Network:
    net = spec.network
    if not net.creates_vpc:
        return _existing_network(spec)
    zones, resources = availability_zones(spec, ctx, instance_type)
    public_cidrs, private_cidrs = subnet_cidrs(net, len(zones))
    private = net.instance_subnets == "private"
    vpc_id = ref("vpc", "VpcId")
    resources += [_vpc(spec), _internet_gateway(spec)]
    public = [_subnet(spec, f"subnet-public-{i + 1}", cidr, zone, map_public_ip=not private)
              for i, (cidr, zone) in enumerate(zip(public_cidrs, zones))]
    resources += public
    resources.append(_route_table(spec, "rt-public", {"GatewayId": ref("igw", "InternetGatewayId")}))
    resources += [_association(f"rta-public-{i + 1}", "rt-public", s.name) for i, s in enumerate(public)]
    public_ids = tuple(ref(s.name, "SubnetId") for s in public)
    public_ready = ("rt-public", *(f"rta-public-{i + 1}" for i in range(len(public))))
    ready = list(public_ready)
    instance_ids = public_ids
    if private:
        subnets = [_subnet(spec, f"subnet-private-{i + 1}", cidr, zone, map_public_ip=False)
                   for i, (cidr, zone) in enumerate(zip(private_cidrs, zones))]
        resources += subnets + _nat_gateway(spec, public[0].name)
        resources.append(_route_table(spec, "rt-private", {"NatGatewayId": ref("nat", "NatGatewayId")}))
        resources += [_association(f"rta-private-{i + 1}", "rt-private", s.name) for i, s in enumerate(subnets)]
        instance_ids = tuple(ref(s.name, "SubnetId") for s in subnets)
        ready += ["rt-private", *(f"rta-private-{i + 1}" for i in range(len(subnets)))]
    return Network(tuple(resources), vpc_id, public_ids, instance_ids, public_ready, tuple(ready))


def _existing_network(spec) -> Network:
    net = spec.network  # the spec guarantees 2+ public subnets, and instance subnets when they are private
    instance_ids = net.instance_subnet_ids or net.public_subnet_ids
    return Network((), net.vpc_id, tuple(net.public_subnet_ids), tuple(instance_ids), (), ())


def _vpc(spec) -> Resource:
    vpc = ref("vpc", "VpcId")
    return resource("vpc", "ec2:vpc", [
        Request("ec2", "CreateVpc", {"CidrBlock": spec.network.vpc_cidr,
                                     "TagSpecifications": ec2_tags(spec, "vpc", spec.name)},
                {"VpcId": "Vpc.VpcId"}, Wait("VpcAvailable", {"VpcIds": [vpc]})),
        # One attribute per call (the API refuses both at once); hostnames let instances resolve S3/SSM names.
        Request("ec2", "ModifyVpcAttribute", {"VpcId": vpc, "EnableDnsSupport": {"Value": True}}),
        Request("ec2", "ModifyVpcAttribute", {"VpcId": vpc, "EnableDnsHostnames": {"Value": True}}),
    ], [Request("ec2", "DeleteVpc", {"VpcId": vpc})], description=f"VPC {spec.network.vpc_cidr}")


def _internet_gateway(spec) -> Resource:
    igw, vpc = ref("igw", "InternetGatewayId"), ref("vpc", "VpcId")
    return resource("igw", "ec2:internet-gateway", [
        Request("ec2", "CreateInternetGateway", {"TagSpecifications": ec2_tags(spec, "internet-gateway", spec.name)},
                {"InternetGatewayId": "InternetGateway.InternetGatewayId"}),
        Request("ec2", "AttachInternetGateway", {"InternetGatewayId": igw, "VpcId": vpc}),
    ], [
        Request("ec2", "DetachInternetGateway", {"InternetGatewayId": igw, "VpcId": vpc}),
        Request("ec2", "DeleteInternetGateway", {"InternetGatewayId": igw}),
    ], description="Internet gateway attached to the VPC")


def _subnet(spec, name: str, cidr: str, zone: str, *, map_public_ip: bool) -> Resource:
    subnet = ref(name, "SubnetId")
    create = [Request("ec2", "CreateSubnet", {
        "VpcId": ref("vpc", "VpcId"), "CidrBlock": cidr, "AvailabilityZone": zone,
        "TagSpecifications": ec2_tags(spec, "subnet", f"{spec.name}-{name.removeprefix('subnet-')}"),
    }, {"SubnetId": "Subnet.SubnetId"})]
    if map_public_ip:  # instances in public subnets reach S3/PyPI directly; their SG admits only the ALB
        create.append(Request("ec2", "ModifySubnetAttribute", {"SubnetId": subnet, "MapPublicIpOnLaunch": {"Value": True}}))
    return resource(name, "ec2:subnet", create, [Request("ec2", "DeleteSubnet", {"SubnetId": subnet})],
                    description=f"Subnet {cidr}")


def _route_table(spec, name: str, target: dict) -> Resource:
    table = ref(name, "RouteTableId")
    return resource(name, "ec2:route-table", [
        Request("ec2", "CreateRouteTable", {"VpcId": ref("vpc", "VpcId"),
                                            "TagSpecifications": ec2_tags(spec, "route-table", f"{spec.name}-{name[3:]}")},
                {"RouteTableId": "RouteTable.RouteTableId"}),
        Request("ec2", "CreateRoute", {"RouteTableId": table, "DestinationCidrBlock": "0.0.0.0/0", **target}),
    ], [Request("ec2", "DeleteRouteTable", {"RouteTableId": table})],
        description="Route table with a default route to the " + ("internet gateway" if "GatewayId" in target else "NAT gateway"))


def _association(name: str, table: str, subnet: str) -> Resource:
    return resource(name, "ec2:route-table-association", [
        Request("ec2", "AssociateRouteTable", {"RouteTableId": ref(table, "RouteTableId"), "SubnetId": ref(subnet, "SubnetId")},
                {"AssociationId": "AssociationId"}),
    ], [Request("ec2", "DisassociateRouteTable", {"AssociationId": ref(name, "AssociationId")})],
        taggable=False, description=f"Associates {subnet} with {table} (associations cannot be tagged)")


def _nat_gateway(spec, public_subnet: str) -> list[Resource]:
    allocation, nat = ref("eip-nat", "AllocationId"), ref("nat", "NatGatewayId")
    eip = resource("eip-nat", "ec2:elastic-ip", [
        Request("ec2", "AllocateAddress", {"Domain": "vpc", "TagSpecifications": ec2_tags(spec, "elastic-ip", f"{spec.name}-nat")},
                {"AllocationId": "AllocationId"}),
    ], [Request("ec2", "ReleaseAddress", {"AllocationId": allocation})], hourly_usd=PUBLIC_IPV4_USD_PER_HOUR,
        description="Elastic IP of the NAT gateway; public IPv4 $0.005/h (list price, us-east-1, unconfirmed)")
    # One NAT gateway, not one per AZ: the cheap choice; instances in other AZs lose egress if its AZ fails.
    gateway = resource("nat", "ec2:nat-gateway", [
        Request("ec2", "CreateNatGateway", {
            "SubnetId": ref(public_subnet, "SubnetId"), "AllocationId": allocation, "ConnectivityType": "public",
            "TagSpecifications": ec2_tags(spec, "natgateway", spec.name),
        }, {"NatGatewayId": "NatGateway.NatGatewayId"}, Wait("NatGatewayAvailable", {"NatGatewayIds": [nat]})),
    ], [Request("ec2", "DeleteNatGateway", {"NatGatewayId": nat}, wait=Wait("NatGatewayDeleted", {"NatGatewayIds": [nat]}))],
        after=["igw"], hourly_usd=NAT_GATEWAY_USD_PER_HOUR,
        description="NAT gateway for private instances; $0.045/h + $0.045/GB (list price, us-east-1, unconfirmed)")
    return [eip, gateway]


# --- security groups ---------------------------------------------------------------------------------------


def security_group_resources(spec, vpc_id: str, *, port: int, listener_ports: list[int]) -> list[Resource]:
    """ALB: ``listener_ports`` from allowed_cidrs only, egress only to the instances' port. Instances:
    ``port`` only from the ALB's group, no SSH; egress open (S3, PyPI, SSM)."""
    alb, inst = ref("sg-alb", "GroupId"), ref("sg-instances", "GroupId")
    cidrs = [{"CidrIp": cidr, "Description": "allowed_cidrs"} for cidr in spec.network.allowed_cidrs]
    alb_sg = resource("sg-alb", "ec2:security-group", [
        _create_group(spec, "alb", vpc_id, "neurondeploy load balancer: listener ports from allowed_cidrs"),
        Request("ec2", "AuthorizeSecurityGroupIngress", {"GroupId": alb, "IpPermissions": [
            {"IpProtocol": "tcp", "FromPort": p, "ToPort": p, "IpRanges": cidrs} for p in listener_ports]}),
        # A new group allows all egress; the ALB only needs to reach the instances (sg-alb-egress).
        Request("ec2", "RevokeSecurityGroupEgress", {"GroupId": alb, "IpPermissions": [
            {"IpProtocol": "-1", "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}]}),
    ], [Request("ec2", "DeleteSecurityGroup", {"GroupId": alb})], description="Load balancer security group")
    instances_sg = resource("sg-instances", "ec2:security-group", [
        _create_group(spec, "instances", vpc_id, "neurondeploy instances: serving port from the load balancer only"),
        Request("ec2", "AuthorizeSecurityGroupIngress", {"GroupId": inst, "IpPermissions": [
            {"IpProtocol": "tcp", "FromPort": port, "ToPort": port,
             "UserIdGroupPairs": [{"GroupId": alb, "Description": "load balancer"}]}]}),
    ], [Request("ec2", "DeleteSecurityGroup", {"GroupId": inst})], description="Instance security group")
    # Its own resource: the ALB group referring to the instance group and back would be a cycle.
    egress = resource("sg-alb-egress", "ec2:security-group-rule", [
        Request("ec2", "AuthorizeSecurityGroupEgress", {
            "GroupId": alb, "IpPermissions": [{"IpProtocol": "tcp", "FromPort": port, "ToPort": port,
                                               "UserIdGroupPairs": [{"GroupId": inst, "Description": "instances"}]}],
            "TagSpecifications": ec2_tags(spec, "security-group-rule"),
        }, {"SecurityGroupRuleId": "SecurityGroupRules[0].SecurityGroupRuleId"}),
    ], [Request("ec2", "RevokeSecurityGroupEgress", {"GroupId": alb, "SecurityGroupRuleIds": [ref("sg-alb-egress", "SecurityGroupRuleId")]})],
        description="Load balancer egress to the instances' serving port only")
    return [alb_sg, instances_sg, egress]


def _create_group(spec, suffix: str, vpc_id: str, description: str) -> Request:
    name = f"{spec.name}-{suffix}"
    return Request("ec2", "CreateSecurityGroup", {
        "GroupName": name, "Description": description, "VpcId": vpc_id,
        "TagSpecifications": ec2_tags(spec, "security-group", name),
    }, {"GroupId": "GroupId"})
