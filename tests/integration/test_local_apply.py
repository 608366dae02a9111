"""The main job on this machine: `apply SPEC --local`, then `invoke`, then Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from support.sagemaker import queue_invocation_answer

from neurondeploy.serving.client import InvokeError, invoke, resolve_target

pytestmark = pytest.mark.integration
REPO = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")  # shared: the second run's compile is all cache hits


@pytest.mark.slow
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_apply_local_serves_the_template_until_ctrl_c_or_sigterm(tmp_path, cache, stop):
    """SIGTERM (timeout, CI, a process manager) stops it as Ctrl-C does: `stopped`, exit 0, no sandbox left.
    Meanwhile `invoke SPEC` reaches it (not the spec's SageMaker endpoint)."""
    from integration.test_serving import free_port

    port = free_port()
    (tmp_path / "tmp").mkdir()
    # TMPDIR: where the replay's sandbox goes; the cache dir: where it says it runs (this test's own)
    environment = os.environ | {"TMPDIR": str(tmp_path / "tmp"), "NEURONDEPLOY_CACHE_DIR": str(tmp_path / "records")}
    record = tmp_path / "records" / "local-endpoints" / "minilm-local.json"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "neurondeploy.cli",
            "apply",
            "templates/minilm-local.yaml",
            "--local",
            "--port",
            str(port),
            "--cache-dir",
            str(cache),
            "--out",
            str(tmp_path / "artifact"),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment,
    )
    try:
        line = process.stdout.readline()  # blocks until ready (or the process dies)
        assert line.strip() == f"ready http://127.0.0.1:{port}", process.stderr.read()
        said_ready = time.monotonic()
        # ready means an /invocations answered: the next one is quick, not a wait for workers to load
        first = httpx.post(f"http://127.0.0.1:{port}/invocations", json={"inputs": ["warm?"]}, timeout=60)
        ready_to_answer_s = time.monotonic() - said_ready
        assert first.status_code == 200 and ready_to_answer_s < 2.0, (first.status_code, ready_to_answer_s)
        assert [p.name for p in (tmp_path / "tmp").iterdir() if p.name.startswith("neurondeploy-minilm-local-")]
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "neurondeploy.cli",
                "invoke",
                "templates/minilm-local.yaml",  # the spec: its local endpoint runs, so that is the one invoked
                "--data",
                '{"inputs": ["hello", "world"]}',
            ],
            capture_output=True,
            text=True,
            check=True,
            cwd=REPO,
            env=environment,
        )
        answer = json.loads(result.stdout)
        assert len(answer) == 2 and len(answer[0]) == 384
        assert json.loads(record.read_text())["url"] == f"http://127.0.0.1:{port}"
        process.send_signal(stop)
        assert process.wait(timeout=60) == 0
        errors = process.stderr.read()
        assert f"smoke test passed: http://127.0.0.1:{port} answered embedding of 384 values" in errors
        # one "ready", and it comes after the smoke test's answer: nothing said it was ready before
        assert "ready" not in errors.split("smoke test passed")[0].replace("already", ""), errors
        assert "+  endpoint (sagemaker:endpoint)" in errors and "stopped" in errors and "Traceback" not in errors
        assert not [p.name for p in (tmp_path / "tmp").iterdir() if p.name.startswith("neurondeploy-minilm-local-")]
        assert not record.exists()
    finally:
        if process.poll() is None:
            process.kill()


def test_apply_local_refuses_a_busy_port_in_one_line(tmp_path):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "neurondeploy.cli",
                "apply",
                "templates/minilm-local.yaml",
                "--local",
                "--port",
                str(port),
                "--cache-dir",
                str(tmp_path / "cache"),
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert result.returncode == 2
    assert f"port {port} on 127.0.0.1 is in use" in result.stderr and "Traceback" not in result.stderr


def test_invoke_targets_resolve_from_urls_endpoints_and_specs(tmp_path):
    assert resolve_target("http://127.0.0.1:9/").address == "http://127.0.0.1:9"
    assert (resolve_target("sagemaker:my-endpoint").kind, resolve_target("sagemaker:my-endpoint").address) == (
        "sagemaker",
        "my-endpoint",
    )
    spec = resolve_target(str(REPO / "templates" / "minilm-sagemaker.yaml"), where="cloud")
    assert (spec.kind, spec.address, spec.region) == ("sagemaker", "minilm-embed", "us-east-1")
    ec2 = str(REPO / "templates" / "minilm-ec2-alb.yaml")
    assert resolve_target(ec2, where="cloud").address == "https://embed.example.com"
    with pytest.raises(InvokeError, match="not a URL, sagemaker:<endpoint>, a spec file or a deployment in state"):
        resolve_target("nowhere", str(tmp_path / "state.db"))


def test_invoke_a_dead_url_is_one_clear_error():
    with pytest.raises(InvokeError, match="Connection refused") as refused:
        invoke("http://127.0.0.1:9", b'{"inputs": "x"}')
    assert "is the endpoint running" in refused.value.one_line()


def test_invoke_a_sagemaker_endpoint_through_sagemaker_runtime(aws):
    # moto answers InvokeEndpoint with results queued through its API; ours must send and parse them.
    queue_invocation_answer(aws, [[0.1, 0.2]])
    assert invoke("sagemaker:minilm-embed", b'{"inputs": ["x"]}', region="us-east-1") == [[0.1, 0.2]]
