"""SageMaker hosting replay: what SageMaker does with a model and an endpoint config, done here.

For the endpoint's production variant: fetch the model's ``ModelDataUrl`` from S3 within
``ModelDataDownloadTimeoutInSeconds`` and unpack it where the container sees ``/opt/ml/model``; start the image's
serve command (``docker run IMAGE serve``) as a process with exactly the container's ``Environment`` (plus what
SageMaker's runtime adds: the port to bind); hold it to ``ContainerStartupHealthCheckTimeoutInSeconds`` for ``GET
/ping``; then answer InvokeEndpoint-shaped calls on ``POST /invocations``.

Images it can run: neurondeploy's serving image (its entrypoint, ``infra/serving/entrypoint.sh``, run with this
environment's neurondeploy, which is what the Dockerfile installs). Another image's serve command is not reproduced,
and the replay says so rather than pretending.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from neurondeploy.aws.transport import AwsTransport
from neurondeploy.engine.replay.sandbox import (
    ReplayError,
    Started,
    host_path,
    process_env,
    s3_bytes,
    start,
    unpack,
    wait_for_ping,
)
from neurondeploy.resources.sagemaker_endpoint import SERVING_REPOSITORY

MODEL_DIR = "/opt/ml/model"  # where SageMaker unpacks ModelDataUrl
ENTRYPOINT = Path(__file__).resolve().parents[3] / "infra" / "serving" / "entrypoint.sh"


@dataclass
class HostedContainer:
    """One replayed instance of a production variant."""

    url: str
    container: Started
    model_dir: Path
    download_s: float
    startup_s: float
    notes: list[str] = field(default_factory=list)

    def invoke(self, body: bytes, content_type: str = "application/json", accept: str = "application/json") -> dict:
        """InvokeEndpoint's shape: ``{"Body": bytes, "ContentType": str}``; a non-2xx answer is ModelError's."""
        request = urllib.request.Request(
            f"{self.url}/invocations", body, {"Content-Type": content_type, "Accept": accept}
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return {"Body": response.read(), "ContentType": response.headers.get("Content-Type", "")}
        except urllib.error.HTTPError as exc:
            raise ReplayError(
                f"ModelError: the container answered {exc.code}: {exc.read()[:300]!r}", "see the container's log"
            ) from None

    def stop(self) -> None:
        self.container.stop()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve_command(image: str) -> list[str]:
    """The image's ``serve`` as SageMaker runs it (``docker run IMAGE serve``), for the images the replay knows."""
    repository = image.rsplit("/", 1)[-1].split(":", 1)[0]
    if repository != SERVING_REPOSITORY:
        raise ReplayError(
            f"the replay runs neurondeploy's serving image, not {image}",
            "replay a deployment with deployment.container.kind: neurondeploy",
        )
    if not ENTRYPOINT.is_file():
        raise ReplayError(
            f"the serving image's entrypoint {ENTRYPOINT} is not here (it ships with the source, not the wheel)",
            "run the replay from a neurondeploy checkout",
        )
    return ["sh", str(ENTRYPOINT), "serve"]


def start_container(
    container: dict,
    variant: dict,
    model_dir: Path,
    *,
    root: Path,
    port: int | None = None,
    host: str = "127.0.0.1",
    download_s: float = 0.0,
) -> HostedContainer:
    """Start the model's ``container`` (a CreateModel PrimaryContainer) for ``variant`` (a ProductionVariant) on an
    unpacked ``model_dir``, and hold it to the variant's startup health check timeout."""
    port = port or free_port()
    command = serve_command(container["Image"])
    env = process_env(
        {"PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"},
        container.get("Environment", {}),
        # What the runtime adds: the port to bind (SageMaker's is 8080; here a free one on loopback) and where the
        # model is mounted (the image's /opt/ml/model, here under the sandbox root).
        {"SAGEMAKER_BIND_TO_PORT": str(port), "NEURONDEPLOY_ARTIFACT": str(model_dir), "NEURONDEPLOY_BIND_HOST": host},
    )
    started = start(command, env=env, cwd=root, log=root / "container.log")
    url = f"http://{host}:{port}"
    timeout = float(variant.get("ContainerStartupHealthCheckTimeoutInSeconds", 60))
    try:
        startup = wait_for_ping(started, f"{url}/ping", timeout, f"the container of {container['Image']}")
    except ReplayError:
        started.stop()
        raise
    notes = [
        f"{variant.get('InstanceType', 'the instance')}: the Neuron runtime is a CPU stand-in here",
        f"/opt/ml/model is {model_dir}; the container binds {host}:{port} instead of :8080",
    ]
    return HostedContainer(url, started, model_dir, download_s, startup, notes)


def replay_endpoint(transport: AwsTransport, endpoint_name: str, root: Path, *, port: int | None = None):
    """What SageMaker holds for ``endpoint_name`` (DescribeEndpoint, its config and model), replayed in ``root``."""
    endpoint = transport.call("sagemaker", "DescribeEndpoint", {"EndpointName": endpoint_name})
    config = transport.call(
        "sagemaker", "DescribeEndpointConfig", {"EndpointConfigName": endpoint["EndpointConfigName"]}
    )
    variant = config["ProductionVariants"][0]
    model = transport.call("sagemaker", "DescribeModel", {"ModelName": variant["ModelName"]})
    container = model["PrimaryContainer"]
    root = Path(root).resolve()
    model_dir = host_path(root, MODEL_DIR)
    began = time.monotonic()
    if container.get("ModelDataUrl"):
        unpack(s3_bytes(transport, container["ModelDataUrl"]), model_dir)
    download_s = time.monotonic() - began
    limit = float(variant.get("ModelDataDownloadTimeoutInSeconds", 3600))
    if download_s > limit:
        raise ReplayError(
            f"downloading and unpacking the model took {download_s:.0f} s, over ModelDataDownloadTimeoutInSeconds "
            f"{limit:.0f}",
            "raise deployment.model_download_timeout_s",
        )
    return start_container(container, variant, model_dir, root=root, port=port, download_s=download_s)


def answer_json(hosted: HostedContainer, payload) -> object:
    return json.loads(hosted.invoke(json.dumps(payload).encode())["Body"])
