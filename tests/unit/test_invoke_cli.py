"""`neurondeploy invoke` as a user runs it: a broken JSON body is refused before anything is sent, and answers
are printed compactly (one line per vector) or written whole to --out. The endpoint is a stdlib HTTP server on
loopback that records what reaches it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

EMBEDDINGS = [[round(0.001 * i, 3) for i in range(384)], [-0.5] * 384]


@pytest.fixture
def endpoint():
    received: list[bytes] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (the stdlib's name)
            received.append(self.rfile.read(int(self.headers["content-length"])))
            body = json.dumps(EMBEDDINGS).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", received
    server.shutdown()
    server.server_close()


def invoke(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "neurondeploy.cli", "invoke", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def test_malformed_json_is_refused_with_the_parse_error_and_nothing_is_sent(endpoint, tmp_path):
    url, received = endpoint
    result = invoke(url, "--data", '{"inputs": ["hello"')
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "--data is not valid JSON" in result.stderr and "line 1" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    broken = tmp_path / "body.json"
    broken.write_text('[{"inputs": 1},')
    from_file = invoke(url, "--data", f"@{broken}")
    assert from_file.returncode != 0 and "the file is not valid JSON" in from_file.stderr
    assert received == []  # refused before any request


def test_plain_text_is_sent_as_inputs_and_embeddings_print_one_line_each(endpoint):
    url, received = endpoint
    result = invoke(url, "--data", "hello there")
    assert result.returncode == 0, result.stderr
    assert json.loads(received[0]) == {"inputs": "hello there"}
    assert json.loads(result.stdout) == EMBEDDINGS
    assert len(result.stdout.splitlines()) == 4  # "[", one line per embedding, "]"


def test_out_writes_the_whole_answer_to_a_file(endpoint, tmp_path):
    url, received = endpoint
    out = tmp_path / "answer.json"
    result = invoke(url, "--data", '{"inputs": ["a", "b"]}', "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert json.loads(out.read_text()) == EMBEDDINGS and result.stdout == ""
    assert f"to {out}" in result.stderr and "384 values" in result.stderr
    assert json.loads(received[0]) == {"inputs": ["a", "b"]}


def test_a_spec_whose_local_endpoint_runs_is_invoked_there(tmp_path, monkeypatch):
    from neurondeploy.serving.client import InvokeError, resolve_target
    from neurondeploy.serving.running import announced, record_path

    monkeypatch.setenv("NEURONDEPLOY_CACHE_DIR", str(tmp_path))
    spec = str(Path(__file__).parents[2] / "templates" / "minilm-sagemaker.yaml")
    with announced("minilm-embed", "http://127.0.0.1:8123"):
        local = resolve_target(spec)
        assert (local.kind, local.address) == ("http", "http://127.0.0.1:8123") and "apply --local" in local.describe()
        assert resolve_target("minilm-embed").address == "http://127.0.0.1:8123"  # the name, too
        cloud = resolve_target(spec, where="cloud")  # asked for: the endpoint in AWS, even while the local one runs
        assert (
            cloud.describe() == f"SageMaker endpoint minilm-embed in us-east-1 (deployment minilm-embed, from {spec})"
        )
    assert not record_path("minilm-embed").exists()
    with pytest.raises(InvokeError, match="no local endpoint of minilm-embed runs on this machine"):
        resolve_target(spec)
    # a record a killed run left behind (its process is gone) is not an endpoint, and not a reason to go to AWS
    record_path("minilm-embed").write_text('{"url": "http://127.0.0.1:8123", "pid": 999999999}')
    for target in (spec, "minilm-embed"):
        with pytest.raises(InvokeError) as refused:
            resolve_target(target)
        assert "add --target cloud" in refused.value.one_line()


def test_invoke_spec_without_a_local_endpoint_sends_nothing_and_names_both_ways(endpoint, tmp_path):
    """Through the CLI, AWS pointed at a recording server: one line with the fix, no request to AWS; with
    --target cloud, the request goes to the SageMaker endpoint, and invoke says so first."""
    url, received = endpoint
    spec = str(Path(__file__).parents[2] / "templates" / "minilm-sagemaker.yaml")
    env = {
        **os.environ,
        "NEURONDEPLOY_CACHE_DIR": str(tmp_path),
        "AWS_ENDPOINT_URL": url,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    }
    command = [sys.executable, "-m", "neurondeploy.cli", "invoke", spec, "--data", "hello"]
    refused = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    assert refused.returncode == 4 and refused.stderr.count("\n") == 1, refused.stderr
    assert "no local endpoint of minilm-embed" in refused.stderr and "--target cloud" in refused.stderr
    assert f"neurondeploy apply {spec} --local" in refused.stderr
    assert received == []  # nothing reached AWS
    cloud = subprocess.run([*command, "--target", "cloud"], capture_output=True, text=True, timeout=120, env=env)
    assert "invoke: SageMaker endpoint minilm-embed in us-east-1" in cloud.stderr.splitlines()[0], cloud.stderr
    assert len(received) == 1 and json.loads(received[0]) == {"inputs": "hello"}  # InvokeEndpoint's body
