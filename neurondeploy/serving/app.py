"""The SageMaker inference container contract over HTTP: GET /ping, POST /invocations, plus GET /metrics.

/ping answers 200 only once the artifact is loaded and a warm-up inference ran on every bucket; until then
(SageMaker pings while the container loads) it answers 503. Bad requests get 400/413 with a message and never
reach the model; a full queue gets 503 with Retry-After; a failing model call answers 500 to its own batch only.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import orjson
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from neurondeploy.serving.batcher import DynamicBatcher, QueueFull
from neurondeploy.serving.runtime import BadRequest, ModelRunner
from neurondeploy.specs.inference import ServingSpec

RETRY_AFTER_S = 1
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "neurondeploy_requests", "Requests by route and status code", ["route", "code"], registry=self.registry
        )
        self.errors = Counter("neurondeploy_errors", "Failed requests by kind", ["kind"], registry=self.registry)
        self.batch_size = Histogram(
            "neurondeploy_batch_size", "Inputs per model call", buckets=BATCH_BUCKETS, registry=self.registry
        )
        self.queue_seconds = Histogram(
            "neurondeploy_queue_seconds",
            "Time an input waited for its model call",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.latency = Histogram(
            "neurondeploy_request_seconds",
            "Time to answer /invocations",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.ready = Gauge("neurondeploy_ready", "1 once the model is loaded and warmed up", registry=self.registry)

    def observe_batch(self, size: int, waits: list[float]) -> None:
        self.batch_size.observe(size)
        for wait in waits:
            self.queue_seconds.observe(wait)


def _json(data, status: int = 200, headers: dict | None = None) -> Response:
    return Response(orjson.dumps(data), status_code=status, media_type="application/json", headers=headers)


def _error(status: int, message: str, headers: dict | None = None) -> Response:
    return _json({"error": message}, status, headers)


class InferenceServer:
    """State of one server: the runner (once loaded), the batcher, and the metrics."""

    def __init__(self, artifact_dir: Path, serving: ServingSpec, replicas: int = 1, runtime: str | None = None) -> None:
        self.artifact_dir = artifact_dir
        self.serving = serving
        self.replica_count = replicas
        self.runtime = runtime
        self.runner: ModelRunner | None = None
        self.batcher: DynamicBatcher | None = None
        self.metrics = Metrics()
        self.load_error: str | None = None
        self.loading: asyncio.Task | None = None

    def _load(self) -> ModelRunner:
        runner = ModelRunner(self.artifact_dir, self.serving, self.replica_count, self.runtime)
        runner.warm_up()
        return runner

    async def start(self) -> None:
        self.loading = asyncio.create_task(self._start())

    async def _start(self) -> None:
        try:
            runner = await asyncio.get_running_loop().run_in_executor(None, self._load)
        except Exception as exc:  # reported by /ping (and the log) instead of killing the process SageMaker watches
            self.load_error = f"{type(exc).__name__}: {exc}"
            return
        self.batcher = DynamicBatcher(
            runner.run,
            len(runner.replicas),
            runner.max_batch,
            self.serving.max_batch_delay_ms / 1000,
            self.serving.max_queue,
            self.metrics.observe_batch,
            group_size=runner.group_size,
        )
        self.batcher.start()
        self.runner = runner
        self.metrics.ready.set(1)

    async def stop(self) -> None:
        if self.loading:
            self.loading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.loading
        if self.batcher:
            await self.batcher.stop()

    # --- routes ---------------------------------------------------------------------------------------------------

    async def ping(self, request: Request) -> Response:
        if self.runner is None:
            return _error(503, self.load_error or "loading the model")
        return _json({"status": "ok", "model": self.runner.manifest.name})

    async def metrics_route(self, request: Request) -> Response:
        return Response(generate_latest(self.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    async def invocations(self, request: Request) -> Response:
        started = time.perf_counter()
        response = await self._invoke(request)
        self.metrics.requests.labels("/invocations", str(response.status_code)).inc()
        if response.status_code >= 400:
            self.metrics.errors.labels(str(response.status_code)).inc()
        self.metrics.latency.observe(time.perf_counter() - started)
        return response

    async def _invoke(self, request: Request) -> Response:
        if self.runner is None:
            return _error(503, "the model is not loaded yet", {"Retry-After": str(RETRY_AFTER_S)})
        body = await self._read_body(request)
        if isinstance(body, Response):
            return body
        try:
            payload = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            return _error(400, f"the body is not valid JSON ({exc})")
        try:
            items, single = self.runner.parse(payload)
        except BadRequest as exc:
            return _error(400, str(exc))
        try:
            outputs = await self.batcher.submit(items)
        except QueueFull as exc:
            return _error(503, f"busy: {exc}", {"Retry-After": str(RETRY_AFTER_S)})
        except Exception as exc:
            return _error(500, f"the model call failed: {type(exc).__name__}: {exc}")
        return _json(outputs[0] if single else outputs)

    async def _read_body(self, request: Request) -> bytes | Response:
        limit = self.serving.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            return _error(413, f"the body has {declared} bytes; at most {limit} (serving.max_body_bytes)")
        chunks, size = [], 0
        try:
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    return _error(413, f"the body is over {limit} bytes (serving.max_body_bytes)")
                chunks.append(chunk)
        except ClientDisconnect:
            return _error(400, "the client went away")
        return b"".join(chunks)

    def app(self) -> Starlette:
        @contextlib.asynccontextmanager
        async def lifespan(app):
            await self.start()
            yield
            await self.stop()

        return Starlette(
            routes=[
                Route("/ping", self.ping, methods=["GET"]),
                Route("/invocations", self.invocations, methods=["POST"]),
                Route("/metrics", self.metrics_route, methods=["GET"]),
            ],
            lifespan=lifespan,
        )
