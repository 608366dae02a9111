"""Every page of a paginated AWS list call, each page one :meth:`AwsTransport.call` (checked strictly and logged).

The tokens come from botocore's own paginator models (``paginators-1.json``: input token, output token, "more
results" flag), so no caller spells out NextToken / Marker / NextRecordName pairs by hand.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from typing import Any


@cache
def paginator_config(service: str, operation: str) -> dict[str, Any]:
    """botocore's paginator entry for ``operation``: input_token, output_token, more_results, result_key."""
    import botocore.session

    model = botocore.session.get_session().get_paginator_model(service)
    return model.get_paginator(operation)


def _as_list(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


class Paged:
    """``Paged(transport).call(service, operation, params)`` yields every page. Spelt like a call, so that
    :mod:`neurondeploy.aws.iam_policy` sees the operation in the source."""

    def __init__(self, transport) -> None:
        self.transport = transport

    def call(self, service: str, operation: str, params: dict) -> Iterator[dict]:
        import jmespath

        config = paginator_config(service, operation)
        inputs, outputs = _as_list(config["input_token"]), _as_list(config["output_token"])
        more = config.get("more_results")
        params = dict(params)
        while True:
            page = self.transport.call(service, operation, params)
            yield page
            if more and not jmespath.search(more, page):
                return
            tokens = [jmespath.search(expression, page) for expression in outputs]
            if not any(tokens):
                return
            for key, value in zip(inputs, tokens):
                if value is None:
                    params.pop(key, None)
                else:
                    params[key] = value
