"""The smoke test after a deploy: one request to the new endpoint, its answer judged against the model itself.

An encoder is sent the request its manifest names and must answer what eager PyTorch answered at compile time
(``compiler.smoke``): the embedding to the spec's numerical tolerance, a classifier's scores likewise. An LLM must
give a non-empty completion to a short chat. A health check proves the server started; this proves it serves the
model that was sized and compiled, through the route a client uses (sagemaker-runtime InvokeEndpoint, or HTTP).
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Iterator
from typing import Any

from neurondeploy.errors import NeurondeployError
from neurondeploy.manifest import Manifest, smoke_request
from neurondeploy.resources.compute import startup_grace_s
from neurondeploy.serving.client import InvokeError, deployment_target, describe_answer, invoke
from neurondeploy.serving.llm.client import chat
from neurondeploy.specs import InferenceSpec

SMOKE_PROMPT = "Say hello from Inferentia2."
SMOKE_MAX_TOKENS = 24
SKIP_HINT = "apply --no-smoke skips the smoke test"


class SmokeTestFailed(NeurondeployError):
    exit_code = 11


@contextlib.contextmanager
def _unanswered() -> Iterator[None]:
    """An invocation that got no answer (refused, unreachable) fails the smoke test with the client's own line."""
    try:
        yield
    except InvokeError as exc:
        raise SmokeTestFailed(
            f"smoke test: {exc.message}", f"{exc.hint or 'check the endpoint'}; {SKIP_HINT}"
        ) from None


def _numbers(value: Any) -> list[float] | None:
    """An answer's values in order (a vector, or nested lists of numbers), or None if it holds anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return [float(value)]
    if not isinstance(value, list) or not value:
        return None
    flat: list[float] = []
    for item in value:
        numbers = _numbers(item)
        if numbers is None:
            return None
        flat.extend(numbers)
    return flat


def _softmax(logits: list[float]) -> list[float]:
    top = max(logits)
    exps = [math.exp(value - top) for value in logits]
    total = sum(exps)
    return [value / total for value in exps]


def _served_values(answer: Any, manifest: Manifest) -> tuple[list[float], list[float]] | None:
    """(served, expected) values of the one answer, paired; None if the answer is not of the task's shape."""
    if not isinstance(answer, list) or len(answer) != 1:
        return None
    (first,) = answer
    if manifest.task == "feature-extraction":
        served = _numbers(first)
        return (served, manifest.smoke.output) if served else None
    # A classifier answers its top labels with softmax scores (serving.runtime.ModelRunner.outputs).
    expected = _softmax(manifest.smoke.output)
    by_label = {manifest.labels.get(index, str(index)): score for index, score in enumerate(expected)}
    if not isinstance(first, list) or not first:
        return None
    served, wanted = [], []
    for entry in first:
        if not isinstance(entry, dict) or entry.get("label") not in by_label or _numbers(entry.get("score")) is None:
            return None
        served.append(float(entry["score"]))
        wanted.append(by_label[entry["label"]])
    return served, wanted


def logs_of(target: str) -> str:
    """Where an endpoint's own log is: a SageMaker endpoint's in CloudWatch (/aws/sagemaker/Endpoints/NAME,
    https://docs.aws.amazon.com/sagemaker/latest/dg/logging-cloudwatch.html); a local one's is its server's output."""
    if target.startswith("sagemaker:"):
        return f"`aws logs tail /aws/sagemaker/Endpoints/{target.split(':', 1)[1]} --follow`"
    if target.startswith(("http://127.", "http://localhost")):
        return "the local server's output"
    return "the instances' journal: `journalctl -u neurondeploy` over SSM Session Manager"


def judge(answer: Any, manifest: Manifest, where: str) -> str:
    """The line saying the answer matches the compile-time reference; raises :class:`SmokeTestFailed` if not."""
    described = describe_answer(answer)
    if manifest.smoke is None:  # compiled before references were kept: the shape is all there is to check
        if _numbers(answer) is None and not (isinstance(answer, list) and len(answer) == 1):
            raise SmokeTestFailed(f"smoke test: {where} answered {described[:120]}, not one answer", SKIP_HINT)
        return f"smoke test: {where} answered ({described}); the artifact has no compile-time reference to compare"
    paired = _served_values(answer, manifest)
    if paired is None or len(paired[0]) != len(paired[1]):
        raise SmokeTestFailed(
            f"smoke test: {where} answered {described[:120]}, not the model's answer "
            f"({manifest.task}, {len(manifest.smoke.output)} values)",
            f"check the endpoint's model and logs ({logs_of(where)}); {SKIP_HINT}",
        )
    served, expected = paired
    difference = max(abs(got - want) for got, want in zip(served, expected))
    tolerance = manifest.smoke.tolerance
    if not difference <= tolerance:  # also refuses NaN
        raise SmokeTestFailed(
            f"smoke test: {where} answered {described[:120]}, off the compile-time reference by {difference:.3g} "
            f"(tolerance {tolerance:g})",
            f"the endpoint does not compute this model's answer: check its artifact and logs; {SKIP_HINT}",
        )
    return (
        f"smoke test passed: {where} answered {described}, within {tolerance:g} of what the model answered at "
        f"compile time (largest difference {difference:.2g})"
    )


