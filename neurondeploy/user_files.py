"""The one way neurondeploy reads a file a user (or whoever published a model or corpus) hands it: a regular file
only, never more than a cap, JSON never nested past a depth.

A FIFO would block a read forever, a link to /dev/zero never end it, a 10 GB "config.json" would be read whole, and
JSON nested 100,000 deep stops Python's decoder with a RecursionError: each is one line here (the ``error`` class
the caller names, carrying what is wrong and the fix), decided before anything is read where it can be.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

from neurondeploy.errors import NeurondeployError

MAX_JSON_DEPTH = 64  # a model config or manifest is a few levels deep; a JSON line of a corpus is one or two


def read_user_file(
    path: Path, *, max_bytes: int, what: str, fix: str, error: type[NeurondeployError] = NeurondeployError
) -> bytes:
    """The bytes of the regular file ``path`` (symlinks followed), at most ``max_bytes``; FileNotFoundError passes
    through for the caller to say what is missing."""
    path = Path(path)
    try:
        info = path.stat()
        if stat.S_ISDIR(info.st_mode):
            raise error(f"{path}: is a directory, not {what}", fix)
        if not stat.S_ISREG(info.st_mode):  # a FIFO would block, a device never end: refused before opening
            raise error(f"{path}: not a regular file, so not {what}", fix)
        if info.st_size > max_bytes:
            raise error(f"{path}: {info.st_size} bytes is too large for {what} (at most {max_bytes})", fix)
        with path.open("rb") as handle:
            raw = handle.read(max_bytes + 1)  # the file may grow after the stat
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise error(f"{path}: cannot read {what} ({exc.strerror or exc})", fix) from None
    if len(raw) > max_bytes:
        raise error(f"{path}: grew past {max_bytes} bytes while read, too large for {what}", fix)
    return raw


def json_depth(value: Any) -> int:
    """How deeply ``value``'s lists and objects nest (a scalar: 0), without recursion."""
    deepest, pending = 0, [(value, 1)]
    while pending:
        item, depth = pending.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth)
        pending.extend((child, depth + 1) for child in children)
    return deepest


def parse_user_json(
    raw: bytes | str,
    *,
    where: str,
    fix: str,
    error: type[NeurondeployError] = NeurondeployError,
    max_depth: int = MAX_JSON_DEPTH,
) -> Any:
    """``raw`` as JSON, nested at most ``max_depth`` deep; anything else one ``error`` naming ``where``."""
    try:
        value = json.loads(raw)
    except RecursionError:  # the decoder recurses per level: nested past its limit
        raise error(f"{where}: JSON nested more than {max_depth} levels deep", fix) from None
    except ValueError as exc:  # UnicodeDecodeError is a ValueError too
        raise error(f"{where}: not JSON ({exc})", fix) from None
    if json_depth(value) > max_depth:
        raise error(f"{where}: JSON nested more than {max_depth} levels deep", fix)
    return value
