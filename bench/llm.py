"""The local LLM endpoint against a plain transformers `generate` loop, side by side in one run on this machine.

The model is what `apply templates/llama3-8b-vllm-local.yaml --local` serves here: the stand-in for
Llama-3.1-8B (LlamaForCausalLM, 2 layers, 64 wide, random weights, byte vocabulary), served by
`neurondeploy serve templates/llama3-8b-vllm-local.yaml` in its own process (compiled batch 4, 1024 tokens), and
built identically (seeded) in this process for the generate loop. This process is theclient (one asyncio httpx load generator, streamed /v1/completions, greedy, a fixed number of tokens). Printed, never asserted:

- generate: `model.generate(do_sample=False)` in this process, tokens/s of one sequence;
- 1 stream: one streamed request at a time, tokens/s from sending the request to its last token
  (goal: >= 0.9 × generate);
- 8 streams: 8 concurrent streamed requests (4 decode, 4 queue, continuous batching), total tokens/s
  (goal: >= 2.5 × one stream), and the most sequences that ever decoded at once (must be <= 4);
- the engine in this process (no HTTP), 8 sequences: each with its own KV cache decoded one at a time (what a cache
  per sequence without batching gives) against the left-padded batched cache at batch 4 and 8.
Rounds are interleaved; medians are printed. Torch threads: 1 in both (the server picks 1 for a model this size;
the generate loop is given the same). What this measures on a CPU: a decode step of a model this small is mostly
fixed per-step cost (framework, Python), which a batch shares, as a batch shares the weight reads of a
memory-bound decode on Neuron. A larger model is compute-bound on these cores: one step of a 4-layer, 512-wide
model costs 2.4 times as much at batch 4 as at batch 1 here, which caps what batching can give on this CPU.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
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


async def _stream(client: httpx.AsyncClient, url: str, index: int) -> int:
    body = {"prompt": f"{PROMPT} {index}", "max_tokens": TOKENS, "temperature": 0, "ignore_eos": True, "stream": True}
    events = 0
    async with client.stream("POST", f"{url}/v1/completions", json=body, timeout=300) as response:
        async for line in response.aiter_lines():
            if line.startswith("data: {"):
                events += 1
    return events


def stream(url: str, index: int) -> int:
    async def one() -> int:
        async with httpx.AsyncClient() as client:
            return await _stream(client, url, index)

    return asyncio.run(one())


def streams_rate(url: str, count: int) -> float:
    """One asyncio load generator (lighter on the shared cores than a thread per stream)."""

    async def run() -> float:
        async with httpx.AsyncClient(limits=httpx.Limits(max_connections=count)) as client:
            started = time.perf_counter()
            await asyncio.gather(*(_stream(client, url, index) for index in range(count)))
            # an SSE event may carry several tokens (the server coalesces what arrived meanwhile): count TOKENS each
            return count * TOKENS / (time.perf_counter() - started)

    return asyncio.run(run())


def metric(url: str, name: str) -> float:
    return float(re.search(rf"^{re.escape(name)} (\S+)$", httpx.get(f"{url}/metrics").text, re.M).group(1))


def engine_rate(lm, sequences: int, max_batch: int) -> float:
    """Tokens/s of the engine in this process, no HTTP: how the KV caches are decoded, isolated."""
    import threading

    from neurondeploy.serving.llm.engine import GenerationEngine, Sequence
    from neurondeploy.serving.llm.protocol import SamplingParams

    engine = GenerationEngine(
        lm.model, lm.tokenizer, max_batch=max_batch, max_model_len=1024, max_queue=64, eos_token_ids=set()
    )
    left, done = [sequences], threading.Event()

    def emit(text: str, reason: str | None) -> None:
        if reason:
            left[0] -= 1
            if not left[0]:
                done.set()

    engine.start()
    started = time.perf_counter()
    for index in range(sequences):
        ids = lm.tokenizer(f"{PROMPT} {index}").input_ids
        engine.submit(Sequence(ids, SamplingParams(max_tokens=TOKENS, temperature=0), TOKENS, emit))
    done.wait()
    seconds = time.perf_counter() - started
    engine.stop()
    return sequences * TOKENS / seconds


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
            strategies = {batch: [] for batch in (1, BATCH, STREAMS)}
            for _ in range(ROUNDS):
                for batch, rates in strategies.items():
                    rates.append(engine_rate(lm, STREAMS, batch))
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
    one, *batched = (statistics.median(rates) for rates in strategies.values())
    print(
        f"engine in process, {STREAMS} sequences: a KV cache each decoded one at a time {one:.0f} tokens/s; "
        + "; ".join(
            f"left-padded batch of {b} {rate:.0f} ({rate / one:.2f} x)"
            for b, rate in zip(list(strategies)[1:], batched)
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
