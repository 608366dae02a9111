"""The LLM engine in process, on a tiny stand-in model: continuous batching within the compiled batch, greedy
tokens equal to transformers' generate, sampling parameters honoured, and the byte-level tokenizers round-trip."""

from __future__ import annotations

import importlib.util
import sys
import threading

import pytest
import torch

from neurondeploy.serving.llm.engine import GenerationEngine, Sequence
from neurondeploy.serving.llm.model import build_stand_in, byte_tokenizer
from neurondeploy.serving.llm.protocol import SamplingParams
from neurondeploy.training.entry import REFERENCE_DIR

TRAINING = REFERENCE_DIR
PROMPTS = ["Hello there", "a", "The quick brown fox jumps over", "xyzxyzxyz", "12345", "hi", "Longer prompt here", "q"]


@pytest.fixture(scope="module")
def lm():
    return build_stand_in("meta-llama/Llama-3.1-8B-Instruct", None, 128)


class Recorder:
    """Runs sequences through an engine and keeps what it emitted, in the order sequences finished."""

    def __init__(self, lm, max_batch: int) -> None:
        self.lm = lm
        self.engine = GenerationEngine(
            lm.model, lm.tokenizer, max_batch=max_batch, max_model_len=128, max_queue=64, eos_token_ids=set()
        )
        self.finished: list[int] = []
        self.done = threading.Event()
        self.running_seen: list[int] = []

    def run(self, requests: list[tuple[str, SamplingParams]]) -> list[Sequence]:
        sequences = []
        for index, (prompt, params) in enumerate(requests):

            def emit(text, reason, index=index):
                self.running_seen.append(self.engine.stats.running)
                if reason:
                    self.finished.append(index)
                    if len(self.finished) == len(requests):
                        self.done.set()

            ids = self.lm.tokenizer(prompt).input_ids
            sequences.append(Sequence(ids, params, params.max_tokens, emit))
        self.engine.start()
        try:
            for sequence in sequences:
                self.engine.submit(sequence)
            assert self.done.wait(120)
        finally:
            self.engine.stop()
        return sequences


def generate(lm, prompt: str, tokens: int) -> list[int]:
    ids = torch.tensor([lm.tokenizer(prompt).input_ids])
    out = lm.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=tokens, do_sample=False)
    return out[0, ids.shape[1] :].tolist()


def test_greedy_tokens_equal_generate_while_eight_sequences_share_a_batch_of_four(lm):
    recorder = Recorder(lm, max_batch=4)
    sequences = recorder.run([(prompt, SamplingParams(max_tokens=24, temperature=0)) for prompt in PROMPTS])
    for prompt, sequence in zip(PROMPTS, sequences):
        assert sequence.generated == generate(lm, prompt, 24), prompt
        assert sequence.finish_reason == "length"
    assert recorder.engine.stats.peak_running == 4  # batched, and never above the compiled batch
    assert max(recorder.running_seen) <= 4


def test_queued_sequences_join_when_a_slot_frees_not_when_the_batch_ends(lm):
    long, short = SamplingParams(max_tokens=80, temperature=0), SamplingParams(max_tokens=4, temperature=0)
    # 2 long + 2 short fill the batch; 4 more short ones queue. With continuous batching they run in the slots
    # the first short ones free and finish long before the long ones; a static batch would make them wait.
    recorder = Recorder(lm, max_batch=4)
    recorder.run(
        [("long a", long), ("long b", long), ("s1", short), ("s2", short)] + [(f"q{i}", short) for i in range(4)]
    )
    assert set(recorder.finished[:6]) == {2, 3, 4, 5, 6, 7}, recorder.finished
    assert set(recorder.finished[6:]) == {0, 1}


def test_sampling_parameters_are_honoured(lm):
    greedy = SamplingParams(max_tokens=20, temperature=0)
    top1 = SamplingParams(max_tokens=20, temperature=1.5, top_k=1)  # top_k 1 is greedy whatever the temperature
    seeded = SamplingParams(max_tokens=20, temperature=1.0, seed=7)
    seeded_again = SamplingParams(max_tokens=20, temperature=1.0, seed=7)
    other_seed = SamplingParams(max_tokens=20, temperature=1.0, seed=8)
    nucleus = SamplingParams(max_tokens=20, temperature=1.0, top_p=1e-6, seed=3)  # the smallest nucleus: the top token
    runs = Recorder(lm, max_batch=4).run(
        [("x", greedy), ("x", top1), ("y", seeded), ("y", seeded_again), ("y", other_seed), ("x", nucleus)]
    )
    assert runs[1].generated == runs[0].generated == runs[5].generated
    assert runs[2].generated == runs[3].generated != runs[4].generated

    text = lm.tokenizer.decode(runs[0].generated)
    stop = next(char for char in text[3:] if char.isprintable() and char != "\ufffd")
    stopped = Recorder(lm, max_batch=4).run([("x", SamplingParams(max_tokens=20, temperature=0, stop=[stop]))])[0]
    assert stopped.finish_reason == "stop" and stopped.text == text[: text.index(stop)]


