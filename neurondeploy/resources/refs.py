"""Placeholder references: IDs that only exist once an earlier request has been sent.

A plan is pure data made before anything exists, so a subnet's ``VpcId`` cannot be known yet. The request
builder writes ``${vpc.VpcId}`` instead and the executor substitutes the real value once ``vpc`` is created.
A ref may be the whole string (then it stands for a value of any type, e.g. a list of subnet IDs) or be
embedded in a longer string (``arn:...:${alb.Arn}/x``, then it becomes text).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

_REF = re.compile(r"\$\{([a-z0-9][a-z0-9-]*)\.([A-Za-z0-9_]+)\}")
_RESOURCE = re.compile(r"[a-z0-9][a-z0-9-]*")
_ATTRIBUTE = re.compile(r"[A-Za-z0-9_]+")

Ref = tuple[str, str]


class UnresolvedRef(KeyError):
    """A ref whose value is not known yet (the resource was not created, or the attribute is misspelt)."""

    def __init__(self, key: Ref, known: Mapping[Ref, Any]) -> None:
        super().__init__(key)
        self.key = key
        same_resource = sorted(attr for res, attr in known if res == key[0])
        if same_resource:
            detail = f"{key[0]} has only {', '.join(same_resource)}"
        else:
            detail = f"nothing is known about {key[0]!r} yet (is it created before this request?)"
        self.message = f"unresolved reference ${{{key[0]}.{key[1]}}}: {detail}"

    def __str__(self) -> str:  # KeyError would repr() the key; say what is wrong instead
        return self.message


def ref(resource: str, attribute: str) -> str:
    """The placeholder for ``attribute`` of the resource named ``resource`` in the plan."""
    if not _RESOURCE.fullmatch(resource):
        raise ValueError(f"resource name {resource!r} must match [a-z0-9][a-z0-9-]*")
    if not _ATTRIBUTE.fullmatch(attribute):
        raise ValueError(f"attribute {attribute!r} must match [A-Za-z0-9_]+")
    return f"${{{resource}.{attribute}}}"


def is_ref(value: Any) -> bool:
    """True when ``value`` is exactly one ref and nothing else."""
    return isinstance(value, str) and _REF.fullmatch(value) is not None


def contains_ref(value: Any) -> bool:
    """True when ``value`` is a string with at least one ref in it."""
    return isinstance(value, str) and _REF.search(value) is not None


def find_refs(obj: Any) -> set[Ref]:
    """Every ``(resource, attribute)`` referenced anywhere in nested dicts, lists and tuples."""
    found: set[Ref] = set()
    _walk(obj, lambda text: found.update(_REF.findall(text)))
    return found


def resolve(obj: Any, values: Mapping[Ref, Any]) -> Any:
    """A deep copy of ``obj`` with every ref replaced by its value; raises :class:`UnresolvedRef`."""

    def lookup(key: Ref) -> Any:
        if key not in values:
            raise UnresolvedRef(key, values)
        return values[key]

    def sub(value: Any) -> Any:
        if isinstance(value, str):
            whole = _REF.fullmatch(value)
            if whole:
                # The value keeps its type: a ref may stand for a list of IDs or a port number.
                return copy.deepcopy(lookup((whole[1], whole[2])))
            return _REF.sub(lambda m: str(lookup((m[1], m[2]))), value)
        if isinstance(value, Mapping):
            return {k: sub(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(sub(v) for v in value)
        return copy.deepcopy(value)

    return sub(obj)


def _walk(obj: Any, on_string) -> None:
    if isinstance(obj, str):
        on_string(obj)
    elif isinstance(obj, Mapping):
        for value in obj.values():
            _walk(value, on_string)
    elif isinstance(obj, list | tuple):
        for value in obj:
            _walk(value, on_string)
