"""Requests the LLM endpoint refuses, in vLLM's words (vllm/sampling_params.py, serving_engine.py)."""

from __future__ import annotations

import pytest

from neurondeploy.serving.llm.errors import InvalidRequest
from neurondeploy.serving.llm.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    check_context,
    check_vllm_limits,
    parse,
    sampling_params,
)


def refusal(body: dict, kind=CompletionRequest) -> str:
    with pytest.raises(InvalidRequest) as caught:
        sampling_params(parse(kind, body))
    return caught.value.message


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("temperature", -0.5, "temperature must be non-negative, got -0.5."),
        ("temperature", 3.0, "temperature must be in [0, 2], got 3.0."),
        ("top_p", 0.0, "top_p must be in (0, 1], got 0.0."),
        ("top_p", 1.5, "top_p must be in (0, 1], got 1.5."),
        ("top_k", -5, "top_k must be 0 (disable), or at least 1, got -5."),
        ("max_tokens", 0, "max_tokens must be at least 1, got 0."),
        ("stop", ["a", ""], "stop cannot contain an empty string."),
    ],
)
def test_out_of_range_sampling_parameters_get_vllms_sentence(field, value, message):
    assert refusal({"prompt": "hi", field: value}) == message


def test_wrong_types_and_shapes_are_refused_naming_the_field():
    assert "temperature" in refusal({"prompt": "hi", "temperature": "hot"})
    assert "max_tokens" in refusal({"prompt": "hi", "max_tokens": 1.5})
    assert "messages" in refusal({"messages": []}, ChatCompletionRequest)
    assert "prompt" in refusal({"max_tokens": 3})
    with pytest.raises(InvalidRequest, match="JSON object"):
        parse(CompletionRequest, ["not", "an", "object"])


def test_defaults_follow_vllm():
    params = sampling_params(parse(CompletionRequest, {"prompt": "hi"}))
    assert (params.max_tokens, params.temperature, params.top_p, params.top_k) == (16, 1.0, 1.0, 0)
    chat = sampling_params(parse(ChatCompletionRequest, {"messages": [{"role": "user", "content": "x"}]}))
    assert chat.max_tokens is None  # a chat completion may use what the context leaves
    greedy = sampling_params(parse(CompletionRequest, {"prompt": "hi", "temperature": 0, "top_k": 5, "top_p": 0.5}))
    assert greedy.greedy and (greedy.top_k, greedy.top_p) == (0, 1.0)


def test_prompt_and_max_tokens_must_fit_the_compiled_sequence_length():
    assert check_context(10, 20, 128) == 20 and check_context(10, None, 128) == 118
    with pytest.raises(InvalidRequest) as long_prompt:
        check_context(130, 5, 128)
    assert long_prompt.value.message == (
        "This model's maximum context length is 128 tokens. However, your request has 130 input tokens. "
        "Please reduce the length of the input messages."
    )
    with pytest.raises(InvalidRequest) as too_many:
        check_context(100, 50, 128)
    assert too_many.value.message == (
        "'max_tokens' or 'max_completion_tokens' is too large: 50. This model's maximum context length is 128 "
        "tokens and your request has 100 input tokens (50 > 128 - 100)."
    )


def _limits(body: dict, kind=ChatCompletionRequest) -> str | None:
    try:
        check_vllm_limits(parse(kind, body), vocab_size=1000, model="/opt/ml/model")
    except InvalidRequest as exc:
        return exc.message
    return None


def test_vllm_0_16_limits_in_its_words():
    hi = [{"role": "user", "content": "hi"}]
    assert _limits({"messages": hi, "logprobs": True, "top_logprobs": 20}) is None  # at the limit
    # -1 asks for the whole vocabulary, over max_logprobs unless the server raised it
    assert _limits({"messages": hi, "logprobs": True, "top_logprobs": -1}) == (
        "Requested sample logprobs of 1000, which is greater than max allowed: 20"
    )
    assert _limits({"messages": hi, "top_logprobs": -2}) == "`top_logprobs` must be a positive value or -1."
    assert _limits({"messages": hi, "top_logprobs": 0}) is None  # 0 needs no logprobs flag, as in vLLM
    assert _limits({"prompt": "hi", "logprobs": -1}, CompletionRequest) == "`logprobs` must be a positive value."
    assert _limits({"messages": hi, "logit_bias": {"999": 5, "12": -5}}) is None
    assert _limits({"messages": hi, "logit_bias": {"1000": 5}}) == (
        "token_id(s) [1000] in logit_bias contain out-of-vocab token ids. Vocabulary size: 1000"
    )
    audio = [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}]}]
    assert _limits({"messages": audio}) == "/opt/ml/model is not a multimodal model"
