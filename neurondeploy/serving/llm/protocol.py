"""Request bodies of the OpenAI-compatible API as vLLM validates them, and their sampling parameters.

Type errors come from pydantic (vLLM's request models are pydantic too, and it answers their errors 400);
range errors use the sentences of vLLM's ``SamplingParams._verify_args`` (vllm-project/vllm,
``vllm/sampling_params.py`` @ 00388f6, read with the search tool), so clients that match on them keep working.
Unknown fields are accepted and ignored, as vLLM does (``best_of`` among them: vLLM 0.16.0's CompletionRequest has
no such field).

:func:`check_vllm_limits` refuses what vLLM 0.16.0, the vllm-neuron image's for Inf2 and Trn1, refuses beyond the
sampling ranges, in its words (read from its wheel): ``top_logprobs`` checks of
``entrypoints/openai/chat_completion/protocol.py`` (``check_logprobs``), logprobs over ``ModelConfig.max_logprobs``
and logit_bias ids outside the vocabulary (``v1/engine/input_processor.py``), a logit_bias key that is no integer
(``SamplingParams.from_optional``'s ``int(token)``), and media for a text-only model
(``multimodal/registry.py``, ``create_processor``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from neurondeploy.serving.llm.errors import InvalidRequest

GREEDY_BELOW = 1e-5  # vLLM's _SAMPLING_EPS: a temperature under it means greedy
MAX_LOGPROBS = 20  # vLLM's ModelConfig.max_logprobs default (vllm/config/model.py), the server's --max-logprobs
# OpenAI content parts that carry media (vllm/entrypoints/chat_utils.py parses each through the model's
# multimodal processor, which a text-only model has not)
MEDIA_PARTS = ("image_url", "image_embeds", "input_audio", "audio_url", "video_url")
COMPLETION_DEFAULT_MAX_TOKENS = 16  # OpenAI's and vLLM's default for /v1/completions


class _Request(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    max_tokens: Annotated[int | None, Field(strict=True)] = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    n: int = 1
    ignore_eos: bool = False
    stream_options: dict | None = None
    logit_bias: dict[str, float] | None = None


class CompletionRequest(_Request):
    prompt: str | list[str] | list[int]
    logprobs: int | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "user", "assistant", "developer", "tool"]
    content: str | list[dict] | None = None

    def text(self) -> str:
        if isinstance(self.content, list):  # OpenAI content parts: this endpoint reads the text ones
            return "".join(part.get("text", "") for part in self.content if part.get("type") == "text")
        return self.content or ""


class ChatCompletionRequest(_Request):
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    max_completion_tokens: Annotated[int | None, Field(strict=True)] = None
    logprobs: bool | None = False
    top_logprobs: int | None = 0


@dataclass
class SamplingParams:
    max_tokens: int | None
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    ignore_eos: bool = False

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW


def parse(kind: type[_Request], body: object) -> _Request:
    if not isinstance(body, dict):
        raise InvalidRequest(f"the request body must be a JSON object, not {type(body).__name__}")
    try:
        return kind.model_validate(body)
    except ValidationError as exc:
        raise InvalidRequest(str(exc)) from None


def sampling_params(request: _Request) -> SamplingParams:
    """The request's sampling parameters, refused with vLLM's sentences when out of range."""
    max_tokens = getattr(request, "max_completion_tokens", None) or request.max_tokens
    if max_tokens is None and isinstance(request, CompletionRequest):
        max_tokens = COMPLETION_DEFAULT_MAX_TOKENS
    params = SamplingParams(
        max_tokens=max_tokens,
        temperature=1.0 if request.temperature is None else request.temperature,
        top_p=1.0 if request.top_p is None else request.top_p,
        top_k=0 if request.top_k is None else request.top_k,
        seed=None if request.seed == -1 else request.seed,
        stop=[request.stop] if isinstance(request.stop, str) else list(request.stop or []),
        ignore_eos=request.ignore_eos,
    )
    if request.n != 1:
        raise InvalidRequest(f"n must be 1 on this endpoint, got {request.n}.", "n")
    if not math.isfinite(params.temperature):
        raise InvalidRequest(f"temperature must be a finite number, got {params.temperature}.", "temperature")
    if params.temperature < 0.0:
        raise InvalidRequest(f"temperature must be non-negative, got {params.temperature}.", "temperature")
    if params.temperature > 2.0:
        raise InvalidRequest(f"temperature must be in [0, 2], got {params.temperature}.", "temperature")
    if not 0.0 < params.top_p <= 1.0:
        raise InvalidRequest(f"top_p must be in (0, 1], got {params.top_p}.", "top_p")
    if params.top_k < -1:
        raise InvalidRequest(f"top_k must be 0 (disable), or at least 1, got {params.top_k}.")
    if params.max_tokens is not None and params.max_tokens < 1:
        raise InvalidRequest(f"max_tokens must be at least 1, got {params.max_tokens}.", "max_tokens")
    if any(not stop for stop in params.stop):
        raise InvalidRequest("stop cannot contain an empty string.")
    if params.top_k == -1:
        params.top_k = 0  # vLLM quietly accepts -1 as disabled
    if params.greedy:
        params.top_p, params.top_k = 1.0, 0
    return params


def check_vllm_limits(request: _Request, vocab_size: int, model: str) -> None:
    """What vLLM 0.16.0 refuses of a parsed request beyond the sampling ranges, in its words (module doc), in the
    order it checks: the request model's validators, the chat's content parts, the sampling parameters, the
    engine's input checks."""
    logprobs: int | None = None
    if isinstance(request, ChatCompletionRequest):
        top = request.top_logprobs
        if top is not None:
            if top < 0 and top != -1:
                raise InvalidRequest("`top_logprobs` must be a positive value or -1.", "top_logprobs")
            if (top == -1 or top > 0) and not request.logprobs:
                raise InvalidRequest("when using `top_logprobs`, `logprobs` must be set to true.", "top_logprobs")
        for message in request.messages:
            parts = message.content if isinstance(message.content, list) else []
            if any(part.get("type") in MEDIA_PARTS for part in parts if isinstance(part, dict)):
                raise InvalidRequest(f"{model} is not a multimodal model")
        logprobs = top if request.logprobs else None
    elif request.logprobs is not None:
        if request.logprobs < 0:
            raise InvalidRequest("`logprobs` must be a positive value.", "logprobs")
        logprobs = request.logprobs
    bias_ids = []
    for token in request.logit_bias or {}:
        try:
            bias_ids.append(int(token))
        except ValueError as exc:
            raise InvalidRequest(str(exc)) from None
    if logprobs:
        requested = vocab_size if logprobs == -1 else logprobs
        if requested > MAX_LOGPROBS:
            raise InvalidRequest(
                f"Requested sample logprobs of {requested}, which is greater than max allowed: {MAX_LOGPROBS}",
                "logprobs",
            )
    outside = [token for token in bias_ids if token < 0 or token >= vocab_size]
    if outside:
        raise InvalidRequest(
            f"token_id(s) {outside} in logit_bias contain out-of-vocab token ids. Vocabulary size: {vocab_size}",
            "logit_bias",
        )


def check_context(prompt_tokens: int, max_tokens: int | None, max_model_len: int) -> int:
    """The number of tokens the request may generate; refused as vLLM refuses when it cannot fit the compiled
    sequence length (vllm/entrypoints/openai/serving_engine.py, ``_validate_input``)."""
    if prompt_tokens >= max_model_len:
        raise InvalidRequest(
            f"This model's maximum context length is {max_model_len} tokens. However, your request has "
            f"{prompt_tokens} input tokens. Please reduce the length of the input messages.",
            "messages",
        )
    if max_tokens is None:
        return max_model_len - prompt_tokens
    if prompt_tokens + max_tokens > max_model_len:
        raise InvalidRequest(
            f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This model's maximum context "
            f"length is {max_model_len} tokens and your request has {prompt_tokens} input tokens "
            f"({max_tokens} > {max_model_len} - {prompt_tokens}).",
            "max_tokens",
        )
    return max_tokens
