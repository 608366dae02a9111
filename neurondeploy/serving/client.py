"""`invoke`: send one request to a running endpoint, wherever it runs.

TARGET is a URL (``http://127.0.0.1:8080``: POST <url>/invocations), ``sagemaker:<endpoint name>``
(sagemaker-runtime InvokeEndpoint), an inference spec file or a deployment name. A spec (or name) means its local
endpoint (`apply --local`) when one runs; its cloud one (the SageMaker endpoint, or for EC2 its Route 53 name over
HTTPS, else its load balancer) only when asked with ``where="cloud"`` (``--target cloud``): a local endpoint that
stopped never turns a test request into a paid one, or into a credentials error, silently. Every resolved target
says what it is (:meth:`Target.describe`), and the CLI prints it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from neurondeploy.aws.transport import AwsCallError, AwsTransport, default_region
from neurondeploy.engine.state_s3 import open_state
from neurondeploy.errors import AwsRequestError, NeurondeployError
from neurondeploy.serving.running import recorded_url, running_url
from neurondeploy.specs import InferenceSpec, load_spec

SAGEMAKER_PREFIX = "sagemaker:"
TIMEOUT_S = 70  # SageMaker's own invocation timeout is 60 s


class InvokeError(NeurondeployError):
    exit_code = 4


@dataclass
class Target:
    kind: str  # "http" | "sagemaker"
    address: str  # URL or endpoint name
    region: str | None = None
    what: str = ""  # "the local endpoint of NAME (apply --local)", "deployment NAME's load balancer", ...

    def describe(self) -> str:
        where = f"SageMaker endpoint {self.address} in {self.region or 'the default region'}"
        where = self.address if self.kind == "http" else where
        return f"{where} ({self.what})" if self.what else where


def parse_data(data: str) -> bytes:
    """``--data`` is JSON text, ``@file`` for a file's contents, or plain text sent as {"inputs": text}. Text that
    starts like JSON (``{`` or ``[``) or a file must parse: sending a broken JSON body as a text input would
    embed the typo instead of saying so."""
    if data.startswith("@"):
        try:
            raw = Path(data[1:]).read_bytes()
        except OSError as exc:
            raise InvokeError(f"--data {data}: cannot read ({exc.strerror})", "check the file path") from None
    else:
        raw = data.encode()
    try:
        json.loads(raw)
        return raw
    except ValueError as exc:
        where = f"--data {data}: the file" if data.startswith("@") else "--data"
        if data.startswith("@") or data.lstrip().startswith(("{", "[")):
            raise InvokeError(
                f"{where} is not valid JSON: {exc}",
                'fix the JSON, e.g. {"inputs": ["some text"]}; plain text (not starting with { or [) is sent as '
                '{"inputs": text}',
            ) from None
        return json.dumps({"inputs": data}).encode()


def resolve_target(target: str, state_location: str | None = None, where: str | None = None) -> Target:
    """``where``: None (a spec or name means its running local endpoint), "local" or "cloud"."""
    if target.startswith(("http://", "https://")):
        return Target("http", target.rstrip("/"))
    if target.startswith(SAGEMAKER_PREFIX):
        return Target("sagemaker", target[len(SAGEMAKER_PREFIX) :])
    if Path(target).is_file():
        spec = load_spec(target).spec
        if not isinstance(spec, InferenceSpec):
            raise InvokeError(f"{target} is a training spec", "invoke an inference deployment")
        local = _local(spec.name, where, f"neurondeploy apply {target} --local", spec.deployment.platform)
        if local is not None:
            return local
        if spec.deployment.platform == "sagemaker":  # the endpoint is named after the deployment
            return Target("sagemaker", spec.name, spec.region, f"deployment {spec.name}, from {target}")
        if spec.dns_url:
            return Target("http", spec.dns_url, what=f"deployment {spec.name}'s DNS name, from {target}")
        raise InvokeError(
            f"{target} has no dns name; its load balancer's address is known only after apply",
            f"give the load balancer's URL as TARGET, or the deployment's name after apply ({spec.name})",
        )
    # a name: its local endpoint when one runs; one that was announced and stopped is refused, not replaced
    if where == "local" or (where is None and (running_url(target) or recorded_url(target))):
        return _local(target, where, "its `neurondeploy apply SPEC --local`", None)
    deployed = _from_state(target, state_location)
    if deployed is not None:
        return deployed
    raise InvokeError(
        f"{target!r} is not a URL, sagemaker:<endpoint>, a spec file or a deployment in state",
        "e.g. http://127.0.0.1:8080, sagemaker:my-endpoint, templates/minilm-sagemaker.yaml, or a name "
        "`neurondeploy status` lists",
    )


def _local(name: str, where: str | None, start: str, platform: str | None) -> Target | None:
    """A spec's running local endpoint; None when the cloud one is asked for; else refused, with both ways on."""
    if where == "cloud":
        return None
    url = running_url(name)
    if url:
        return Target("http", url, what=f"the local endpoint of {name}, apply --local")
    raise _no_local(name, start, platform)


def _no_local(name: str, start: str, platform: str | None) -> InvokeError:
    cloud = {"sagemaker": "its SageMaker endpoint", "ec2": "its load balancer"}.get(platform or "", "its deployment")
    return InvokeError(
        f"no local endpoint of {name} runs on this machine; nothing was sent",
        f"start one with `{start}`, or add --target cloud to invoke {cloud} in AWS",
    )


def _from_state(name: str, state_location: str | None) -> Target | None:
    """A deployment applied earlier: its SageMaker endpoint, or its DNS name (else its load balancer's address)."""
    deployment = open_state(state_location).get(name)
    if deployment is None or deployment.kind != "inference":
        return None
    return deployment_target(deployment)


def deployment_target(deployment, spec: dict | None = None) -> Target:
    """Where a recorded deployment answers: its SageMaker endpoint, its DNS name, else its load balancer's.
    ``spec``: the spec as applied now (default: the one state recorded, which an apply records only once done)."""
    name = deployment.name
    for resource in deployment.resources.values():
        for request in resource.create_requests:
            if request.get("operation") == "CreateEndpoint":
                return Target("sagemaker", request["params"]["EndpointName"], deployment.region, f"deployment {name}")
    spec = spec if spec is not None else json.loads(deployment.spec_json or "{}")
    if spec.get("dns"):
        scheme = "https" if (spec.get("tls") or {}).get("enabled") else "http"
        return Target("http", f"{scheme}://{spec['dns']['record_name']}", what=f"deployment {name}'s DNS name")
    alb = deployment.resources.get("alb")
    if alb and alb.outputs.get("DNSName"):
        return Target("http", f"http://{alb.outputs['DNSName']}", what=f"deployment {name}'s load balancer")
    raise InvokeError(
        f"deployment {name} has no endpoint or load balancer recorded yet", "run `neurondeploy apply` for it first"
    )


def invoke(
    target: str,
    body: bytes,
    region: str | None = None,
    state_location: str | None = None,
    where: str | None = None,
    on_target=None,
) -> Any:
    """``on_target(Target)`` hears where the request goes, before it is sent."""
    return send(resolve_and_say(target, state_location, where, on_target), body, region)


def resolve_and_say(target: str, state_location: str | None, where: str | None, on_target=None) -> Target:
    """:func:`resolve_target`, then ``on_target`` told where the request will go."""
    resolved = resolve_target(target, state_location, where)
    if on_target is not None:
        on_target(resolved)
    return resolved


def send(resolved: Target, body: bytes, region: str | None = None) -> Any:
    if resolved.kind == "http":
        return _invoke_http(resolved.address, body)
    return _invoke_sagemaker(resolved.address, body, region or resolved.region)


def _invoke_http(url: str, body: bytes) -> Any:
    import httpx

    try:
        response = httpx.post(
            f"{url}/invocations", content=body, headers={"Content-Type": "application/json"}, timeout=TIMEOUT_S
        )
    except httpx.HTTPError as exc:
        raise InvokeError(
            f"{url}: {type(exc).__name__}: {exc}", "is the endpoint running? check it with GET /ping"
        ) from None
    return _answer(response.status_code, response.content, url)


def _invoke_sagemaker(endpoint: str, body: bytes, region: str | None) -> Any:
    # No region anywhere: botocore says so ("You must specify a region"), as an AwsCallError without a code.
    # 5 attempts, as boto3's default client made: an invocation is not retried longer than it was.
    transport = AwsTransport(region or default_region(fallback=None), max_attempts=5)
    try:
        response = transport.call(
            "sagemaker-runtime",
            "InvokeEndpoint",
            {"EndpointName": endpoint, "Body": body, "ContentType": "application/json", "Accept": "application/json"},
        )
    except AwsRequestError as exc:  # refused offline (a name AWS cannot have, a body over 6 MB)
        raise InvokeError(
            f"sagemaker endpoint {endpoint}: {exc.message}", "check the endpoint name, region and that it is InService"
        ) from None
    except AwsCallError as exc:
        if exc.code is None:  # no answer: credentials, region, network
            raise InvokeError(
                f"sagemaker endpoint {endpoint}: {exc.detail}", "check AWS credentials and region"
            ) from None
        raise InvokeError(
            f"sagemaker endpoint {endpoint}: {exc.code}: {exc.detail}",
            "check the endpoint name, region and that it is InService",
        ) from None
    return _answer(200, response["Body"].read(), f"sagemaker:{endpoint}")


def _answer(status: int, content: bytes, where: str) -> Any:
    try:
        data = json.loads(content)
    except ValueError:
        data = content.decode(errors="replace")
    if status >= 400:
        message = data.get("error") if isinstance(data, dict) else data
        raise InvokeError(f"{where} answered {status}: {message}", "see the message; 400s are about the request")
    return data


def describe_answer(answer) -> str:
    """A short, readable view of an answer: embeddings are long."""
    first = answer[0] if isinstance(answer, list) and answer else answer
    if isinstance(first, list) and first and isinstance(first[0], (int, float)):
        head = ", ".join(f"{value:.4f}" for value in first[:4])
        return f"embedding of {len(first)} values: [{head}, ...]"
    return json.dumps(first)[:300]
