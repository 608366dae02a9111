"""A request the endpoint refuses, with vLLM's wording, answered 400 in vLLM's error shape."""

from __future__ import annotations


class InvalidRequest(Exception):
    """vLLM answers these 400 with ``{"error": {"message", "type": "BadRequestError", "param", "code": 400}}``."""

    def __init__(self, message: str, param: str | None = None, status: int = 400, kind: str = "BadRequestError"):
        super().__init__(message)
        self.message = message
        self.param = param
        self.status = status
        self.kind = kind

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.status}}
