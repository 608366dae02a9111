"""apply against a real moto server over HTTP: calls per resource, a no-op re-apply, parallel vs sequential.

Prints, for the EC2 + ALB + DNS + TLS template:
- mutating calls per created resource for a fresh apply (goal 1.0 plus the unavoidable: attribute changes,
  attachments, rules that AWS only takes in a second call);
- all calls and mutating calls of a re-apply of the unchanged spec (goal 0 mutating);
- wall time of a fresh apply with independent branches in parallel vs one resource at a time, side by side,
  against moto as it is (answers in about a millisecond) and with 60 ms added to every call, nearer what AWS
  control planes answer in (the emulator has no latency of its own, so parallelism has little to win there).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("MOTO_ACM_VALIDATION_WAIT", "0")  # read by moto when imported
# The tests' tiny CPU trace stands in for a NEFF, said as the tests say it (their cpu_standin fixture): without it
# apply refuses the CPU artifact for inf2 before any request, and there is nothing to measure.
os.environ.setdefault("NEURONDEPLOY_CPU_STANDIN", "1")

REPO = Path(__file__).parents[1]
AMI_PARAMETER = "/bench/neuron-dlami"
ADDED_LATENCY_S = 0.06


def start_moto() -> tuple[object, str]:
    from moto.server import ThreadedMotoServer

    sys.path.insert(0, str(REPO / "tests" / "fixtures"))
    import moto_gaps

    moto_gaps.patch_all()  # where moto differs from AWS in what our defaults rely on (TLS-only bucket, default SG)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    os.environ.update(
        AWS_ENDPOINT_URL=url, AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1"
    )
    return server, url


def fresh_world(url: str, workdir: Path, round_name: str):
    import boto3
    import requests

    from neurondeploy.specs import parse_spec

    requests.post(f"{url}/moto-api/reset", timeout=10)
    zone = (
        boto3.client("route53")
        .create_hosted_zone(Name="example.com", CallerReference=round_name)["HostedZone"]["Id"]
        .split("/")[-1]
    )
    image = boto3.client("ec2").describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    boto3.client("ssm").put_parameter(Name=AMI_PARAMETER, Value=image, Type="String")
    spec = workdir / f"{round_name}.yaml"
    spec.write_text((REPO / "templates" / "minilm-ec2-alb.yaml").read_text().replace("Z0123456789ABCDEFGHIJ", zone))
    return parse_spec(spec.read_text(), file=str(spec), path=spec)


def tiny_artifact(workdir: Path) -> Path:
    sys.path.insert(0, str(REPO / "tests"))
    from support.ec2_deployment import build_artifact  # the tests' small artifact: the same bytes to upload

    return build_artifact(workdir)


def main() -> None:
    from neurondeploy.aws.transport import AwsTransport
    from neurondeploy.engine.apply import apply_spec
    from neurondeploy.engine.state import StateStore

    class SlowTransport(AwsTransport):
        def call(self, service, operation, params):
            time.sleep(ADDED_LATENCY_S)
            return super().call(service, operation, params)

    server, url = start_moto()
    try:
        with tempfile.TemporaryDirectory() as directory:
            workdir = Path(directory)
            artifact = tiny_artifact(workdir)

            def run(label: str, transport_class, parallel: bool, state: StateStore | None = None):
                loaded = fresh_world(url, workdir, label) if state is None else run.loaded
                run.loaded = loaded
                state = state or StateStore(workdir / f"{label}.db")
                transport = transport_class("us-east-1", wait_delay_s=1, wait_attempts=5)
                start = time.perf_counter()
                result = apply_spec(
                    loaded,
                    transport=transport,
                    state=state,
                    artifact_dir=artifact,
                    parallel=parallel,
                    context={"ami_ssm_parameter": AMI_PARAMETER},
                )
                return result, transport, time.perf_counter() - start, state

            result, transport, _, state = run("fresh", AwsTransport, True)
            resources = len(result.created)
            infra_calls = [c for c in transport.mutating_calls() if c.service != "s3"]
            print(
                f"fresh apply: {resources} resources, {len(infra_calls)} mutating calls for them "
                f"({len(infra_calls) / resources:.2f} per resource; goal 1.0 + the unavoidable), "
                f"+ {len(transport.mutating_calls()) - len(infra_calls)} for the shared bucket and artifact upload"
            )
            again, transport, seconds, _ = run("fresh", AwsTransport, True, state)
            print(
                f"re-apply of the unchanged spec: {len(transport.calls)} calls, {len(transport.mutating_calls())} mutating "
                f"(goal 0), {seconds:.2f} s"
            )
            for label, transport_class in (
                ("moto as is", AwsTransport),
                (f"+{ADDED_LATENCY_S * 1000:.0f} ms per call", SlowTransport),
            ):
                timings = {}
                for parallel in (True, False):
                    _, _, seconds, _ = run(
                        f"{'par' if parallel else 'seq'}-{label.split()[0]}", transport_class, parallel
                    )
                    timings[parallel] = seconds
                print(
                    f"apply wall time, {label:18}: parallel {timings[True]:6.2f} s, sequential {timings[False]:6.2f} s, "
                    f"ratio {timings[True] / timings[False]:.2f}"
                )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
