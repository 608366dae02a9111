"""The load generator of bench/serve.py, in its own process and module (no LitServe or torch import: it starts
in a quarter second): closed-loop keep-alive HTTP/1.1 clients on raw asyncio streams, one JSON text per request.
Prints one JSON object: every answered request's latency inside the measured window, errors, and the CPU shares of
itself, of the server's process group and of everything else over that window.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path
from urllib.parse import urlsplit

from texts import TEXTS


def group_pids(pgid: int) -> list[int]:
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


def group_cpu_s(pgid: int) -> float:
    """user + system CPU seconds of every live process in a process group."""
    total = 0
    for pid in group_pids(pgid):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def machine_cpu_s() -> float:
    """Busy CPU seconds of the whole machine since boot, summed over cores."""
    user, nice, system, _idle, _iowait, irq, softirq = (
        int(value) for value in Path("/proc/stat").read_text().split()[1:8]
    )
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def _request_bytes(host: str, port: int, path: str, body: bytes) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nhost: {host}:{port}\r\ncontent-type: application/json\r\n"
        f"accept: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    ).encode() + body


async def _exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> tuple[int, bool]:
    """One request on a keep-alive connection: (status, whether the server keeps the connection open)."""
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length, keep = None, True
    for line in head.lower().split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name == b"content-length":
            length = int(value)
        elif name == b"connection" and b"close" in value:
            keep = False
    if length is None:
        raise ValueError("answer without content-length")
    await reader.readexactly(length)
    return status, keep


async def load(
    url: str, concurrency: int, warmup: float, seconds: float, watch: int | None, payload: str | None = None
) -> dict:
    parts = urlsplit(url)
    bodies = [payload.encode()] if payload else [json.dumps({"inputs": text}).encode() for text in TEXTS]
    requests = [_request_bytes(parts.hostname, parts.port, parts.path, body) for body in bodies]
    start = time.perf_counter()
    measure_from, stop_at = start + warmup, start + warmup + seconds
    latencies: list[float] = []
    errors: dict[str, int] = {}
    marks: dict[str, tuple[float, float]] = {}

    async def mark() -> None:  # CPU of this process and of the server's group over the measured window
        await asyncio.sleep(max(0.0, measure_from - time.perf_counter()))
        marks["from"] = (time.process_time(), group_cpu_s(watch) if watch else 0.0, machine_cpu_s())
        await asyncio.sleep(max(0.0, stop_at - time.perf_counter()))
        marks["to"] = (time.process_time(), group_cpu_s(watch) if watch else 0.0, machine_cpu_s())

    async def client_loop(index: int) -> None:
        sent, connection = index, None
        while time.perf_counter() < stop_at:
            request = requests[sent % len(requests)]
            sent += concurrency
            began = time.perf_counter()
            try:
                if connection is None:
                    connection = await asyncio.open_connection(parts.hostname, parts.port)
                status, keep = await _exchange(*connection, request)
                failure = None if status == 200 else f"HTTP {status}"
                if not keep:
                    connection[1].close()
                    connection = None
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
                failure, connection = type(exc).__name__, None
            ended = time.perf_counter()
            if failure:
                errors[failure] = errors.get(failure, 0) + 1
                await asyncio.sleep(0.01)
            elif measure_from <= ended <= stop_at:
                latencies.append(ended - began)
        if connection is not None:
            connection[1].close()

    await asyncio.gather(mark(), *(client_loop(i) for i in range(concurrency)))
    window = stop_at - measure_from
    loadgen, server, busy = ((to - since) / window for to, since in zip(marks["to"], marks["from"]))
    return {
        "latencies": latencies,
        "window": window,
        "errors": errors,
        "loadgen_cpu": loadgen,
        "server_cpu": server,
        "other_cpu": max(0.0, busy - loadgen - server),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("--concurrency", type=int, required=True)
    parser.add_argument("--warmup", type=float, required=True)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--watch-pgid", type=int)
    parser.add_argument("--payload", help="send this JSON body every time instead of the bench texts")
    args = parser.parse_args()
    try:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass
    print(
        json.dumps(
            asyncio.run(load(args.url, args.concurrency, args.warmup, args.seconds, args.watch_pgid, args.payload))
        )
    )


if __name__ == "__main__":
    main()
