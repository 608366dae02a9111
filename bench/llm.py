"""The local LLM endpoint against a plain transformers `generate` loop, side by side in one run on this machine.

The model is what `apply templates/llama3-8b-vllm-local.yaml --local` serves here: the stand-in for
Llama-3.1-8B (LlamaForCausalLM, 2 layers, 64 wide, random weights, byte vocabulary), served by
`neurondeploy serve templates/llama3-8b-vllm-local.yaml` in its own process (compiled batch 4, 1024 tokens), and
built identically (seeded) in this process for the generate loop. This process is theclient (httpx, streamed /v1/completions, greedy, a fixed number of tokens). Printed, never asserted:

- generate: `model.generate(do_sample=False)` in this process, tokens/s of one sequence;
- 1 stream: one streamed request at a time, tokens/s from sending the request to its last token
  (goal: >= 0.9 × generate);
- 8 streams: 8 concurrent streamed requests (4 decode, 4 queue, continuous batching), total tokens/s
  (goal: >= 2.5 × one stream), and the most sequences that ever decoded at once (must be <= 4).
Rounds are interleaved; medians are printed. Torch threads: 1 in both (the server picks 1 for a model this size;
the generate loop is given the same). What this measures on a CPU: a decode step of a model this small is mostly
fixed per-step cost (framework, Python), which a batch shares, as a batch shares the weight reads of a
memory-bound decode on Neuron. A larger model is compute-bound on these cores: one step of a 4-layer, 512-wide
model costs 2.4 times as much at batch 4 as at batch 1 here, which caps what batching can give on this CPU.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import torch

TEMPLATE = Path(__file__).resolve().parents[1] / "templates" / "llama3-8b-vllm-local.yaml"
TOKENS = 256
ROUNDS = 5
STREAMS = 8
BATCH = 4
PROMPT = "Inferentia2 serves large language models with"


def stand_in():
    """The model the template serves here: its id's architecture class, scaled down, random weights."""
    from neurondeploy.serving.llm.model import build_stand_in
    from neurondeploy.specs import load_spec

    spec = load_spec(TEMPLATE).spec
    return build_stand_in(spec.model.hf_model_id, spec.model.architecture, max(spec.compile.sequence_lengths))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def generate_rate(model, ids: torch.Tensor) -> float:
    started = time.perf_counter()
    with torch.inference_mode():
        model.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=TOKENS, min_new_tokens=TOKENS, do_sample=False
        )
    return TOKENS / (time.perf_counter() - started)


def stream(url: str, index: int) -> int:
    body = {"prompt": f"{PROMPT} {index}", "max_tokens": TOKENS, "temperature": 0, "ignore_eos": True, "stream": True}
    tokens = 0
    with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=300) as response:
        for line in response.iter_lines():
            if line.startswith("data: {"):
                tokens += 1
    return tokens


def streams_rate(url: str, count: int) -> float:
    started = time.perf_counter()
    with ThreadPoolExecutor(count) as pool:
        list(pool.map(lambda index: stream(url, index), range(count)))
    # count tokens from the server's own counter: an SSE event may carry more than one token's text
    return count * TOKENS / (time.perf_counter() - started)


def metric(url: str, name: str) -> float:
    return float(re.search(rf"^{re.escape(name)} (\S+)$", httpx.get(f"{url}/metrics").text, re.M).group(1))


def main() -> int:
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        lm = stand_in()
        model = lm.model
        port = free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "neurondeploy.cli", "serve", str(TEMPLATE), "--port", str(port)],
            cwd=tmp,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
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
            ids = torch.tensor([lm.tokenizer(PROMPT).input_ids])
            generate_rate(model, ids), stream(url, 0)  # warm-up
            generated, single, many = [], [], []
            for _ in range(ROUNDS):
                generated.append(generate_rate(model, ids))
                single.append(streams_rate(url, 1))
                many.append(streams_rate(url, STREAMS))
            peak = metric(url, "neurondeploy_llm_peak_running")
            produced = metric(url, "vllm:generation_tokens_total")
        finally:
            os.killpg(server.pid, signal.SIGINT)
            server.wait(timeout=60)
    g, s, m = (statistics.median(values) for values in (generated, single, many))
    print(
        f"model: {lm.served_name}, {sum(p.numel() for p in model.parameters()):,} parameters; "
        f"{TOKENS} tokens per sequence; torch threads 1; medians of {ROUNDS} interleaved rounds"
    )
    print(f"transformers generate (greedy), 1 sequence   {g:8.1f} tokens/s")
    print(f"endpoint, 1 stream                           {s:8.1f} tokens/s   {s / g:.2f} x generate (goal >= 0.9)")
    print(
        f"endpoint, {STREAMS} concurrent streams, batch {BATCH}      {m:8.1f} tokens/s   {m / s:.2f} x 1 stream (goal >= 2.5)"
    )
    print(
        f"most sequences decoding at once: {peak:.0f} (compiled batch {BATCH}); server generated {produced:.0f} tokens"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
