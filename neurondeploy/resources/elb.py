"""Application load balancer, target group and listeners, as pure request builders."""

from __future__ import annotations

from neurondeploy.resources.refs import ref
from neurondeploy.resources.model import Request, Resource, Wait, resource
from neurondeploy.resources.naming import aws_name, ownership_tags, tag_list

ELB_NAME_MAX = 32  # LoadBalancerName / TargetGroupName
# ALB-hour list price, us-east-1, unconfirmed (aws.amazon.com/elasticloadbalancing/pricing); LCU charges ignored.
ALB_USD_PER_HOUR = 0.0225
# TLS 1.3 + 1.2 only: the policy the ELB docs recommend for new HTTPS listeners.
SSL_POLICY = "ELBSecurityPolicy-TLS13-1-2-2021-06"
HEALTH_CHECK_PATH = "/ping"  # the SageMaker container contract our server implements


def alb_resource(spec, subnet_ids: list[str], *, after: list[str]) -> Resource:
    arn = ref("alb", "LoadBalancerArn")
    return resource("alb", "elbv2:load-balancer", [
        Request("elbv2", "CreateLoadBalancer", {
            "Name": aws_name(spec, "alb", ELB_NAME_MAX), "Subnets": list(subnet_ids),
            "SecurityGroups": [ref("sg-alb", "GroupId")], "Scheme": "internet-facing", "Type": "application",
            "IpAddressType": "ipv4", "Tags": tag_list(ownership_tags(spec)),
        }, {
            "LoadBalancerArn": "LoadBalancers[0].LoadBalancerArn",
            "DNSName": "LoadBalancers[0].DNSName",
            "CanonicalHostedZoneId": "LoadBalancers[0].CanonicalHostedZoneId",
            # "app/<name>/<id>": the label ALBRequestCountPerTarget scaling needs (see extract_outputs' after()).
            "FullName": "after(LoadBalancers[0].LoadBalancerArn, ':loadbalancer/')",
        }, Wait("LoadBalancerAvailable", {"LoadBalancerArns": [arn]})),
        # Requests with malformed headers are dropped rather than passed to the model server.
        Request("elbv2", "ModifyLoadBalancerAttributes", {"LoadBalancerArn": arn, "Attributes": [
            {"Key": "routing.http.drop_invalid_header_fields.enabled", "Value": "true"}]}),
    ], [Request("elbv2", "DeleteLoadBalancer", {"LoadBalancerArn": arn},
                wait=Wait("LoadBalancersDeleted", {"LoadBalancerArns": [arn]}))],
        after=after, hourly_usd=ALB_USD_PER_HOUR,
        description="Internet-facing ALB; $0.0225/h + LCUs (list price, us-east-1, unconfirmed; LCUs ignored)")


def target_group_resource(spec, vpc_id: str) -> Resource:
    arn = ref("target-group", "TargetGroupArn")
    return resource("target-group", "elbv2:target-group", [
        Request("elbv2", "CreateTargetGroup", {
            "Name": aws_name(spec, "tg", ELB_NAME_MAX), "Protocol": "HTTP", "Port": spec.serving.port,
            "VpcId": vpc_id, "TargetType": "instance",
            "HealthCheckProtocol": "HTTP", "HealthCheckPath": HEALTH_CHECK_PATH, "HealthCheckPort": "traffic-port",
            "HealthCheckIntervalSeconds": 15, "HealthCheckTimeoutSeconds": 5,
            "HealthyThresholdCount": 2, "UnhealthyThresholdCount": 3, "Matcher": {"HttpCode": "200"},
            "Tags": tag_list(ownership_tags(spec)),
        }, {
            "TargetGroupArn": "TargetGroups[0].TargetGroupArn",
            "FullName": "join('', ['targetgroup/', after(TargetGroups[0].TargetGroupArn, ':targetgroup/')])",
        }),
    ], [Request("elbv2", "DeleteTargetGroup", {"TargetGroupArn": arn})],
        description=f"HTTP :{spec.serving.port}, health check {HEALTH_CHECK_PATH} -> 200")


def listener_resources(spec, certificate_arn: str | None) -> list[Resource]:
    """HTTPS 443 with the certificate and HTTP 80 redirecting to it; HTTP 80 forwarding without TLS."""
    forward = [{"Type": "forward", "TargetGroupArn": ref("target-group", "TargetGroupArn")}]
    if certificate_arn is None:
        return [_listener(spec, "listener-http", "HTTP", 80, forward)]
    redirect = [{"Type": "redirect", "RedirectConfig": {"Protocol": "HTTPS", "Port": "443", "StatusCode": "HTTP_301"}}]
    # Only a validated certificate can be attached: wait for the validation record's CertificateValidated.
    after = ["cert-validation-record"] if certificate_arn.startswith("${") else []
    return [
        _listener(spec, "listener-https", "HTTPS", 443, forward,
                  {"SslPolicy": SSL_POLICY, "Certificates": [{"CertificateArn": certificate_arn}]}, after=after),
        _listener(spec, "listener-http", "HTTP", 80, redirect),
    ]


def _listener(spec, name: str, protocol: str, port: int, actions: list, extra: dict | None = None,
              after: list[str] = ()) -> Resource:
    return resource(name, "elbv2:listener", [
        Request("elbv2", "CreateListener", {
            "LoadBalancerArn": ref("alb", "LoadBalancerArn"), "Protocol": protocol, "Port": port,
            **(extra or {}), "DefaultActions": actions, "Tags": tag_list(ownership_tags(spec)),
        }, {"ListenerArn": "Listeners[0].ListenerArn"}),
    ], [Request("elbv2", "DeleteListener", {"ListenerArn": ref(name, "ListenerArn")})], after=after,
        description=f"{protocol} :{port} -> " + ("redirect to HTTPS" if actions[0]["Type"] == "redirect" else "target group"))
