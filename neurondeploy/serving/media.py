"""Request and response bodies by media type, as SageMaker's containers take them.

``application/json``: one payload (``{"inputs": ...}``), one answer. ``application/jsonlines``: one payload per
line (SageMaker batch transform splits files by line), one answer per line, in order. A request without a
Content-Type is read as JSON; an ``Accept`` that allows neither type gets 406, another Content-Type 415.
"""

from __future__ import annotations

from typing import Any

import orjson

from neurondeploy.serving.runtime import BadRequest

JSON = "application/json"
JSON_LINES = "application/jsonlines"
READABLE = (JSON, JSON_LINES, "application/x-jsonlines")
_DUMP_OPTIONS = orjson.OPT_SERIALIZE_NUMPY


class Unsupported(ValueError):
    """415 (Content-Type) or 406 (Accept): the message lists what is supported."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _media_type(value: str) -> str:
    return value.split(";", 1)[0].strip().lower()


def request_type(content_type: str | None) -> str:
    """The body's media type (JSON when the header is absent); 415 for one we cannot read."""
    if not content_type:
        return JSON
    media = _media_type(content_type)
    if media not in READABLE:
        raise Unsupported(415, f"Content-Type {media} is not supported; send {JSON} or {JSON_LINES}")
    charset = declared_charset(content_type)
    if charset not in (None, "utf-8", "utf8"):
        # JSON is UTF-8 (RFC 8259 section 8.1); a body in another charset would be read as UTF-8 and mangled
        raise Unsupported(415, f"charset {charset} is not supported; send the body in UTF-8 (charset=utf-8)")
    return JSON if media == JSON else JSON_LINES


def declared_charset(content_type: str) -> str | None:
    """The ``charset`` parameter of a Content-Type, lowercased and unquoted, or None."""
    for parameter in content_type.split(";")[1:]:
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "charset":
            return value.strip().strip('"').lower()
    return None


def response_type(accept: str | None, request: str) -> str:
    """The answer's media type: the first type the Accept header allows (q > 0), in its order of preference;
    without Accept (or with */*) the request's own type; 406 when it allows neither."""
    if not accept:
        return request
    ranges = []
    for position, part in enumerate(accept.split(",")):
        media, *parameters = (piece.strip() for piece in part.split(";"))
        quality = 1.0
        for parameter in parameters:
            name, _, value = parameter.partition("=")
            if name.strip().lower() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        if quality > 0:
            ranges.append((-quality, position, media.lower()))
    for _, _, media in sorted(ranges):
        if media in ("*/*", "application/*"):
            return request
        if media in READABLE:
            return JSON if media == JSON else JSON_LINES
    raise Unsupported(406, f"Accept {accept} allows no type this server writes; accept {JSON} or {JSON_LINES}")


def read_payloads(body: bytes, media: str) -> list[Any]:
    """The request's payloads: one for JSON, one per non-empty line for JSON Lines."""
    if media == JSON:
        return [_loads(body, "the body")]
    lines = [line for line in body.splitlines() if line.strip()]
    if not lines:
        raise BadRequest("the body has no JSON lines")
    return [_loads(line, f"line {number}") for number, line in enumerate(lines, 1)]


def _loads(text: bytes, where: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"{where} is not valid JSON ({exc})") from None


def write_answers(answers: list[Any], request: str, response: str) -> bytes:
    """One answer per payload: JSON Lines writes a line each; JSON writes the answer of a JSON request, or the
    list of them for a JSON Lines request."""
    if response == JSON_LINES:
        return b"".join(orjson.dumps(answer, option=_DUMP_OPTIONS | orjson.OPT_APPEND_NEWLINE) for answer in answers)
    return orjson.dumps(answers[0] if request == JSON else answers, option=_DUMP_OPTIONS)
