"""`invoke --chat`: one chat completion against an LLM endpoint, streamed when it is reachable over HTTP.

Over HTTP (a local endpoint, an EC2 address) it is ``POST /v1/chat/completions`` with ``"stream": true`` and the
text arrives token by token; a SageMaker endpoint gets the same body at ``/invocations`` (how the vLLM container
dispatches it there) and answers it whole.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from neurondeploy.serving.client import TIMEOUT_S, InvokeError, resolve_and_say, send


@dataclass
class ChatAnswer:
    text: str
    model: str | None
    finish_reason: str | None
    usage: dict | None


def chat_body(text: str, *, stream: bool, max_tokens: int | None, temperature: float | None) -> dict:
    body: dict = {"messages": [{"role": "user", "content": text}], "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    if temperature is not None:
        body["temperature"] = temperature
    return body


def chat(
    target: str,
    text: str,
    *,
    on_text: Callable[[str], None],
    max_tokens: int | None = None,
    temperature: float | None = None,
    stream: bool = True,
    region: str | None = None,
    state_location: str | None = None,
    where: str | None = None,
    on_target=None,
) -> ChatAnswer:
    """``where`` and ``on_target`` as :func:`neurondeploy.serving.client.invoke` takes them."""
    resolved = resolve_and_say(target, state_location, where, on_target)
    if resolved.kind == "http" and stream:
        return _stream_http(
            resolved.address, chat_body(text, stream=True, max_tokens=max_tokens, temperature=temperature), on_text
        )
    body = chat_body(text, stream=False, max_tokens=max_tokens, temperature=temperature)
    answer = send(resolved, json.dumps(body).encode(), region)
    try:
        choice = answer["choices"][0]
        content = choice["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise InvokeError(
            f"{target} did not answer a chat completion: {str(answer)[:200]}", "is it an LLM endpoint (hf-vllm)?"
        ) from None
    on_text(content)
    return ChatAnswer(content, answer.get("model"), choice.get("finish_reason"), answer.get("usage"))


def _stream_http(url: str, body: dict, on_text: Callable[[str], None]) -> ChatAnswer:
    import httpx

    parts, model, finish, usage = [], None, None, None
    try:
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=TIMEOUT_S) as response:
            if response.status_code >= 400:
                raise InvokeError(
                    f"{url} answered {response.status_code}: {_error_message(response.read())}",
                    "see the message; 400s are about the request",
                )
            for line in response.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[len("data: ") :])
                model = chunk.get("model", model)
                usage = chunk.get("usage") or usage
                for choice in chunk.get("choices", []):
                    delta = choice.get("delta", {}).get("content")
                    if delta:
                        parts.append(delta)
                        on_text(delta)
                    finish = choice.get("finish_reason") or finish
    except httpx.HTTPError as exc:
        raise InvokeError(
            f"{url}: {type(exc).__name__}: {exc}", "is the endpoint running? check it with GET /health"
        ) from None
    return ChatAnswer("".join(parts), model, finish, usage)


def _error_message(content: bytes) -> str:
    try:
        data = json.loads(content)
    except ValueError:
        return content.decode(errors="replace")
    error = data.get("error") if isinstance(data, dict) else None
    return error.get("message", str(error)) if isinstance(error, dict) else str(error or data)
