"""SageMaker hosting replay: what SageMaker does with a model and an endpoint config, done here.

For the endpoint's production variant: fetch the model's ``ModelDataUrl`` from S3 within
``ModelDataDownloadTimeoutInSeconds`` and unpack it where the container sees ``/opt/ml/model``; start the image's
serve command (``docker run IMAGE serve``) as a process with exactly the container's ``Environment`` (plus what
SageMaker's runtime adds: the port to bind); hold it to ``ContainerStartupHealthCheckTimeoutInSeconds`` for ``GET
/ping``; then answer InvokeEndpoint-shaped calls on ``POST /invocations``.

Images it can run:

- AWS's Neuron inference DLC (``pytorch-inference-neuronx``, the default for our encoders): its ``serve`` is
  sagemaker-pytorch-inference-toolkit's ``serving.main()``, run here for real: it installs ``code/requirements.txt``
  (our wheel, from the model), archives the model with torch-model-archiver and starts TorchServe (Java) with the
  toolkit's handler service, which imports ``code/inference.py``. Stand-ins: the image's Python is a venv seeing this
  machine's packages minus neurondeploy (torch, the toolkit and TorchServe at the versions installed here, not the
  DLC's); ``/opt/ml`` and ``/etc/sagemaker-ts.properties`` live under the sandbox root (``SAGEMAKER_BASE_DIR`` and the
  toolkit's config path); TorchServe's token authorization is off (``TS_DISABLE_TOKEN_AUTHORIZATION``), as SageMaker's
  own ``/ping`` and ``/invocations`` carry no token.
- neurondeploy's serving image (its entrypoint, ``infra/serving/entrypoint.sh``, run with this environment's
  neurondeploy, which is what the Dockerfile installs).

Another image's serve command is not reproduced, and the replay says so rather than pretending.
"""

from __future__ import annotations

import fcntl
import os
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from neurondeploy.archive import packed_files
from neurondeploy.aws.transport import AwsTransport
from neurondeploy.catalog import get_instance
from neurondeploy.engine.model_bundle import link_or_copy
from neurondeploy.errors import CatalogError
from neurondeploy.replay.image_stack import ImageStack, image_stack, installed_overlay
from neurondeploy.replay.sandbox import (
    ReplayError,
    Started,
    free_port,
    host_path,
    process_env,
    python_standin,
    s3_bytes,
    script,
    start,
    unpack,
    wait_for_ping,
)
from neurondeploy.resources.sagemaker_endpoint import SERVING_REPOSITORY, image_repository
from neurondeploy.standin import STANDIN_CLAIMS_ENV, STANDIN_CORES_ENV

