"""The HTTP face of the local LLM endpoint: what the vLLM Neuron container serves (vLLM's OpenAI-compatible
server, as optimum-neuron's ``optimum-cli neuron serve`` runs it) and what SageMaker calls.

- ``POST /v1/completions`` and ``POST /v1/chat/completions``, with ``"stream": true`` as server-sent events
  (``data: {chunk}`` lines, then ``data: [DONE]``), OpenAI's response shapes;
- ``GET /v1/models``, ``GET /health``;
- SageMaker: ``GET /ping``, ``POST /invocations`` (a body with ``messages`` is a chat completion, one with
  ``prompt`` a completion: how vLLM's own /invocations dispatches);
- ``GET /metrics``: Prometheus, with vLLM's ``vllm:num_requests_running`` / ``vllm:num_requests_waiting`` and
  the most that ever decoded at once.

Refusals are 400 with vLLM's sentences and error shape; the server stays up.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid

import orjson
from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from neurondeploy.serving.llm.engine import ERROR, GenerationEngine, QueueFull, Sequence
from neurondeploy.serving.llm.errors import InvalidRequest
from neurondeploy.serving.llm.model import LanguageModel
from neurondeploy.serving.llm.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    check_context,
    check_vllm_limits,
    parse,
    sampling_params,
)
from neurondeploy.serving.llm.tgi import parse_tgi, tgi_sampling

NO_CHAT_TEMPLATE = (  # vLLM's words when a tokenizer has no chat template
    "As of transformers v4.44, default chat template is no longer allowed, so you must provide a chat template "
    "if the tokenizer does not define one."
)
RETRY_AFTER_S = 1
TGI_GENERATE, TGI_INVOCATION = "tgi-generate", "tgi-invocation"


def _json(data, status: int = 200, headers: dict | None = None) -> Response:
    return Response(orjson.dumps(data), status_code=status, media_type="application/json", headers=headers)


class LlmServer:
    def __init__(
        self,
        lm: LanguageModel,
        *,
        max_batch: int,
        max_model_len: int,
        max_queue: int,
        max_body_bytes: int,
        tgi: bool = False,
    ):
        self.lm = lm
        self.tgi = tgi  # an hf-tgi spec: TGI's {"inputs", "parameters"} bodies too (/generate, /invocations)
        self.max_model_len = max_model_len
        self.max_body_bytes = max_body_bytes
        self.engine = GenerationEngine(
            lm.model,
            lm.tokenizer,
            max_batch=max_batch,
            max_model_len=max_model_len,
            max_queue=max_queue,
            eos_token_ids=lm.eos_token_ids,
        )
        self.created = int(time.time())
        self.outbox = _Outbox()
        self.registry = CollectorRegistry()
        stats = self.engine.stats
        for name, help_text, read in (
            ("vllm:num_requests_running", "Sequences decoding now", lambda: stats.running),
            ("vllm:num_requests_waiting", "Requests queued for a decode slot", lambda: stats.waiting),
            (
                "neurondeploy_llm_peak_running",
                "The most sequences that ever decoded at once",
                lambda: stats.peak_running,
            ),
            (
                "neurondeploy_llm_peak_queued_behind_full_batch",
                "The most requests ever queued while every decode slot was taken",
                lambda: stats.peak_queued_behind_full_batch,
            ),
            ("neurondeploy_llm_max_batch", "Compiled batch size: the most that may decode at once", lambda: max_batch),
            ("vllm:generation_tokens_total", "Tokens generated", lambda: stats.generated_tokens),
            ("vllm:prompt_tokens_total", "Prompt tokens prefilled", lambda: stats.prompt_tokens),
        ):
            Gauge(name, help_text, registry=self.registry).set_function(read)

    # --- routes ---------------------------------------------------------------------------------------------

    async def health(self, request: Request) -> Response:
        return Response(status_code=200)

    async def ping(self, request: Request) -> Response:
        return _json({})

    async def models(self, request: Request) -> Response:
        card = {
            "id": self.lm.served_name,
            "object": "model",
            "created": self.created,
            "owned_by": "neurondeploy",
            "root": self.lm.served_name,
            "parent": None,
            "max_model_len": self.max_model_len,
        }
        return _json({"object": "list", "data": [card]})

    async def metrics(self, request: Request) -> Response:
        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)

    async def completions(self, request: Request) -> Response:
        return await self._handle(request, "completion")

    async def chat_completions(self, request: Request) -> Response:
        return await self._handle(request, "chat")

    async def invocations(self, request: Request) -> Response:
        return await self._handle(request, None)

    async def generate(self, request: Request) -> Response:
        return await self._handle(request, TGI_GENERATE)

    # --- one request ----------------------------------------------------------------------------------------

    async def _handle(self, request: Request, kind: str | None) -> Response:
        try:
            body = await self._read_json(request)
            if kind is None:
                kind = self._invocation_kind(body)
            if kind in (TGI_GENERATE, TGI_INVOCATION):
                parsed = parse_tgi(body)
                prompt_ids = self.lm.tokenizer(parsed.inputs).input_ids
                params, budget = tgi_sampling(parsed, len(prompt_ids), self.max_model_len)
            else:
                parsed = parse(ChatCompletionRequest if kind == "chat" else CompletionRequest, body)
                self._check_model(parsed.model)
                check_vllm_limits(parsed, self.lm.model.config.vocab_size, self.lm.served_name)
                params = sampling_params(parsed)
                prompt_ids = self._prompt_ids(parsed, kind)
                budget = check_context(len(prompt_ids), params.max_tokens, self.max_model_len)
        except InvalidRequest as exc:
            return _json(exc.body(), exc.status)
        queue: asyncio.Queue = asyncio.Queue()
        sequence = Sequence(prompt_ids, params, budget, self.outbox.sender(queue))
        try:
            self.engine.submit(sequence)
        except QueueFull as exc:
            refusal = InvalidRequest(f"busy: {exc}", status=503, kind="ServiceUnavailableError")
            return _json(refusal.body(), 503, {"Retry-After": str(RETRY_AFTER_S)})
        answer = _Answer(kind, self.lm.served_name, sequence, parsed)
        if getattr(parsed, "stream", False):
            return StreamingResponse(
                self._stream(answer, queue, request),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache"},
            )
        try:
            while True:
                text, reason = await queue.get()
                if reason == ERROR:
                    return _json(_model_failure(text).body(), 500)
                answer.text += text
                if reason:
                    return _json(answer.whole(reason))
        except asyncio.CancelledError:
            self.engine.cancel(sequence)
            raise

    async def _stream(self, answer: _Answer, queue: asyncio.Queue, request: Request):
        try:
            if answer.kind == "chat":
                yield _event(answer.chunk({"role": "assistant", "content": ""}, None))
            while True:
                text, reason = await queue.get()
                while not reason and not queue.empty():  # tokens that arrived meanwhile go out as one chunk
                    more, reason = queue.get_nowait()
                    text = more if reason == ERROR else text + more
                if reason == ERROR:  # mid-stream the status is sent already: the error is the last event
                    yield _event(_model_failure(text).body())
                    break
                if text or reason:
                    yield _event(answer.chunk(text, reason))
                if reason:
                    break
            if answer.usage_in_stream:
                yield _event(answer.usage_chunk())
            yield b"data: [DONE]\n\n"
        finally:  # the client went away mid-stream (or the stream ended): nothing keeps decoding for it
            self.engine.cancel(answer.sequence)

    async def _read_json(self, request: Request):
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            raise InvalidRequest(
                f"the body has {declared} bytes; at most {self.max_body_bytes} (serving.max_body_bytes)"
            )
        chunks, size = [], 0
        try:
            async for chunk in request.stream():
                size += len(chunk)
                if size > self.max_body_bytes:
                    raise InvalidRequest(f"the body is over {self.max_body_bytes} bytes (serving.max_body_bytes)")
                chunks.append(chunk)
        except ClientDisconnect:
            raise InvalidRequest("the client went away") from None
        try:
            return orjson.loads(b"".join(chunks))
        except orjson.JSONDecodeError as exc:
            raise InvalidRequest(f"JSON decode error: {exc}") from None

    def _invocation_kind(self, body) -> str:
        if isinstance(body, dict) and "messages" in body:
            return "chat"
        if isinstance(body, dict) and "prompt" in body:
            return "completion"
        if self.tgi and isinstance(body, dict) and "inputs" in body:
            return TGI_INVOCATION
        raise InvalidRequest(
            "Cannot determine the request type: /invocations takes a chat completion (with messages) or a "
            "completion (with prompt) body"
        )

    def _check_model(self, name: str | None) -> None:
        if name is not None and name not in self.lm.aliases:
            raise InvalidRequest(f"The model `{name}` does not exist.", "model", 404, "NotFoundError")

    def _prompt_ids(self, parsed, kind: str) -> list[int]:
        tokenizer = self.lm.tokenizer
        if kind == "chat":
            if not getattr(tokenizer, "chat_template", None):
                raise InvalidRequest(NO_CHAT_TEMPLATE)
            messages = [{"role": message.role, "content": message.text()} for message in parsed.messages]
            try:
                rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            except Exception as exc:  # the model's template refuses these messages (roles, order): vLLM says 400
                raise InvalidRequest(f"the chat template cannot render these messages: {exc}", "messages") from None
            return tokenizer(rendered, add_special_tokens=False).input_ids
        prompt = parsed.prompt
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], int):
            vocabulary = self.lm.model.config.vocab_size
            if any(not 0 <= token < vocabulary for token in prompt):
                raise InvalidRequest(f"Token id out of vocabulary (0..{vocabulary - 1})", "prompt")
            return list(prompt)
        if isinstance(prompt, list):
            if len(prompt) != 1:
                raise InvalidRequest("this endpoint takes one prompt per request", "prompt")
            prompt = prompt[0]
        ids = tokenizer(prompt).input_ids
        if not ids:
            raise InvalidRequest("Prompt cannot be empty", "prompt")
        return ids

    def app(self) -> Starlette:
        @contextlib.asynccontextmanager
        async def lifespan(app):
            self.outbox.loop = asyncio.get_running_loop()
            self.engine.start()
            yield
            await asyncio.get_running_loop().run_in_executor(None, self.engine.stop)

        return Starlette(
            routes=[
                Route("/v1/completions", self.completions, methods=["POST"]),
                Route("/v1/chat/completions", self.chat_completions, methods=["POST"]),
                Route("/v1/models", self.models, methods=["GET"]),
                Route("/health", self.health, methods=["GET"]),
                Route("/ping", self.ping, methods=["GET"]),
                Route("/invocations", self.invocations, methods=["POST"]),
                *([Route("/generate", self.generate, methods=["POST"])] if self.tgi else []),
                Route("/metrics", self.metrics, methods=["GET"]),
            ],
            lifespan=lifespan,
        )


class _Outbox:
    """Tokens from the engine thread to the requests' queues on the event loop. One wake-up of the loop carries
    everything emitted since the last one (a decode step emits a token per sequence): a wake-up per token took
    the loop, and the GIL, from the engine once per sequence per step."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.items: list[tuple[asyncio.Queue, tuple[str, str | None]]] = []
        self.lock = threading.Lock()

    def sender(self, queue: asyncio.Queue):
        def emit(text: str, reason: str | None) -> None:
            with self.lock:
                self.items.append((queue, (text, reason)))
                first = len(self.items) == 1
            if first:
                self.loop.call_soon_threadsafe(self._deliver)

        return emit

    def _deliver(self) -> None:
        with self.lock:
            items, self.items = self.items, []
        for queue, item in items:
            queue.put_nowait(item)