def test_byte_level_tokenizers_round_trip_every_byte():
    text = "Hello wörld ✓ \x00\x01\x7f"
    served = byte_tokenizer()
    assert served(text).input_ids == list(text.encode()) and served.decode(served(text).input_ids) == text
    spec = importlib.util.spec_from_file_location("tiny_lm", TRAINING / "tiny_lm.py")
    tiny_lm = importlib.util.module_from_spec(spec)
    sys.modules["tiny_lm"] = tiny_lm
    spec.loader.exec_module(tiny_lm)
    from tokenizers import Tokenizer

    files = tiny_lm.byte_tokenizer_files(tiny_lm.TinyLMConfig())
    import json

    saved = Tokenizer.from_str(json.dumps(files["tokenizer.json"]))
    assert saved.encode(text).ids == list(text.encode()) and saved.decode(saved.encode(text).ids) == text
    assert tiny_lm.byte_symbols() == [served.convert_ids_to_tokens(i) for i in range(256)]


def test_a_failing_model_call_fails_its_batch_and_the_engine_serves_the_next(lm, monkeypatch):
    import functools

    calls = {"n": 0}
    forward = lm.model.forward

    @functools.wraps(forward)
    def flaky(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:  # the first decode step of the first two sequences
            raise RuntimeError("NRT_RESOURCE")
        return forward(*args, **kwargs)

    monkeypatch.setattr(lm.model, "forward", flaky)
    params = SamplingParams(max_tokens=5, temperature=0)
    a, b, c = Recorder(lm, max_batch=2).run([("a", params), ("b", params), ("c", params)])
    assert (a.finish_reason, b.finish_reason) == ("error", "error")
    assert c.finish_reason == "length" and c.generated == generate(lm, "c", 5)  # queued: served after the failure


def test_the_api_answers_a_failed_model_call_500_and_the_next_request_200(lm, monkeypatch):
    import functools

    from starlette.testclient import TestClient

    from neurondeploy.serving.llm.api import LlmServer

    forward, calls = lm.model.forward, {"n": 0}

    @functools.wraps(forward)
    def fails_once(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("NRT_RESOURCE in nrt_load()")
        return forward(*args, **kwargs)

    monkeypatch.setattr(lm.model, "forward", fails_once)
    server = LlmServer(lm, max_batch=4, max_model_len=128, max_queue=8, max_body_bytes=2**20)
    with TestClient(server.app()) as client:
        failed = client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 3})
        assert failed.status_code == 500
        assert failed.json()["error"]["message"] == "the model call failed: RuntimeError: NRT_RESOURCE in nrt_load()"
        fine = client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 3})
        assert fine.status_code == 200 and fine.json()["usage"]["completion_tokens"] == 3


def test_greedy_batching_equals_generate_for_a_gpt2_with_learned_positions_too():
    from neurondeploy.specs.inference import ModelArchitecture

    architecture = ModelArchitecture(layers=12, hidden_size=768, attention_heads=12, vocab_size=50257)
    gpt2 = build_stand_in("openai-community/gpt2", architecture, 128)
    assert type(gpt2.model).__name__ == "GPT2LMHeadModel"
    prompts = PROMPTS[:6]
    sequences = Recorder(gpt2, max_batch=4).run([(p, SamplingParams(max_tokens=16, temperature=0)) for p in prompts])
    assert [s.generated for s in sequences] == [generate(gpt2, p, 16) for p in prompts]


