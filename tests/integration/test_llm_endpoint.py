"""The LLM template on this machine: `apply templates/llama3-8b-vllm-local.yaml --local` serves the vLLM Neuron
container's API; the official `openai` client and `invoke --chat` talk to it; 8 streams share a compiled batch of
4 (continuous batching); greedy answers equal transformers' generate; refusals are vLLM's 400s."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.integration
REPO = Path(__file__).parents[2]
TEMPLATE = "templates/llama3-8b-vllm-local.yaml"


@pytest.fixture(scope="module")
def endpoint():
    from integration.test_serving import free_port

    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "neurondeploy.cli", "apply", TEMPLATE, "--local", "--port", str(port)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = process.stdout.readline()  # blocks until ready (or the process dies)
        assert line.strip() == f"ready http://127.0.0.1:{port}", process.stderr.read()
        yield f"http://127.0.0.1:{port}"
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0
        errors = process.stderr.read()
        assert "STAND-IN for meta-llama/Llama-3.1-8B-Instruct" in errors and "at most 4 sequences decode" in errors
        assert (
            f"smoke test passed: http://127.0.0.1:{port} completed" in errors
            and "stopped" in errors
            and "Traceback" not in errors
        )
    finally:
        if process.poll() is None:
            process.kill()


def served_model(url: str) -> str:
    return httpx.get(f"{url}/v1/models").json()["data"][0]["id"]


def metric(url: str, name: str) -> float:
    text = httpx.get(f"{url}/metrics").text
    return float(re.search(rf"^{re.escape(name)} (\S+)$", text, re.M).group(1))


def test_the_openai_client_gets_a_streamed_chat_completion_and_invoke_prints_one(endpoint):
    import openai

    client = openai.OpenAI(base_url=f"{endpoint}/v1", api_key="unused")
    model = client.models.list().data[0].id
    assert "stand-in" in model and "random" in model  # the 8B weights are not here: said in every answer
    stream = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Hello"}], max_tokens=12, stream=True, temperature=0
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant" and all(chunk.model == model for chunk in chunks)
    streamed = "".join(chunk.choices[0].delta.content or "" for chunk in chunks)
    assert chunks[-1].choices[0].finish_reason == "length" and len(chunks) >= 3  # token by token, not one piece
    whole = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Hello"}], max_tokens=12, temperature=0
    )
    assert whole.choices[0].message.content == streamed and whole.usage.completion_tokens == 12
    completion = client.completions.create(model=model, prompt="Once upon", max_tokens=5, temperature=0)
    assert completion.usage.completion_tokens == 5 and completion.model == model

    invoked = subprocess.run(
        [sys.executable, "-m", "neurondeploy.cli", "invoke", endpoint, "--chat", "Hello", "--max-tokens", "12"]
        + ["--temperature", "0"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert invoked.stdout == streamed + "\n"
    assert f"[length; 12 tokens; model {model}]" in invoked.stderr
    # --no-stream sends the chat body to /invocations, as `invoke sagemaker:NAME --chat` does through SageMaker
    whole = subprocess.run(
        [sys.executable, "-m", "neurondeploy.cli", "invoke", endpoint, "--chat", "Hello", "--max-tokens", "12"]
        + ["--temperature", "0", "--no-stream"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert whole.stdout == invoked.stdout


def test_eight_streams_share_a_compiled_batch_of_four_and_all_complete(endpoint):
    running, stop = [], threading.Event()

    def watch() -> None:
        while not stop.is_set():
            running.append(metric(endpoint, "vllm:num_requests_running"))
            time.sleep(0.01)

    def stream(index: int) -> tuple[int, str | None]:
        body = {"prompt": f"stream {index}", "max_tokens": 40, "temperature": 0.8, "seed": index, "stream": True}
        tokens, reason = 0, None
        with httpx.stream("POST", f"{endpoint}/v1/completions", json=body, timeout=120) as response:
            for line in response.iter_lines():
                if line.startswith("data: {"):
                    choice = json.loads(line[6:])["choices"][0]
                    reason = choice["finish_reason"] or reason
                    tokens += 1
        return tokens, reason

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(stream, range(8)))
    finally:
        stop.set()
        watcher.join()
    assert all(reason == "length" for _, reason in results), results
    assert max(running) <= 4 and metric(endpoint, "neurondeploy_llm_peak_running") == 4
    # the other streams queued for a slot, none was refused: counted by the engine, since sampling /metrics every
    # 10 ms on a loaded machine saw only two samples (a clean-clone run) and missed the queue
    assert metric(endpoint, "neurondeploy_llm_peak_queued_behind_full_batch") >= 1


def test_greedy_answers_equal_transformers_generate_token_for_token(endpoint):
    import torch

    from neurondeploy.serving.llm.model import build_stand_in
    from neurondeploy.specs import load_spec

    torch.set_num_threads(1)  # a 64-wide model: threads only slow it down on a shared machine
    spec = load_spec(REPO / TEMPLATE).spec
    lm = build_stand_in(spec.model.hf_model_id, spec.model.architecture, max(spec.compile.sequence_lengths))
    prompts = ["The capital of France is", "a", "1, 2, 3,", "Inferentia2 and Trainium"]

    def served(prompt: str) -> dict:
        body = {"prompt": prompt, "max_tokens": 32, "temperature": 0}
        return httpx.post(f"{endpoint}/v1/completions", json=body, timeout=120).json()

    with ThreadPoolExecutor(4) as pool:  # concurrently: batched, left-padded rows must not change a token
        answers = list(pool.map(served, prompts))
    for prompt, answer in zip(prompts, answers):
        ids = torch.tensor([lm.tokenizer(prompt).input_ids])
        reference = lm.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=32, do_sample=False)
        tokens = reference[0, ids.shape[1] :].tolist()
        # byte-level: the text's bytes are the tokens (text that is not UTF-8 decodes to replacement characters)
        assert answer["choices"][0]["text"] == lm.tokenizer.decode(tokens), prompt
        assert answer["usage"]["completion_tokens"] == 32


def test_bad_requests_get_vllms_400_and_the_server_stays_up(endpoint):
    import openai

    model = served_model(endpoint)
    chat = f"{endpoint}/v1/chat/completions"
    refusals = {
        "over-long prompt": (
            {"messages": [{"role": "user", "content": "x" * 1100}]},
            "This model's maximum context length is 1024 tokens. However, your request has",
        ),
        "max_tokens over the context": (
            {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2000},
            "'max_tokens' or 'max_completion_tokens' is too large: 2000. This model's maximum context length is 1024",
        ),
        "negative temperature": (
            {"messages": [{"role": "user", "content": "hi"}], "temperature": -1},
            "temperature must be non-negative, got -1.0.",
        ),
        "top_p 0": ({"messages": [{"role": "user", "content": "hi"}], "top_p": 0}, "top_p must be in (0, 1], got 0.0."),
        "top_k -3": ({"messages": [{"role": "user", "content": "hi"}], "top_k": -3}, "top_k must be 0 (disable)"),
        "no messages": ({"model": model}, "messages"),
        "a string for a number": (
            {"messages": [{"role": "user", "content": "hi"}], "max_tokens": "many"},
            "max_tokens",
        ),
        # what vLLM 0.16.0 refuses (the vllm-neuron image's): its ModelConfig.max_logprobs is 20
        "top_logprobs over vLLM's limit": (
            {"messages": [{"role": "user", "content": "hi"}], "logprobs": True, "top_logprobs": 21},
            "Requested sample logprobs of 21, which is greater than max allowed: 20",
        ),
        "top_logprobs without logprobs": (
            {"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 3},
            "when using `top_logprobs`, `logprobs` must be set to true.",
        ),
        "a logit_bias key that is no token id": (
            {"messages": [{"role": "user", "content": "hi"}], "logit_bias": {"abc": 1.0}},
            "invalid literal for int() with base 10: 'abc'",
        ),
        "a logit_bias token beyond the vocabulary": (
            {"messages": [{"role": "user", "content": "hi"}], "logit_bias": {"99999999": 1.0}},
            "token_id(s) [99999999] in logit_bias contain out-of-vocab token ids. Vocabulary size:",
        ),
        "an image for a text-only model": (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "what is this?"},
                            {"type": "image_url", "image_url": {"url": "http://127.0.0.1:9/cat.png"}},
                        ],
                    }
                ]
            },
            "is not a multimodal model",
        ),
    }
    for what, (body, message) in refusals.items():
        response = httpx.post(chat, json=body, timeout=30)
        error = response.json()["error"]
        assert response.status_code == 400 and error["code"] == 400 and error["type"] == "BadRequestError", what
        assert message in error["message"], (what, error["message"])
    for raw in (b"{not json", b"[1, 2]", b""):
        response = httpx.post(chat, content=raw, headers={"content-type": "application/json"}, timeout=30)
        assert response.status_code == 400 and response.json()["error"]["type"] == "BadRequestError", raw
    completion = httpx.post(f"{endpoint}/v1/completions", json={"prompt": "hi", "logprobs": 21}, timeout=30)
    assert completion.status_code == 400, completion.text
    assert (
        "Requested sample logprobs of 21, which is greater than max allowed: 20"
        in completion.json()["error"]["message"]
    )
    # vLLM 0.16.0's CompletionRequest has no best_of (an unknown field is logged and ignored): served, as there
    ignored = httpx.post(
        f"{endpoint}/v1/completions", json={"prompt": "hi", "max_tokens": 2, "best_of": 50}, timeout=60
    )
    assert ignored.status_code == 200, ignored.text
    unknown = httpx.post(chat, json={"model": "gpt-4", "messages": [{"role": "user", "content": "hi"}]}, timeout=30)
    assert unknown.status_code == 404 and unknown.json()["error"]["message"] == "The model `gpt-4` does not exist."

    client = openai.OpenAI(base_url=f"{endpoint}/v1", api_key="unused")
    with pytest.raises(openai.BadRequestError, match="top_p must be in"):
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}], top_p=0)
    still = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=3, extra_body={"ignore_eos": True}
    )
    assert still.usage.completion_tokens == 3  # the server stayed up


def test_the_sagemaker_contract_speaks_the_same_api(endpoint):
    assert httpx.get(f"{endpoint}/ping").status_code == 200 and httpx.get(f"{endpoint}/health").status_code == 200
    # ignore_eos on sampled requests whose token counts are asserted: the stand-in's weights are random
    chat_body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "ignore_eos": True}
    chat = httpx.post(f"{endpoint}/invocations", json=chat_body, timeout=30).json()
    assert chat["object"] == "chat.completion" and chat["usage"]["completion_tokens"] == 4
    completion_body = {"prompt": "hi", "max_tokens": 3, "ignore_eos": True}
    completion = httpx.post(f"{endpoint}/invocations", json=completion_body, timeout=30).json()
    assert completion["object"] == "text_completion" and completion["usage"]["completion_tokens"] == 3
    neither = httpx.post(f"{endpoint}/invocations", json={"inputs": "hi"}, timeout=30)
    assert neither.status_code == 400 and "Cannot determine the request type" in neither.json()["error"]["message"]


def test_a_client_that_goes_away_mid_stream_frees_its_slot(endpoint):
    before = metric(endpoint, "vllm:generation_tokens_total")
    body = {"prompt": "go on", "max_tokens": 1000, "temperature": 0, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", f"{endpoint}/v1/completions", json=body, timeout=60) as response:
        events = response.iter_lines()
        for _ in range(3):
            next(events)
    deadline = time.monotonic() + 30
    while metric(endpoint, "vllm:num_requests_running") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert metric(endpoint, "vllm:num_requests_running") == 0
    assert metric(endpoint, "vllm:generation_tokens_total") - before < 900  # it stopped, it did not run to the end


def test_serve_takes_a_model_directory_with_the_containers_settings(tmp_path):
    from integration.test_serving import free_port
    from neurondeploy.serving.llm.model import build_stand_in

    lm = build_stand_in("tiny/llama", None, 256)
    lm.model.save_pretrained(tmp_path / "model")
    lm.tokenizer.save_pretrained(tmp_path / "model")
    port = free_port()
    env = {**os.environ, "SM_ON_BATCH_SIZE": "2", "SM_ON_SEQUENCE_LENGTH": "64"}
    process = subprocess.Popen(
        [sys.executable, "-m", "neurondeploy.cli", "serve", str(tmp_path / "model"), "--port", str(port)],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/health").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        card = httpx.get(f"{url}/v1/models").json()["data"][0]
        assert card["id"] == str(tmp_path / "model") and card["max_model_len"] == 64
        assert metric(url, "neurondeploy_llm_max_batch") == 2
        refused = httpx.post(f"{url}/v1/completions", json={"prompt": "x" * 60, "max_tokens": 10})
        assert refused.status_code == 400 and "(10 > 64 - 60)" in refused.json()["error"]["message"]
        # ignore_eos: the stand-in's weights are random, and a sampled end-of-sequence would end the answer early
        filled = {"prompt": "x" * 50, "max_tokens": 10, "ignore_eos": True}
        answer = httpx.post(f"{url}/v1/completions", json=filled, timeout=30).json()
        assert answer["usage"] == {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60}
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0
        assert f"from {tmp_path / 'model'} on {url}" in process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
