"""The SageMaker inference container contract over HTTP: GET /ping, POST /invocations, plus GET /metrics.

/ping answers 200 only once the artifact is loaded and a warm-up inference ran on every bucket; until then
(SageMaker pings while the container loads) it answers 503. The event loop does HTTP only: it checks the headers
(415, 406, a declared body over the limit 413), admits the request or answers 503 with Retry-After when
``serving.max_queue`` requests are already in the server (before reading the body or doing any work), reads the
body, and hands it to a fixed pool of worker threads. A worker parses and tokenises it (400 with a message for a
bad one, never reaching the model), queues its items for the batcher, runs the model itself when a replica is
idle, and writes the answer bytes; the loop only sends them. A failing model call answers 500 to its own group's
requests only. The app is plain ASGI: a framework's routing and request objects would cost more than this work.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from neurondeploy.serving.batcher import DynamicBatcher
from neurondeploy.serving.cpu import CpuAccount
from neurondeploy.serving.media import Unsupported, read_payloads, request_type, response_type, write_answers
from neurondeploy.serving.runtime import BadRequest, ModelRunner, without_autograd
from neurondeploy.serving.workers import WorkerPool
from neurondeploy.specs.inference import ServingSpec

RETRY_AFTER_S = 1
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
JSON = b"application/json"
RETRY = ((b"retry-after", str(RETRY_AFTER_S).encode()),)

# status, body, content type, extra headers
Reply = tuple[int, bytes, bytes, tuple[tuple[bytes, bytes], ...]]


class Metrics:
    def __init__(self, cpu: CpuAccount) -> None:
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
        self.by_status: dict[int, list[Counter]] = {}
        self.ready = Gauge("neurondeploy_ready", "1 once the model is loaded and warmed up", registry=self.registry)
        Gauge(
            "neurondeploy_process_cpu_seconds", "CPU seconds of the whole server process", registry=self.registry
        ).set_function(cpu.process_seconds)
        Gauge(
            "neurondeploy_model_cpu_seconds",
            "CPU seconds inside the model: the calling thread during each forward, plus torch's own threads",
            registry=self.registry,
        ).set_function(cpu.model_seconds)

    def observe_invocation(self, status: int, seconds: float) -> None:
        counters = self.by_status.get(status)
        if counters is None:  # labels() builds and looks up a key each time: once per status code is enough
            counters = [self.requests.labels("/invocations", str(status))]
            if status >= 400:
                counters.append(self.errors.labels(str(status)))
            self.by_status[status] = counters
        for counter in counters:
            counter.inc()
        self.latency.observe(seconds)

    def observe_batch(self, size: int, waits: list[float]) -> None:
        self.batch_size.observe(size)
        for wait in waits:
            self.queue_seconds.observe(wait)


def _error(status: int, message: str, headers: tuple = ()) -> Reply:
    return status, orjson.dumps({"error": message}), JSON, headers


def _header(scope: dict, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return None


class InferenceServer:
    """State of one server: the runner (once loaded), the worker pool, the batcher, and the metrics. An ASGI app."""

    def __init__(self, artifact_dir: Path, serving: ServingSpec, replicas: int = 1, runtime: str | None = None) -> None:
        self.artifact_dir = artifact_dir
        self.serving = serving
        self.replica_count = replicas
        self.runtime = runtime
        self.runner: ModelRunner | None = None
        self.batcher: DynamicBatcher | None = None
        self.pool: WorkerPool | None = None
        self.cpu = CpuAccount()
        self.metrics = Metrics(self.cpu)
        self.load_error: str | None = None
        self.loading: asyncio.Task | None = None
        self.admitted = 0  # requests in the server: being read, parsed, queued or run
        self.pong = b""

    def app(self) -> InferenceServer:
        return self

    # --- lifecycle ------------------------------------------------------------------------------------------------

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
        runner.forward_context = self.cpu.forward
        replicas = len(runner.replicas)
        # Each replica's model runs in the worker thread that found it idle; the others parse and tokenise.
        self.pool = WorkerPool(replicas + max(2, os.cpu_count() or 2), "neurondeploy", initializer=without_autograd)
        self.batcher = DynamicBatcher(
            runner.run,
            replicas,
            runner.max_batch,
            self.serving.max_batch_delay_ms / 1000,
            self.metrics.observe_batch,
            group_size=runner.group_size,
        )
        self.pong = orjson.dumps({"status": "ok", "model": runner.manifest.name})
        self.runner = runner
        self.metrics.ready.set(1)

    async def stop(self) -> None:
        """uvicorn has drained the requests by now (graceful shutdown); let the workers finish what they hold."""
        if self.loading:
            self.loading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.loading
        if self.pool:
            await asyncio.to_thread(self.pool.shutdown)

    # --- ASGI -----------------------------------------------------------------------------------------------------

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        if path == "/invocations" and method == "POST":
            started = time.perf_counter()
            reply = await self._invoke(scope, receive)
            self.metrics.observe_invocation(reply[0], time.perf_counter() - started)
        elif path == "/ping" and method in ("GET", "HEAD"):
            reply = self._ping()
        elif path == "/metrics" and method == "GET":
            reply = 200, generate_latest(self.metrics.registry), CONTENT_TYPE_LATEST.encode(), ()
        elif path in ("/invocations", "/ping", "/metrics"):
            reply = _error(405, f"{method} is not allowed on {path}")
        else:
            reply = _error(404, f"no route {path}: the server answers GET /ping, POST /invocations, GET /metrics")
        status, body, content_type, headers = reply
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", content_type), (b"content-length", b"%d" % len(body)), *headers],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def _lifespan(self, receive: Callable, send: Callable) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await self.start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    # --- routes ---------------------------------------------------------------------------------------------------

    def _ping(self) -> Reply:
        if self.runner is None:
            return _error(503, self.load_error or "loading the model")
        return 200, self.pong, JSON, ()

    async def _invoke(self, scope: dict, receive: Callable) -> Reply:
        if self.batcher is None:
            return _error(503, "the model is not loaded yet", RETRY)
        try:
            request_media = request_type(_header(scope, b"content-type"))
            response_media = response_type(_header(scope, b"accept"), request_media)
        except Unsupported as exc:
            return _error(exc.status, str(exc))
        limit = self.serving.max_body_bytes
        declared = _header(scope, b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            return _error(413, f"the body has {declared} bytes; at most {limit} (serving.max_body_bytes)")
        if self.admitted >= self.serving.max_queue:
            return _error(
                503, f"busy: {self.admitted} requests in the server (serving.max_queue {self.serving.max_queue})", RETRY
            )
        self.admitted += 1
        try:
            body = await self._read_body(receive, limit)
            if not isinstance(body, bytes):
                return body
            loop = asyncio.get_running_loop()
            answered = loop.create_future()

            def reply(result: Reply) -> None:  # from a worker thread
                loop.call_soon_threadsafe(_resolve, answered, result)

            self.pool.submit(self._process, body, request_media, response_media, reply)
            return await answered
        finally:
            self.admitted -= 1

    async def _read_body(self, receive: Callable, limit: int) -> bytes | Reply:
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return _error(400, "the client went away")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return _error(413, f"the body is over {limit} bytes (serving.max_body_bytes)")
            chunks.append(chunk)
            if not message.get("more_body", False):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    # --- in a worker thread ---------------------------------------------------------------------------------------

    def _process(self, body: bytes, request_media: str, response_media: str, reply: Callable[[Reply], None]) -> None:
        try:
            parsed = [self.runner.parse(payload) for payload in read_payloads(body, request_media)]
            total = sum(len(items) for items, _ in parsed)
            if total > self.serving.max_items_per_request:
                raise BadRequest(f"{total} inputs in one request; at most {self.serving.max_items_per_request}")
        except BadRequest as exc:
            reply(_error(400, str(exc)))
            return
        except Exception as exc:  # a bug, not the client's fault: answer rather than leave the request hanging
            reply(_error(500, f"reading the request failed: {type(exc).__name__}: {exc}"))
            return

        def done(outputs: list[Any] | None, error: BaseException | None) -> None:
            if error is not None:
                reply(_error(500, f"the model call failed: {type(error).__name__}: {error}"))
                return
            try:
                answers, offset = [], 0
                for items, single in parsed:
                    answer = outputs[offset : offset + len(items)]
                    answers.append(answer[0] if single else answer)
                    offset += len(items)
                reply((200, write_answers(answers, request_media, response_media), response_media.encode(), ()))
            except Exception as exc:
                reply(_error(500, f"writing the answer failed: {type(exc).__name__}: {exc}"))

        try:
            self.batcher.submit([item for items, _ in parsed for item in items], done)
        except Exception as exc:
            reply(_error(500, f"the model call failed: {type(exc).__name__}: {exc}"))


def _resolve(future: asyncio.Future, result: Reply) -> None:
    if not future.done():
        future.set_result(result)
