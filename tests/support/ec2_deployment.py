"""The EC2 + ALB + DNS + TLS template's test world, shared by the integration tests that apply it to a moto server
over HTTP: the spec pointed at a new hosted zone, a small artifact, transports that fail or count calls, and what
is left tagged. The fixtures over these are in tests/integration/conftest.py."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

from neurondeploy.archive import artifact_digest
from neurondeploy.aws.transport import AwsCallError, AwsTransport, is_mutating
from neurondeploy.compiler.cache import CompileCache
from neurondeploy.compiler.compile import compile_spec
from neurondeploy.engine.apply import apply_spec
from neurondeploy.engine.sweep import find_leftovers
from neurondeploy.specs import parse_spec

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
TEMPLATE = REPO / "templates" / "minilm-ec2-alb.yaml"
AMI_PARAMETER = "/test/neuron-dlami"  # moto refuses writes under /aws/service/: the spec's context points here
CONTEXT = {"ami_ssm_parameter": AMI_PARAMETER}
NAME = "minilm-web"


def build_artifact(root: Path) -> Path:
    """A small compiled artifact stands in for MiniLM's: apply only uploads bytes, and MiniLM's 360 MB slow every run."""
    sys.path.insert(0, str(FIXTURES))
    try:
        text = (
            "kind: inference\nname: tiny\ntask: feature-extraction\nmodel: {factory: 'tiny_models:text_encoder', dtype: float32}\n"
            "compile: {batch_sizes: [1], sequence_lengths: [8]}\n"
        )
        return compile_spec(
            parse_spec(text, path=root / "s.yaml"),
            backend="cpu",
            cache=CompileCache(root=root / "cache"),
            out_dir=root / "artifact",
        ).artifact_dir
    finally:
        sys.path.remove(str(FIXTURES))


def zone_and_spec(aws, tmp_path, reference: str = "test"):
    """A new hosted zone for example.com and the template pointed at it."""
    zone = (
        aws.client("route53")
        .create_hosted_zone(Name="example.com", CallerReference=reference)["HostedZone"]["Id"]
        .split("/")[-1]
    )
    spec_path = tmp_path / f"minilm-ec2-alb-{reference}.yaml"
    spec_path.write_text(TEMPLATE.read_text().replace("Z0123456789ABCDEFGHIJ", zone))
    return parse_spec(spec_path.read_text(), file=str(spec_path), path=spec_path), zone


def prepare_world(aws, tmp_path):
    """An account with the hosted zone the template names and a DLAMI parameter; returns the loaded spec."""
    image = aws.client("ec2").describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    aws.client("ssm").put_parameter(Name=AMI_PARAMETER, Value=image, Type="String")
    return zone_and_spec(aws, tmp_path)


class FaultyTransport(AwsTransport):
    """Fails the k-th mutating call (or the first call of ``operation``) as AWS would refuse it: nothing is sent,
    the caller sees an AWS error."""

    def __init__(self, region: str, fail_at: int | None = None, *, operation: str | None = None) -> None:
        super().__init__(region, wait_delay_s=1, wait_attempts=5)
        self.fail_at, self.operation = fail_at, operation
        self.mutating_seen = 0
        self.counter_lock = threading.Lock()

    def call(self, service, operation, params):
        if is_mutating(operation):
            with self.counter_lock:
                self.mutating_seen += 1
                failing = self.mutating_seen == self.fail_at or operation == self.operation
                if operation == self.operation:
                    self.operation = None  # the first call only
            if failing:
                raise AwsCallError(
                    f"{service}:{operation}: InjectedFault: failure number {self.fail_at}", code="InjectedFault"
                )
        return super().call(service, operation, params)


# The README's test command meets a fault at the first call of every third operation, and at the last call: a spread
# over the apply in a third of the time. .ci/run then runs the loops (marker every_k) with NEURONDEPLOY_EVERY_K=1: a
# fault at every call, once per change set.
SAMPLE_STRIDE = 3


def fault_rounds(operations: list[tuple[str, str]]) -> list[int]:
    """The rounds (1-based call numbers) of a fault-injection loop over an apply's mutating calls."""
    if os.environ.get("NEURONDEPLOY_EVERY_K") == "1":
        return list(range(1, len(operations) + 1))
    firsts = [k for k, operation in enumerate(operations, 1) if operation not in operations[: k - 1]]
    return sorted(set(firsts[::SAMPLE_STRIDE]) | {len(operations)})


def artifact_key(directory) -> str:
    """Where apply puts an artifact: named by its sha256, so a new model is a new object."""
    return f"{NAME}/artifact/model-{artifact_digest(directory)[:16]}.tar.gz"


def apply_args(loaded, artifact_dir) -> list[str]:
    """`neurondeploy apply` of the template through the CLI, as the ownership and claim tests run it."""
    return [
        "apply",
        loaded.source.file,
        "--artifact",
        str(artifact_dir),
        "--ami-ssm-parameter",
        AMI_PARAMETER,
        "--wait-delay-s",
        "1",
        "--yes",
        "--json",
        "--no-smoke",  # moto runs no load balancer to send it through (test_smoke.py covers it)
    ]


def counts(aws, zone: str) -> dict[str, int]:
    """What the moto server holds of the kinds a deployment makes, whoever made it."""
    ec2, elbv2 = aws.client("ec2"), aws.client("elbv2")
    records = aws.client("route53").list_resource_record_sets(HostedZoneId=zone)["ResourceRecordSets"]
    return {
        "vpcs": len([v for v in ec2.describe_vpcs()["Vpcs"] if not v.get("IsDefault")]),
        "security groups": len(ec2.describe_security_groups()["SecurityGroups"]),
        "certificates": len(aws.client("acm").list_certificates()["CertificateSummaryList"]),
        "load balancers": len(elbv2.describe_load_balancers()["LoadBalancers"]),
        "target groups": len(elbv2.describe_target_groups()["TargetGroups"]),
        "auto scaling groups": len(aws.client("autoscaling").describe_auto_scaling_groups()["AutoScalingGroups"]),
        "launch templates": len(ec2.describe_launch_templates()["LaunchTemplates"]),
        "dns records": len([r for r in records if r["Type"] not in ("NS", "SOA")]),
        "iam roles": len(aws.client("iam").list_roles()["Roles"]),
    }


def transport() -> AwsTransport:
    return AwsTransport("us-east-1", wait_delay_s=1, wait_attempts=5)


def apply_once(loaded, state, artifact, t=None, **kwargs):
    t = t or transport()
    return apply_spec(loaded, transport=t, state=state, artifact_dir=artifact, context=CONTEXT, **kwargs), t


def tagged(t: AwsTransport, zone: str) -> list:
    return find_leftovers(t, NAME, hosted_zone_ids=[zone])


def record_sets(aws, zone):
    return {
        (r["Name"], r["Type"])
        for r in aws.client("route53").list_resource_record_sets(HostedZoneId=zone)["ResourceRecordSets"]
    }


def count_resources(t: AwsTransport, zone: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for leftover in tagged(t, zone):
        counts[leftover.type] = counts.get(leftover.type, 0) + 1
    return counts