def _model_failure(message: str) -> InvalidRequest:
    return InvalidRequest(f"the model call failed: {message}", status=500, kind="InternalServerError")


def _event(data: dict) -> bytes:
    return b"data: " + orjson.dumps(data) + b"\n\n"


class _Answer:
    """One request's response in OpenAI's shapes (whole, or chunk by chunk)."""

    def __init__(self, kind: str, model: str, sequence: Sequence, parsed) -> None:
        self.kind = kind
        self.model = model
        self.sequence = sequence
        self.id = ("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())
        self.outbox = _Outbox()
        self.text = ""
        self.prefix = parsed.inputs if getattr(getattr(parsed, "parameters", None), "return_full_text", False) else ""
        options = getattr(parsed, "stream_options", None) or {}
        self.usage_in_stream = bool(options.get("include_usage"))

    def usage(self) -> dict:
        prompt, completion = len(self.sequence.prompt_ids), len(self.sequence.generated)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    def whole(self, reason: str):
        if self.kind in (TGI_GENERATE, TGI_INVOCATION):  # TGI answers the text; SageMaker's TGI a list of it
            generated = {"generated_text": self.prefix + self.text}
            return [generated] if self.kind == TGI_INVOCATION else generated
        if self.kind == "chat":
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": self.text},
                "logprobs": None,
                "finish_reason": reason,
            }
            kind = "chat.completion"
        else:
            choice = {"index": 0, "text": self.text, "logprobs": None, "finish_reason": reason}
            kind = "text_completion"
        return {
            "id": self.id,
            "object": kind,
            "created": self.created,
            "model": self.model,
            "choices": [choice],
            "usage": self.usage(),
        }

    def chunk(self, delta, reason: str | None) -> dict:
        if self.kind == "chat":
            content = delta if isinstance(delta, dict) else {"content": delta}
            choice, kind = (
                {"index": 0, "delta": content, "logprobs": None, "finish_reason": reason},
                "chat.completion.chunk",
            )
        else:
            choice, kind = {"index": 0, "text": delta, "logprobs": None, "finish_reason": reason}, "text_completion"
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model, "choices": [choice]}

    def usage_chunk(self) -> dict:
        kind = "chat.completion.chunk" if self.kind == "chat" else "text_completion"
        return {
            "id": self.id,
            "object": kind,
            "created": self.created,
            "model": self.model,
            "choices": [],
            "usage": self.usage(),
        }