def smoke_encoder(target: str, manifest: Manifest, region: str | None = None) -> str:
    """Send the artifact's smoke request to ``target`` (a URL or ``sagemaker:NAME``) and judge the answer."""
    with _unanswered():
        answer = invoke(target, json.dumps(smoke_request(manifest)).encode(), region=region)
    return judge(answer, manifest, target)


def smoke_llm(target: str, region: str | None = None) -> str:
    """A short chat to ``target``: it must answer a non-empty completion."""
    with _unanswered():
        answer = chat(target, SMOKE_PROMPT, on_text=lambda text: None, max_tokens=SMOKE_MAX_TOKENS, region=region)
    if not answer.text.strip():
        raise SmokeTestFailed(
            f"smoke test: {target} answered an empty completion to {SMOKE_PROMPT!r} ({answer.finish_reason})",
            f"check the endpoint's logs ({logs_of(target)}); {SKIP_HINT}",
        )
    return f"smoke test passed: {target} completed {SMOKE_PROMPT!r} with {answer.text[:60]!r} (model {answer.model})"


def wait_for_healthy_targets(
    transport, target_group_arn: str, budget_s: float, delay_s: float, clock=time.monotonic, sleep=time.sleep
) -> int:
    """Poll the target group until a target is healthy (the load balancer routes to healthy targets only);
    how many are. Past ``budget_s``, the smoke test fails naming each target's state and reason."""
    deadline = clock() + budget_s
    while True:
        described = transport.call("elbv2", "DescribeTargetHealth", {"TargetGroupArn": target_group_arn})
        targets = described.get("TargetHealthDescriptions", [])
        healthy = [t for t in targets if t["TargetHealth"]["State"] == "healthy"]
        if healthy:
            return len(healthy)
        if clock() >= deadline:
            states = ", ".join(
                f"{t['Target']['Id']} {t['TargetHealth']['State']}"
                + (f" ({t['TargetHealth']['Reason']})" if t["TargetHealth"].get("Reason") else "")
                for t in targets
            )
            raise SmokeTestFailed(
                f"smoke test: no healthy target behind the load balancer after {budget_s:.0f} s "
                f"({states or 'no target registered'})",
                "check the instances' boot (the EC2 console's system log, or journalctl -u neurondeploy on one); "
                f"the deployment stays as applied; {SKIP_HINT}",
            )
        sleep(delay_s)


def smoke_ec2(
    spec: InferenceSpec,
    manifest: Manifest | None,
    transport,
    deployment,
    *,
    url: str | None = None,
    delay_s: float = 15,
) -> str:
    """EC2: once the target group has a healthy target (within the instances' startup grace), the model's request
    through the load balancer's name (or ``url``: an internal load balancer reached through a tunnel)."""
    if manifest is None:
        return "smoke test: not run (the artifact has no compile-time reference)"
    arn = deployment.resources["target-group"].outputs["TargetGroupArn"]
    healthy = wait_for_healthy_targets(transport, arn, startup_grace_s(spec), delay_s)
    target = url or deployment_target(deployment, spec.model_dump(mode="json")).address
    return f"{healthy} healthy target(s); " + smoke_encoder(target, manifest)


def smoke_deployment(spec: InferenceSpec, manifest: Manifest | None) -> str:
    """The smoke test of an applied SageMaker deployment, through sagemaker-runtime (EC2: :func:`smoke_ec2`)."""
    target = f"sagemaker:{spec.name}"  # the endpoint is named after the deployment
    if spec.container.llm:
        return smoke_llm(target, spec.region)
    if manifest is None:
        return (
            f"smoke test: not run ({spec.deployment.container.kind} serves model data with no compile-time reference)"
        )
    return smoke_encoder(target, manifest, spec.region)