MODEL_DIR = "/opt/ml/model"  # where SageMaker unpacks ModelDataUrl
ENTRYPOINT = Path(__file__).resolve().parents[2] / "infra" / "serving" / "entrypoint.sh"


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
        """InvokeEndpoint's shape: ``{"Body": bytes, "ContentType": str}``, and ``CustomAttributes`` when the container
        set them (its X-Amzn-SageMaker-Custom-Attributes header); a non-2xx answer is ModelError's."""
        request = urllib.request.Request(
            f"{self.url}/invocations", body, {"Content-Type": content_type, "Accept": accept}
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                answer = {"Body": response.read(), "ContentType": response.headers.get("Content-Type", "")}
                attributes = response.headers.get("X-Amzn-SageMaker-Custom-Attributes")
                return answer | ({"CustomAttributes": attributes} if attributes else {})
        except urllib.error.HTTPError as exc:
            raise ReplayError(
                f"ModelError: the container answered {exc.code}: {exc.read()[:300]!r}", "see the container's log"
            ) from None

    def stop(self) -> None:
        self.container.stop()


DLC_REPOSITORY = "pytorch-inference-neuronx"
DLC_PYTHON = "/opt/conda"  # where the DLC's Python lives (its stand-in's sandboxed path)
TS_CONFIG = "/etc/sagemaker-ts.properties"  # sagemaker_pytorch_serving_container.torchserve.TS_CONFIG_FILE
CONSOLE_SCRIPTS = {
    "torchserve": "from ts.model_server import start; start()",
    "torch-model-archiver": "from model_archiver.model_packaging import generate_model_archive as g; g()",
}


# TorchServe's ports are the machine's: the lock must be one file whatever TMPDIR a process was given.
ONE_TORCHSERVE = (
    Path("/tmp" if Path("/tmp").is_dir() else tempfile.gettempdir()) / "neurondeploy-replay-torchserve.lock"
)


def one_torchserve_per_machine(timeout_s: float):
    """The toolkit refuses to start when another TorchServe runs on the machine (it looks for the process), and
    TorchServe's worker sockets and metrics port are fixed: DLC replays here take turns. The lock is held by an open
    file for as long as the container runs; waiting past ``timeout_s`` is the startup health check failing."""
    handle = ONE_TORCHSERVE.open("a+")
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return handle
        except BlockingIOError:
            if time.monotonic() > deadline:
                handle.close()
                raise ReplayError(
                    "another DLC replay (TorchServe) runs on this machine; the toolkit allows one",
                    "stop it (Ctrl-C its apply --local) and try again",
                ) from None
            time.sleep(0.5)


def dlc_serve(
    root: Path, model_dir: Path, port: int, host: str, overlay: Path | None = None
) -> tuple[list[str], dict[str, str]]:
    """The DLC's ``serve`` (dockerd-entrypoint.py -> the toolkit's serving.main) in a Python stand-in under
    ``root`` that sees ``overlay`` (the image's serving stack, :mod:`~neurondeploy.replay.image_stack`) first, the
    model mounted at ``<root>/opt/ml/model`` with its code/requirements.txt's /opt/ml paths there."""
    mount = host_path(root, MODEL_DIR)
    if model_dir.resolve() != mount.resolve():
        for path in packed_files(model_dir):
            link_or_copy(path, mount / path.relative_to(model_dir))
    requirements = mount / "code" / "requirements.txt"
    if requirements.is_file():  # a copy, so the model's own file is untouched
        text = requirements.read_text().replace("/opt/ml/", str(host_path(root, "/opt/ml")) + "/")
        requirements.unlink()
        requirements.write_text(text)
    python = python_standin(host_path(root, DLC_PYTHON), root, ahead=overlay)
    for name, body in CONSOLE_SCRIPTS.items():
        script(python / "bin" / name, f'exec "{python}/bin/python" -c "{body}" "$@"')
    host_path(root, "/etc").mkdir(parents=True, exist_ok=True)
    main = (
        "import sagemaker_pytorch_serving_container.torchserve as t; "
        f"t.TS_CONFIG_FILE = {str(host_path(root, TS_CONFIG))!r}; "
        "from sagemaker_pytorch_serving_container import serving; serving.main()"
    )
    env = {
        "PATH": f"{python}/bin:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "SAGEMAKER_BASE_DIR": str(host_path(root, "/opt/ml")),
        "TS_DISABLE_TOKEN_AUTHORIZATION": "true",
        # TorchServe reads TS_* over its config (enable_envvars_config): loopback, not the toolkit's 0.0.0.0
        "TS_INFERENCE_ADDRESS": f"http://{host}:{port}",
        "TS_MANAGEMENT_ADDRESS": f"http://{host}:{port}",
        "TS_METRICS_ADDRESS": f"http://{host}:{free_port()}",
    }
    return [str(python / "bin" / "python"), "-c", main], env


def neuron_host_env(instance_type: str, root: Path) -> dict[str, str]:
    """The stand-in runtime's view of the instance (neurondeploy.standin.reserve_neuron_cores): its NeuronCores,
    reserved per process as the Neuron runtime does, in lock files under the sandbox; none for an instance type
    the catalogue does not know."""
    try:
        instance = get_instance(instance_type)
    except CatalogError:
        return {}
    return {
        STANDIN_CORES_ENV: str(instance.neuron_cores),
        STANDIN_CLAIMS_ENV: str(root / ".replay" / "neuron-cores"),
    }


def stack_note(stack: ImageStack | None) -> str:
    """What serving stack the replay runs, and whose versions those are."""
    if stack is None:
        return "the catalogue has no row for this image's tag: TorchServe and the toolkit are this machine's versions"
    pins = ", ".join(f"{name} {version}" for name, version in stack.versions.items())
    return f"serving stack: {pins} (the image's, {stack.source}); Python and torch are this machine's"


def serve_command(image: str) -> list[str]:
    """Our serving image's ``serve`` as SageMaker runs it (``docker run IMAGE serve``)."""
    if image_repository(image) != SERVING_REPOSITORY:
        raise ReplayError(
            f"the replay runs neurondeploy's serving image and the {DLC_REPOSITORY} DLC, not {image}",
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
    timeout = float(variant.get("ContainerStartupHealthCheckTimeoutInSeconds", 60))
    lock = None
    notes = [
        f"{variant.get('InstanceType', 'the instance')}: the Neuron runtime is a CPU stand-in here",
        f"/opt/ml/model is {model_dir}; the container binds {host}:{port} instead of :8080",
    ]
    host_env = neuron_host_env(variant.get("InstanceType", ""), root)
    if image_repository(container["Image"]) == DLC_REPOSITORY:
        stack = image_stack(container["Image"])
        overlay = installed_overlay(stack) if stack else None
        notes.append(stack_note(stack))
        lock = one_torchserve_per_machine(timeout)
        command, image_env = dlc_serve(root, model_dir, port, host, overlay)
        if "SAGEMAKER_MODEL_SERVER_WORKERS" not in container.get("Environment", {}) and host_env:
            # TorchServe's default worker count is the host's vCPUs (ConfigManager.getDefaultWorkers): the
            # instance's, not this machine's. TS_* overrides its config (the toolkit enables envvars config).
            image_env["TS_DEFAULT_WORKERS_PER_MODEL"] = str(get_instance(variant["InstanceType"]).vcpus)
    else:
        command = serve_command(container["Image"])
        image_env = {"PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    env = process_env(
        image_env,
        container.get("Environment", {}),
        # What the runtime adds: the port to bind (SageMaker's is 8080; here a free one on loopback) and where the
        # model is mounted (the image's /opt/ml/model, here under the sandbox root).
        {
            "SAGEMAKER_BIND_TO_PORT": str(port),
            "NEURONDEPLOY_ARTIFACT": str(model_dir),
            "NEURONDEPLOY_BIND_HOST": host,
            **host_env,
        },
    )
    started = start(command, env=env, cwd=root, log=root / "container.log")
    started.lock = lock
    url = f"http://{host}:{port}"
    try:
        startup = wait_for_ping(started, f"{url}/ping", timeout, f"the container of {container['Image']}")
    except BaseException:  # refused, or Ctrl-C / SIGTERM while it starts: its processes go with it
        started.stop()
        raise
    return HostedContainer(url, started, model_dir, download_s, startup, notes)


def replay_endpoint(transport: AwsTransport, endpoint_name: str, root: Path, *, port: int | None = None):
    """What SageMaker holds for ``endpoint_name`` (DescribeEndpoint, its config and model), replayed in ``root``."""
    endpoint = transport.call("sagemaker", "DescribeEndpoint", {"EndpointName": endpoint_name})
    return replay_config(transport, endpoint["EndpointConfigName"], root, port=port)


def replay_config(transport: AwsTransport, config_name: str, root: Path, *, port: int | None = None):
    """An endpoint config's first variant and its model, replayed in ``root`` (what SageMaker starts for an
    endpoint moving to that config)."""
    config = transport.call("sagemaker", "DescribeEndpointConfig", {"EndpointConfigName": config_name})
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
