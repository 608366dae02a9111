"""`apply SPEC --local`: the main job on a laptop — validate, compile (from the cache when it can), start the
endpoint on loopback, wait for /ping, send a sample request and show the answer, how to call it, and the AWS
plan the same spec would apply in the cloud. Ctrl-C stops it cleanly.

The endpoint is the SageMaker hosting replay (:mod:`neurondeploy.replay.hosting`) of the CreateModel and
CreateEndpointConfig requests the plan renders for the spec: the model's image's serve command, with exactly that
model's Environment, held to that variant's startup health check. Only the model data differs: the compiled
artifact directory stands for what SageMaker unpacks from ``ModelDataUrl`` (no S3 here).
"""

from __future__ import annotations

import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from neurondeploy.compiler.cache import CompileCache
from neurondeploy.compiler.compile import compile_spec
from neurondeploy.engine.model_bundle import dlc_model_dir
from neurondeploy.errors import NeurondeployError
from neurondeploy.planner.context import plan_context
from neurondeploy.replay.hosting import start_container
from neurondeploy.resources.release import serving_piece
from neurondeploy.resources.sagemaker_endpoint import (
    create_endpoint_config_request,
    create_model_request,
    runs_on_dlc,
)
from neurondeploy.serving.http_limits import uvicorn_config
from neurondeploy.specs import InferenceSpec, LoadedSpec
from neurondeploy.specs.inference import ServingSpec
from neurondeploy.wheel import toolkit_wheel

READY_TIMEOUT_S = 300


class LocalApplyError(NeurondeployError):
    exit_code = 2


@dataclass
class LocalEndpoint:
    url: str
    artifact_dir: Path
    stop: Callable[[], None]
    thread: threading.Thread  # alive while the endpoint runs
    notes: list[str] = field(default_factory=list)  # what the replay stands in for


def ensure_port_free(host: str, port: int) -> None:
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError:
            raise LocalApplyError(f"port {port} on {host} is in use", "stop what uses it, or pass --port N") from None


def start_local_endpoint(
    loaded: LoadedSpec,
    *,
    host: str,
    port: int,
    backend: str = "auto",
    cache_dir: Path | None = None,
    out_dir: Path | None = None,
    on_bucket=None,
) -> LocalEndpoint:
    """Compile (cache first), then replay the plan's SageMaker model on it; returns once it answers /ping."""
    spec = loaded.spec
    if not isinstance(spec, InferenceSpec):
        raise LocalApplyError(f"{loaded.source.file} is a training spec", "use `neurondeploy train SPEC --local`")
    if not spec.container.ours:
        raise LocalApplyError(
            f"container {spec.deployment.container.kind} runs only on Neuron instances (the Hugging Face "
            "container compiles the LLM there)",
            "plan it with `neurondeploy plan`, or apply it to AWS",
        )
    ensure_port_free(host, port)
    result = compile_spec(
        loaded,
        backend=backend,
        cache=CompileCache(root=cache_dir) if cache_dir else None,
        out_dir=out_dir,
        on_bucket=on_bucket,
    )
    ctx = plan_context(loaded)
    container = create_model_request(spec, ctx)["PrimaryContainer"]
    (variant,) = create_endpoint_config_request(spec, ctx)["ProductionVariants"]
    root = Path(tempfile.mkdtemp(prefix=f"neurondeploy-{spec.name}-"))
    model_dir = result.artifact_dir.resolve()
    if runs_on_dlc(spec, ctx):  # model.tar.gz as apply builds it: the artifact plus code/ with our wheel
        model_dir = dlc_model_dir(model_dir, toolkit_wheel(), serving_piece(spec))
    try:
        hosted = start_container(container, variant, model_dir, root=root, port=port, host=host)
    except BaseException:  # a failed start, Ctrl-C or SIGTERM while starting: no sandbox left behind
        shutil.rmtree(root, ignore_errors=True)
        raise
    watcher = threading.Thread(target=hosted.container.process.wait, name="neurondeploy-local-endpoint", daemon=True)
    watcher.start()

    def stop() -> None:
        hosted.stop()
        watcher.join(timeout=30)
        shutil.rmtree(root, ignore_errors=True)

    return LocalEndpoint(hosted.url, result.artifact_dir, stop, watcher, hosted.notes)


def serve_in_thread(app, serving: ServingSpec, host: str, port: int) -> tuple[Callable[[], None], threading.Thread]:
    """Run an ASGI app under uvicorn (with the serving section's HTTP limits) in a background thread."""
    import uvicorn

    config = uvicorn_config(app, serving, host, port, timeout_graceful_shutdown=10)
    uvicorn_server = uvicorn.Server(config)
    uvicorn_server.install_signal_handlers = lambda: None  # the main thread owns Ctrl-C
    thread = threading.Thread(target=uvicorn_server.run, name="neurondeploy-local-endpoint", daemon=True)
    thread.start()

    def stop() -> None:
        uvicorn_server.should_exit = True
        thread.join(timeout=30)

    return stop, thread


def wait_until_ready(endpoint: LocalEndpoint, timeout_s: float = READY_TIMEOUT_S) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    message = "not listening yet"
    while time.monotonic() < deadline:
        if not endpoint.thread.is_alive():
            raise LocalApplyError(
                "the local endpoint stopped while starting", "run `neurondeploy serve` on the artifact to see why"
            )
        try:
            response = httpx.get(f"{endpoint.url}/ping", timeout=2)
            if response.status_code == 200:
                return
            message = response.json().get("error", response.text)
            if "loading" not in message:
                raise LocalApplyError(f"the endpoint cannot load the model: {message}", "recompile the artifact")
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise LocalApplyError(
        f"the endpoint was not healthy within {timeout_s:.0f} s ({message})", "check the model and try again"
    )
