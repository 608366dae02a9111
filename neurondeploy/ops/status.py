"""`status NAME`: what a user asks of a deployment first: where it answers, whether it is healthy, what it costs
per hour, how old it is and when it last changed. Health and age are read from AWS (DescribeEndpoint;
DescribeLoadBalancers and DescribeTargetHealth; DescribeTrainingJob), read-only and with one retry: an AWS that
does not answer makes them "unknown (why)", never a failed `status`. The resource ids state records stay in
``resources`` (`status --resources`, `--json`)."""

from __future__ import annotations

import time
from datetime import datetime, timezone

from neurondeploy.aws.transport import AwsCallError, AwsTransport
from neurondeploy.engine.changes import recorded_hourly_usd
from neurondeploy.engine.state import DeploymentState
from neurondeploy.errors import NeurondeployError
from neurondeploy.ops.sagemaker_job import RUNNING
from neurondeploy.ops.train import training_job_status
from neurondeploy.serving.client import deployment_target

READ_ATTEMPTS = 2


def _when(value) -> float | None:
    """An AWS timestamp (botocore gives datetimes) as epoch seconds."""
    if isinstance(value, datetime):
        return value.timestamp()
    return float(value) if isinstance(value, (int, float)) else None


def age_text(seconds: float) -> str:
    minutes = int(seconds // 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min"
    return f"{hours // 24} days {hours % 24} h"


def _sagemaker_health(transport: AwsTransport, endpoint: str) -> tuple[str, float | None]:
    described = transport.call("sagemaker", "DescribeEndpoint", {"EndpointName": endpoint})
    health = described["EndpointStatus"]
    if described.get("FailureReason"):
        health += f": {described['FailureReason']}"
    return health, _when(described.get("CreationTime"))


def _ec2_health(transport: AwsTransport, deployment: DeploymentState) -> tuple[str, float | None]:
    group = deployment.resources.get("target-group")
    alb = deployment.resources.get("alb")
    created = None
    if alb and alb.outputs.get("LoadBalancerArn"):
        (balancer,) = transport.call(
            "elbv2", "DescribeLoadBalancers", {"LoadBalancerArns": [alb.outputs["LoadBalancerArn"]]}
        )["LoadBalancers"]
        created = _when(balancer.get("CreatedTime"))
    if not (group and group.outputs.get("TargetGroupArn")):
        return "no target group recorded", created
    targets = transport.call("elbv2", "DescribeTargetHealth", {"TargetGroupArn": group.outputs["TargetGroupArn"]})
    states = [t["TargetHealth"]["State"] for t in targets["TargetHealthDescriptions"]]
    healthy = states.count("healthy")
    others = ", ".join(f"{states.count(s)} {s}" for s in sorted(set(states) - {"healthy"}))
    return f"{healthy}/{len(states)} targets healthy" + (f" ({others})" if others else ""), created


def deployment_status(deployment: DeploymentState, wait_delay_s: float = 15, now: float | None = None) -> dict:
    """The status of one recorded deployment, AWS read where it must be (see the module doc)."""
    now = time.time() if now is None else now
    item: dict = {
        "name": deployment.name,
        "region": deployment.region,
        "kind": deployment.kind,
        "url": None,
        "invoke": None,
        "health": None,
        "hourly_usd": recorded_hourly_usd(deployment),
        "created": None,
        "age": None,
        "last_change": datetime.fromtimestamp(deployment.updated, timezone.utc).isoformat(timespec="seconds"),
        "spec_sha256": deployment.spec_digest,
        "resources": [
            {"name": r.name, "type": r.type, "complete": r.complete, "outputs": r.outputs}
            for r in deployment.resources.values()
        ],
    }
    if deployment.kind == "training":  # the job's live state, from DescribeTrainingJob
        job = training_job_status(deployment, wait_delay_s)
        item["training_job"] = job
        item["hourly_usd"] = None
        if job and "error" not in job:
            item["health"] = job["line"]
            # a job is paid while it runs, at its own instances' price; the spec's endpoint price is not its cost
            item["hourly_usd"] = job["price_usd_per_hour"] if job["status"] in RUNNING else 0.0
            item["cost_usd"] = job["cost_usd"]
            created = job.get("training_start")
            item["created"] = created.isoformat(timespec="seconds") if created else None
            item["age"] = age_text(now - created.timestamp()) if created else None
        return item
    transport = AwsTransport(deployment.region, wait_delay_s=wait_delay_s, max_attempts=READ_ATTEMPTS)
    try:
        target = deployment_target(deployment)
    except NeurondeployError as exc:
        item["health"] = f"not deployed: {exc.message}"
        return item
    item["invoke"] = f"sagemaker:{target.address}" if target.kind == "sagemaker" else target.address
    item["url"] = (
        f"https://runtime.sagemaker.{target.region}.amazonaws.com/endpoints/{target.address}/invocations"
        if target.kind == "sagemaker"
        else target.address
    )
    try:
        if target.kind == "sagemaker":
            health, created = _sagemaker_health(transport, target.address)
        else:
            health, created = _ec2_health(transport, deployment)
    except AwsCallError as exc:
        item["health"] = f"unknown ({exc.code or 'no answer'}: {' '.join(str(exc.detail).split())[:120]})"
        return item
    item["health"] = health
    if created is not None:
        item["created"] = datetime.fromtimestamp(created, timezone.utc).isoformat(timespec="seconds")
        item["age"] = age_text(now - created)
    return item
