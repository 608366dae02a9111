"""Application load balancer, target group and listeners, as pure request builders."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from neurondeploy.resources.kinds import Attr, Caller, Describe, Find, Kind, Reader, Scan, Sends, done, it, ours
from neurondeploy.resources.model import Request, Resource, Wait, resource
from neurondeploy.resources.naming import aws_name, ownership_tags, tag_list
from neurondeploy.resources.refs import ref
from neurondeploy.resources.retag import elbv2_retag
from neurondeploy.specs import InferenceSpec

ELB_NAME_MAX = 32  # LoadBalancerName / TargetGroupName
# ALB-hour list price, us-east-1, unconfirmed (aws.amazon.com/elasticloadbalancing/pricing); LCU charges ignored.
ALB_USD_PER_HOUR = 0.0225
# TLS 1.3 + 1.2 only: the policy the ELB docs recommend for new HTTPS listeners.
SSL_POLICY = "ELBSecurityPolicy-TLS13-1-2-2021-06"
HEALTH_CHECK_PATH = "/ping"  # the SageMaker container contract our server implements


# Requests with malformed headers are dropped rather than passed to the model server.
ATTRIBUTES = [{"Key": "routing.http.drop_invalid_header_fields.enabled", "Value": "true"}]


def alb_resource(spec: InferenceSpec, subnet_ids: list[str], *, after: list[str]) -> Resource:
    arn = ref("alb", "LoadBalancerArn")
    return resource(
        "alb",
        "elbv2:load-balancer",
        [
            Request(
                "elbv2",
                "CreateLoadBalancer",
                {
                    "Name": aws_name(spec, "alb", ELB_NAME_MAX),
                    "Subnets": list(subnet_ids),
                    "SecurityGroups": [ref("sg-alb", "GroupId")],
                    "Scheme": "internet-facing",
                    "Type": "application",
                    "IpAddressType": "ipv4",
                    "Tags": tag_list(ownership_tags(spec)),
                },
                {
                    "LoadBalancerArn": "LoadBalancers[0].LoadBalancerArn",
                    "DNSName": "LoadBalancers[0].DNSName",
                    "CanonicalHostedZoneId": "LoadBalancers[0].CanonicalHostedZoneId",
                    # "app/<name>/<id>": the label ALBRequestCountPerTarget scaling needs (see extract_outputs' after()).
                    "FullName": "after(LoadBalancers[0].LoadBalancerArn, ':loadbalancer/')",
                },
                Wait("LoadBalancerAvailable", {"LoadBalancerArns": [arn]}),
            ),
            Request(
                "elbv2",
                "ModifyLoadBalancerAttributes",
                {
                    "LoadBalancerArn": arn,
                    "Attributes": ATTRIBUTES,
                },
            ),
        ],
        delete_load_balancer(arn),
        after=after,
        hourly_usd=ALB_USD_PER_HOUR,
        description="Internet-facing ALB; $0.0225/h + LCUs (list price, us-east-1, unconfirmed; LCUs ignored)",
        # Name, scheme and type make another load balancer; subnets, groups, attributes and tags change in place.
        identity=(aws_name(spec, "alb", ELB_NAME_MAX), "internet-facing", "application"),
        update=[
            Request("elbv2", "SetSubnets", {"LoadBalancerArn": arn, "Subnets": list(subnet_ids)}),
            Request(
                "elbv2", "SetSecurityGroups", {"LoadBalancerArn": arn, "SecurityGroups": [ref("sg-alb", "GroupId")]}
            ),
            Request("elbv2", "ModifyLoadBalancerAttributes", {"LoadBalancerArn": arn, "Attributes": ATTRIBUTES}),
            Request("elbv2", "AddTags", {"ResourceArns": [arn], "Tags": tag_list(ownership_tags(spec))}),
        ],
    )


_HEALTH_CHECK = (
    "HealthCheckProtocol",
    "HealthCheckPath",
    "HealthCheckPort",
    "HealthCheckIntervalSeconds",
    "HealthCheckTimeoutSeconds",
    "HealthyThresholdCount",
    "UnhealthyThresholdCount",
    "Matcher",
)


def target_group_resource(spec: InferenceSpec, vpc_id: str) -> Resource:
    arn = ref("target-group", "TargetGroupArn")
    name = aws_name(spec, "tg", ELB_NAME_MAX)
    create = {
        "Name": name,
        "Protocol": "HTTP",
        "Port": spec.serving.port,
        "VpcId": vpc_id,
        "TargetType": "instance",
        "HealthCheckProtocol": "HTTP",
        "HealthCheckPath": HEALTH_CHECK_PATH,
        "HealthCheckPort": "traffic-port",
        "HealthCheckIntervalSeconds": 15,
        "HealthCheckTimeoutSeconds": 5,
        "HealthyThresholdCount": 2,
        "UnhealthyThresholdCount": 3,
        "Matcher": {"HttpCode": "200"},
        "Tags": tag_list(ownership_tags(spec)),
    }
    return resource(
        "target-group",
        "elbv2:target-group",
        [
            Request(
                "elbv2",
                "CreateTargetGroup",
                create,
                {
                    "TargetGroupArn": "TargetGroups[0].TargetGroupArn",
                    "FullName": "join('', ['targetgroup/', after(TargetGroups[0].TargetGroupArn, ':targetgroup/')])",
                },
            ),
        ],
        delete_target_group(arn),
        description=f"HTTP :{spec.serving.port}, health check {HEALTH_CHECK_PATH} -> 200",
        # Name, protocol, port and VPC force a new target group (the VPC through its dependency); health checks
        # and tags change in place.
        identity=(name, "HTTP", str(spec.serving.port)),
        update=[
            Request(
                "elbv2",
                "ModifyTargetGroup",
                {"TargetGroupArn": arn, **{key: create[key] for key in _HEALTH_CHECK}},
            ),
            Request("elbv2", "AddTags", {"ResourceArns": [arn], "Tags": create["Tags"]}),
        ],
    )


def listener_resources(spec: InferenceSpec, certificate_arn: str | None) -> list[Resource]:
    """HTTPS 443 with the certificate and HTTP 80 redirecting to it; HTTP 80 forwarding without TLS."""
    forward = [{"Type": "forward", "TargetGroupArn": ref("target-group", "TargetGroupArn")}]
    if certificate_arn is None:
        return [_listener(spec, "listener-http", "HTTP", 80, forward)]
    redirect = [{"Type": "redirect", "RedirectConfig": {"Protocol": "HTTPS", "Port": "443", "StatusCode": "HTTP_301"}}]
    # Only a validated certificate can be attached: wait for the validation record's CertificateValidated.
    after = ["cert-validation-record"] if certificate_arn.startswith("${") else []
    return [
        _listener(
            spec,
            "listener-https",
            "HTTPS",
            443,
            forward,
            {"SslPolicy": SSL_POLICY, "Certificates": [{"CertificateArn": certificate_arn}]},
            after=after,
        ),
        _listener(spec, "listener-http", "HTTP", 80, redirect),
    ]


def _listener(
    spec: InferenceSpec,
    name: str,
    protocol: str,
    port: int,
    actions: list,
    extra: dict | None = None,
    after: list[str] = (),
) -> Resource:
    return resource(
        name,
        "elbv2:listener",
        [
            Request(
                "elbv2",
                "CreateListener",
                {
                    "LoadBalancerArn": ref("alb", "LoadBalancerArn"),
                    "Protocol": protocol,
                    "Port": port,
                    **(extra or {}),
                    "DefaultActions": actions,
                    "Tags": tag_list(ownership_tags(spec)),
                },
                {"ListenerArn": "Listeners[0].ListenerArn"},
            ),
        ],
        delete_listener(ref(name, "ListenerArn")),
        after=after,
        description=f"{protocol} :{port} -> "
        + ("redirect to HTTPS" if actions[0]["Type"] == "redirect" else "target group"),
        # The load balancer is what a listener cannot change (it follows it); the rest ModifyListener sets.
        identity=(name,),
        update=[
            Request(
                "elbv2",
                "ModifyListener",
                {
                    "ListenerArn": ref(name, "ListenerArn"),
                    "Protocol": protocol,
                    "Port": port,
                    **(extra or {}),
                    "DefaultActions": actions,
                },
            ),  # fmt: skip
            Request(
                "elbv2", "AddTags", {"ResourceArns": [ref(name, "ListenerArn")], "Tags": tag_list(ownership_tags(spec))}
            ),
        ],
    )


# --- kinds: how drift describes them, how the sweep finds and deletes leftovers (resources.kinds) ----------------

_ELB_TAGS_PER_CALL = 20


def _ours_arns(scan: Scan, arns: list[str]) -> dict[str, list]:
    """Of ``arns``, ours, with their tags."""
    found = {}
    for start in range(0, len(arns), _ELB_TAGS_PER_CALL):
        chunk = arns[start : start + _ELB_TAGS_PER_CALL]
        for description in scan.call("elbv2", "DescribeTags", {"ResourceArns": chunk}).get("TagDescriptions", []):
            if ours(description.get("Tags"), scan.deployment):
                found[description["ResourceArn"]] = description.get("Tags")
    return found


def _find_elbv2(scan: Scan) -> None:
    balancers = [
        lb["LoadBalancerArn"]
        for page in scan.paged.call("elbv2", "DescribeLoadBalancers", {})
        for lb in page.get("LoadBalancers", [])
    ]
    ours_lbs = _ours_arns(scan, balancers)
    for arn, tags in ours_lbs.items():
        scan.add("elbv2:load-balancer", arn, f"load balancer {arn.split('/')[-2]}", tags=tags)
    listeners = [
        listener["ListenerArn"]
        for lb in ours_lbs
        for page in scan.paged.call("elbv2", "DescribeListeners", {"LoadBalancerArn": lb})
        for listener in page.get("Listeners", [])
    ]
    for arn, tags in _ours_arns(scan, listeners).items():
        scan.add("elbv2:listener", arn, "listener", tags=tags)
    groups = [
        tg["TargetGroupArn"]
        for page in scan.paged.call("elbv2", "DescribeTargetGroups", {})
        for tg in page.get("TargetGroups", [])
    ]
    for arn, tags in _ours_arns(scan, groups).items():
        scan.add("elbv2:target-group", arn, f"target group {arn.split('/')[-2]}", tags=tags)
        health = scan.call("elbv2", "DescribeTargetHealth", {"TargetGroupArn": arn})
        targets = [d["Target"] for d in health.get("TargetHealthDescriptions", [])]
        if targets:
            ids = ",".join(f"{t['Id']}:{t.get('Port', '')}" for t in targets)
            scan.add("elbv2:target-registration", arn, f"targets {ids} still registered", tags=tags)


_FIND = Find("elbv2", 200, _find_elbv2)


def _elb_tags(aws: Reader, obj: dict, ids: Mapping) -> Any:
    arn = obj.get("LoadBalancerArn") or obj.get("TargetGroupArn") or obj.get("ListenerArn")
    descriptions = aws.call("elbv2", "DescribeTags", {"ResourceArns": [arn]}).get("TagDescriptions", [])
    return descriptions[0].get("Tags") if descriptions else []


def _deregister_targets(d: Caller, target_group_arn: str) -> bool:
    health = d.call("elbv2", "DescribeTargetHealth", {"TargetGroupArn": target_group_arn}) or {}
    deregistered = False
    for description in health.get("TargetHealthDescriptions", []):
        target = {k: v for k, v in description["Target"].items() if k in ("Id", "Port", "AvailabilityZone")}
        # A terminated instance is refused as InvalidTarget: it is no target any more, which is the goal.
        deregistered |= done(
            d.call("elbv2", "DeregisterTargets", {"TargetGroupArn": target_group_arn, "Targets": [target]})
        )
    return deregistered


# Each kind's delete requests, recorded by its builder (a ref for the id) and sent by the sweep (kinds.Sends).


def delete_load_balancer(arn: str) -> list[Request]:
    return [
        Request(
            "elbv2",
            "DeleteLoadBalancer",
            {"LoadBalancerArn": arn},
            wait=Wait("LoadBalancersDeleted", {"LoadBalancerArns": [arn]}),
        )
    ]


def delete_target_group(arn: str) -> list[Request]:
    return [Request("elbv2", "DeleteTargetGroup", {"TargetGroupArn": arn})]


def delete_listener(arn: str) -> list[Request]:
    return [Request("elbv2", "DeleteListener", {"ListenerArn": arn})]


KINDS = (
    # A target group's registrations (the Auto Scaling group's instances): its id is the target group's ARN.
    Kind(
        "elbv2:target-registration",
        tagless=True,
        find=_FIND,
        delete=_deregister_targets,
        uses=("ec2:instance", "elbv2:target-group"),
    ),
    Kind(
        "elbv2:listener",
        retag=elbv2_retag,
        describe=Describe(
            Request("elbv2", "DescribeListeners", {"ListenerArns": [it("ListenerArn")]}),
            "Listeners[0]",
            (
                Attr("port", "Port", "CreateListener", "Port"),
                Attr("protocol", "Protocol", "CreateListener", "Protocol"),
                Attr(
                    "certificate", "Certificates[0].CertificateArn", "CreateListener", "Certificates[0].CertificateArn"
                ),
                Attr("default action", "DefaultActions[0].Type", "CreateListener", "DefaultActions[0].Type"),
            ),
            tags=_elb_tags,
        ),
        find=_FIND,
        delete=Sends(delete_listener),
        uses=("elbv2:load-balancer", "elbv2:target-group", "acm:certificate", "route53:record"),
        arn=("elasticloadbalancing", "listener"),
    ),
    Kind(
        "elbv2:load-balancer",
        retag=elbv2_retag,
        describe=Describe(
            Request("elbv2", "DescribeLoadBalancers", {"LoadBalancerArns": [it("LoadBalancerArn")]}),
            "LoadBalancers[0]",
            (
                Attr("scheme", "Scheme", "CreateLoadBalancer", "Scheme"),
                Attr("security groups", "SecurityGroups", "CreateLoadBalancer", "SecurityGroups", True),
            ),
            bad=("State.Code", ("failed",)),
            tags=_elb_tags,
        ),
        find=_FIND,
        delete=Sends(delete_load_balancer),
        uses=("ec2:subnet", "ec2:security-group", "ec2:route-table", "ec2:internet-gateway"),
        arn=("elasticloadbalancing", "loadbalancer"),
    ),
    Kind(
        "elbv2:target-group",
        retag=elbv2_retag,
        describe=Describe(
            Request("elbv2", "DescribeTargetGroups", {"TargetGroupArns": [it("TargetGroupArn")]}),
            "TargetGroups[0]",
            (
                Attr("port", "Port", "CreateTargetGroup", "Port"),
                Attr("protocol", "Protocol", "CreateTargetGroup", "Protocol"),
                Attr("health check path", "HealthCheckPath", "CreateTargetGroup", "HealthCheckPath"),
                Attr("health check codes", "Matcher.HttpCode", "CreateTargetGroup", "Matcher.HttpCode"),
            ),
            tags=_elb_tags,
        ),
        find=_FIND,
        delete=Sends(delete_target_group),
        uses=("ec2:vpc",),
        arn=("elasticloadbalancing", "targetgroup"),
    ),
)
