"""What every command prints with: JSON on stdout, rich consoles, the compile progress line."""

from __future__ import annotations

import json
import sys


def print_json(data) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def console_out():
    from rich.console import Console  # rich only for commands that render: validate and --json stay light

    return Console(highlight=False, soft_wrap=True)


def console_err():
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True, stderr=True)


def dollars(hourly_usd: float | None) -> str:
    return f"${hourly_usd:,.2f}/hour" if hourly_usd is not None else "unknown"


def bucket_line(bucket) -> str:
    state = f"cache hit ({bucket.source})" if bucket.cache_hit else f"compiled in {bucket.trace_s:.1f} s"
    return f"  bucket batch {bucket.batch_size} × {bucket.length}: {state}"


def compact_json(data, indent: int = 0) -> str:
    """JSON indented like print_json, except that a list of numbers (an embedding, logits) stays on one line."""
    pad, inner = " " * indent, " " * (indent + 2)
    if isinstance(data, list) and data and all(_is_number(value) for value in data):
        return json.dumps(data, separators=(", ", ": "))
    if isinstance(data, list) and data:
        return "[\n" + ",\n".join(inner + compact_json(value, indent + 2) for value in data) + "\n" + pad + "]"
    if isinstance(data, dict) and data:
        lines = (f"{inner}{json.dumps(str(key))}: {compact_json(value, indent + 2)}" for key, value in data.items())
        return "{\n" + ",\n".join(lines) + "\n" + pad + "}"
    return json.dumps(data, default=str)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