def test_a_full_queue_refuses_the_next_request(lm):
    from neurondeploy.serving.llm.engine import QueueFull

    engine = GenerationEngine(lm.model, lm.tokenizer, max_batch=1, max_model_len=128, max_queue=2, eos_token_ids=set())
    params = SamplingParams(max_tokens=4, temperature=0)
    for _ in range(2):  # not started: nothing leaves the queue
        engine.submit(Sequence([1, 2], params, 4, lambda text, reason: None))
    with pytest.raises(QueueFull, match=r"2 requests are queued \(serving.max_queue 2\)"):
        engine.submit(Sequence([1, 2], params, 4, lambda text, reason: None))


def test_a_chat_the_template_refuses_or_no_template_at_all_is_a_400(lm, monkeypatch):
    from starlette.testclient import TestClient

    from neurondeploy.serving.llm.api import NO_CHAT_TEMPLATE, LlmServer

    strict = byte_tokenizer()
    strict.chat_template = "{{ raise_exception('Conversation roles must alternate user/assistant') }}"
    monkeypatch.setattr(lm, "tokenizer", strict)
    chat = {"messages": [{"role": "system", "content": "be brief"}], "max_tokens": 2}
    with TestClient(LlmServer(lm, max_batch=1, max_model_len=64, max_queue=4, max_body_bytes=4096).app()) as client:
        refused = client.post("/v1/chat/completions", json=chat)
        assert refused.status_code == 400 and "roles must alternate" in refused.json()["error"]["message"]
        strict.chat_template = None
        untemplated = client.post("/v1/chat/completions", json=chat)
        assert untemplated.status_code == 400 and untemplated.json()["error"]["message"] == NO_CHAT_TEMPLATE
        assert client.post("/v1/completions", json={"prompt": "ok", "max_tokens": 2}).status_code == 200


def test_an_hf_tgi_endpoint_takes_tgis_bodies_and_refuses_in_tgis_words(lm):
    import torch
    from starlette.testclient import TestClient

    from neurondeploy.serving.llm.api import LlmServer

    torch.manual_seed(0)
    server = LlmServer(lm, max_batch=2, max_model_len=64, max_queue=4, max_body_bytes=4096, tgi=True)
    with TestClient(server.app()) as client:
        greedy = client.post("/generate", json={"inputs": "Hello", "parameters": {"max_new_tokens": 8}})
        assert greedy.json() == {"generated_text": lm.tokenizer.decode(generate(lm, "Hello", 8))}  # greedy by default
        listed = client.post("/invocations", json={"inputs": "Hello", "parameters": {"max_new_tokens": 8}}).json()
        assert listed == [greedy.json()]  # SageMaker's TGI answers a list
        full = client.post(
            "/generate", json={"inputs": "Hi", "parameters": {"max_new_tokens": 2, "return_full_text": True}}
        )
        assert full.json()["generated_text"].startswith("Hi")
        for parameters, message in [
            ({"temperature": 0}, "`temperature` must be strictly positive"),
            ({"top_p": 1.0}, "`top_p` must be > 0.0 and < 1.0"),
            ({"top_k": 0}, "`top_k` must be strictly positive"),
            (
                {"max_new_tokens": 60},
                "`inputs` tokens + `max_new_tokens` must be <= 64. Given: 5 `inputs` tokens and 60",
            ),
        ]:
            refused = client.post("/generate", json={"inputs": "Hello", "parameters": parameters})
            assert refused.status_code == 422 and refused.json() == {
                "error": "Input validation error: " + message + refused.json()["error"].split(message, 1)[1],
                "error_type": "validation",
            }, (parameters, refused.json())
        too_long = client.post("/generate", json={"inputs": "x" * 40, "parameters": {"max_new_tokens": 4}})
        assert too_long.json()["error"] == "Input validation error: `inputs` must have less than 32 tokens. Given: 40"
        assert client.post("/generate", json={"parameters": {}}).status_code == 422
        chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        assert client.post("/invocations", json=chat).json()["object"] == "chat.completion"  # Messages API too


def test_the_stand_in_writes_printable_text_only(lm):
    """Random weights over a byte vocabulary wrote control characters and broken UTF-8 to the user's terminal: the
    stand-in's text, sampled hot or greedy, is printable ASCII (and newlines)."""
    torch.manual_seed(0)
    ids = torch.tensor([lm.tokenizer("Hello, stand-in").input_ids])
    for sample in (True, False):
        out = lm.model.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=200, do_sample=sample, temperature=2.0, top_k=0
        )
        text = lm.tokenizer.decode(out[0, ids.shape[1] :].tolist())
        assert len(text) == 200 and all(ch == "\n" or " " <= ch <= "~" for ch in text), repr(text)
