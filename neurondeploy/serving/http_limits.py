"""HTTP/1.1 connection limits uvicorn's httptools protocol does not enforce, and the uvicorn config that uses them.

uvicorn 0.x with httptools accepts headers of any size and number (llhttp hands them over in pieces and
httptools joins them), has no read timeout (its keep-alive timer starts only after a response, so a client that
trickles its headers or body holds the connection forever) and turns ``limit_concurrency`` into a 503 only
once a request's headers are complete. This subclass adds, per connection:

- the request line plus headers over ``max_header_bytes``, or more than ``max_header_count`` fields: 431, close;
  the bytes are counted as they arrive, so an endless header is cut at the limit (plus one read), not buffered;
- headers not complete ``header_timeout_s`` after the request's first byte (or the connection opening): 408, close;
- a body not complete ``body_timeout_s`` after its headers: 408, close;
- more than ``max_connections`` open: the new one gets 503 and is closed at once.

Idle keep-alive connections are closed by uvicorn's own ``timeout_keep_alive`` (``idle_timeout_s``).
"""

from __future__ import annotations

import asyncio
import importlib.util
from dataclasses import dataclass

import orjson
import uvicorn
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from neurondeploy.specs.inference import ServingSpec


@dataclass(frozen=True)
class HttpLimits:
    max_header_bytes: int
    max_header_count: int
    header_timeout_s: float
    body_timeout_s: float
    max_connections: int

    @classmethod
    def of(cls, serving: ServingSpec) -> HttpLimits:
        return cls(
            serving.max_header_bytes,
            serving.max_header_count,
            serving.header_timeout_s,
            serving.body_timeout_s,
            serving.max_connections,
        )


def framing_problem(headers: list[tuple[bytes, bytes]], version: str) -> tuple[int, str] | None:
    """(status, message) for a request RFC 9112 says to refuse, as nginx does, or None:

    - a transfer coding other than chunked alone: the body would be read with the other layers left on
      (501 Not Implemented, RFC 9112 section 6.1: "A server that receives a request message with a transfer coding
      it does not understand SHOULD respond with 501");
    - HTTP/1.1 without a Host field, or with more than one (400, RFC 9112 section 3.2)."""
    codings = [
        coding.strip().lower()
        for name, value in headers
        if name == b"transfer-encoding"
        for coding in value.decode("latin-1").split(",")
        if coding.strip()
    ]
    if codings and codings != ["chunked"]:
        other = ", ".join(c for c in codings if c != "chunked") or "chunked, chunked"
        return 501, f"transfer coding {other} is not supported; send the body as it is, or chunked alone"
    hosts = sum(1 for name, _ in headers if name == b"host")
    if version == "1.1" and hosts != 1:
        return 400, f"an HTTP/1.1 request needs exactly one Host header field, not {hosts} (RFC 9112 section 3.2)"
    return None


class _Refused(Exception):
    """Raised from a parser callback; httptools wraps it and uvicorn answers through send_400_response."""


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    limits: HttpLimits  # set on the subclass that limited_protocol() makes

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.refusal: tuple[int, str] | None = None
        self.timer: asyncio.TimerHandle | None = None
        self._expect_headers()
        if len(self.connections) > self.limits.max_connections:
            self._refuse(503, f"more than {self.limits.max_connections} open connections (serving.max_connections)")
            return
        self._arm(self.limits.header_timeout_s, "headers", "serving.header_timeout_s")

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.transport.is_closing():
            return
        if self.awaiting_headers:
            self.header_bytes += len(data)
        super().data_received(data)
        if self.awaiting_headers and self.header_bytes > self.limits.max_header_bytes:
            self._refuse(431, self._too_large())

    # parser callbacks --------------------------------------------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self.timer is None:  # a keep-alive connection's next request: its headers are timed from now
            self._arm(self.limits.header_timeout_s, "headers", "serving.header_timeout_s")

    def on_url(self, url: bytes) -> None:
        self.header_size += len(url)
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self.header_count += 1
        self.header_size += len(name) + len(value) + 4
        if self.header_count > self.limits.max_header_count:
            self.refusal = (431, f"more than {self.limits.max_header_count} header fields (serving.max_header_count)")
            raise _Refused
        if self.header_size > self.limits.max_header_bytes:
            self.refusal = (431, self._too_large())
            raise _Refused
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        problem = framing_problem(self.headers, self.parser.get_http_version())
        if problem:
            self.refusal = problem
            raise _Refused
        self.awaiting_headers = False
        self._arm(self.limits.body_timeout_s, "body", "serving.body_timeout_s")
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._disarm()
        self._expect_headers()
        super().on_message_complete()

    def send_400_response(self, msg: str) -> None:
        """What the parser refuses is answered like every other error of this server (uvicorn's own 400 is plain
        text): one line of JSON, then the connection is closed."""
        if self.refusal is not None:
            self._refuse(*self.refusal)
        else:
            detail = " ".join(msg.split()).rstrip(".")
            self._refuse(400, f"the request is not valid HTTP/1.1 ({detail}); send a well-formed request")

    # ------------------------------------------------------------------------------------------------------------

    def _expect_headers(self) -> None:
        self.awaiting_headers = True
        self.header_bytes = self.header_size = self.header_count = 0

    def _too_large(self) -> str:
        return f"the request line and headers are over {self.limits.max_header_bytes} bytes (serving.max_header_bytes)"

    def _arm(self, seconds: float, what: str, setting: str) -> None:
        self._disarm()
        self.timer = self.loop.call_later(seconds, self._timed_out, what, seconds, setting)

    def _disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _timed_out(self, what: str, seconds: float, setting: str) -> None:
        self.timer = None
        if self.transport.is_closing():
            return
        if self.cycle is not None and self.cycle.response_started:
            self.transport.close()  # answered already (e.g. 413 on the declared length): just stop reading
            return
        self._refuse(408, f"the request {what} did not arrive within {seconds:g} s ({setting})")

    def _refuse(self, status: int, message: str) -> None:
        """Answer (JSON, as every error of this server) and close the connection."""
        self._disarm()
        if self.transport.is_closing():
            return
        body = orjson.dumps({"error": message})
        self.transport.write(
            b"".join(
                [
                    STATUS_LINE[status],
                    b"content-type: application/json\r\ncontent-length: ",
                    str(len(body)).encode(),
                    b"\r\nconnection: close\r\n\r\n",
                    body,
                ]
            )
        )
        if self.cycle is not None:
            self.cycle.disconnected = True  # the app's own answer, if it comes, is not written after this one
            self.cycle.message_event.set()
        self.transport.close()


def limited_protocol(serving: ServingSpec) -> type[LimitedHttpToolsProtocol]:
    return type("ServingHttpProtocol", (LimitedHttpToolsProtocol,), {"limits": HttpLimits.of(serving)})


def uvicorn_config(app, serving: ServingSpec, host: str, port: int, **options) -> uvicorn.Config:
    """The server's uvicorn settings: httptools with the limits above, uvloop when installed, no access log."""
    settings = {
        "log_level": "warning",
        "access_log": False,
        "lifespan": "on",
        "timeout_graceful_shutdown": 30,
        "loop": "uvloop" if importlib.util.find_spec("uvloop") else "asyncio",
        "http": limited_protocol(serving),
        "timeout_keep_alive": serving.idle_timeout_s,
        # X-Forwarded-* rewrites the client address, which only an access log would show: not worth its cost.
        "proxy_headers": False,
    } | options
    return uvicorn.Config(app, host=host, port=port, **settings)
