"""Shared by the serving tests: a `neurondeploy serve` process on loopback, and the artifacts they serve."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx

REPO = Path(__file__).parents[2]
FIXTURES = REPO / "tests" / "fixtures"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    def __init__(self, artifact: Path, serving: dict | None = None, args: tuple[str, ...] = ()) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = os.environ | {"PYTHONPATH": str(FIXTURES)}
        if serving:
            env["NEURONDEPLOY_SERVING"] = json.dumps(serving)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "neurondeploy.cli", "serve", str(artifact), "--port", str(self.port), *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def wait_ready(self, timeout: float = 120) -> httpx.Response:
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.process.stderr.read()
            try:
                last = httpx.get(f"{self.url}/ping", timeout=2)
                if last.status_code == 200:
                    return last
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"server not ready: {last and last.text}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()


def burst(url: str, path: str, bodies: list[bytes]) -> list[tuple[int, bytes]]:
    """POST each body on its own connection, all connections opened first and every request written in one tight
    loop, so they reach the server within a millisecond or two, whatever the load on the test's cores (an asyncio
    client sends one request per turn of its loop, slower than the model answers on a busy machine). Returns
    (status, body) per request, in order."""
    address = urlsplit(url)
    sockets = [socket.create_connection((address.hostname, address.port), timeout=60) for _ in bodies]
    try:
        for sock, body in zip(sockets, bodies):
            head = f"POST {path} HTTP/1.1\r\nHost: {address.netloc}\r\nContent-Type: application/json\r\n"
            sock.sendall(f"{head}Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
        answers = []
        for sock in sockets:
            response = http.client.HTTPResponse(sock)
            response.begin()
            answers.append((response.status, response.read()))
        return answers
    finally:
        for sock in sockets:
            sock.close()
