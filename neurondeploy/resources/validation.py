"""Strict offline validation of AWS request dicts against botocore's service models.

botocore's own ``ParamValidator`` checks required members, types and minimums, but not enums, maximums or
patterns, so a 64-character SageMaker name or an unknown instance type is only refused by AWS, after the
resources before it were created. This module checks all of them, before anything is sent.

Models are read as raw JSON and walked as dicts: building ``botocore.model`` objects is not needed, and
importing ``botocore.loaders`` alone costs ~100 ms (it pulls in urllib3), more than parsing the models.
"""

from __future__ import annotations

import datetime as dt
import difflib
import functools
import gzip
import hashlib
import importlib.util
import json
import marshal
import os
import re
import string
import unicodedata
import warnings
from collections.abc import Iterable, Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

from neurondeploy.errors import AwsRequestError
from neurondeploy.paths import default_cache_dir
from neurondeploy.resources.aws_rules import rule_problems
from neurondeploy.resources.refs import contains_ref, is_ref

__all__ = ["check_request", "check_requests", "validate_request", "matches_pattern", "uncompilable_patterns"]


def validate_request(service: str, operation: str, params: Mapping, region: str | None = None) -> list[str]:
    """Every reason AWS would refuse ``params`` for ``service:operation`` (sent to ``region``, when known); empty
    when the request is valid: the service model's shapes, then the rules AWS states only in its documentation
    (:mod:`neurondeploy.resources.aws_rules`).

    Each problem reads ``"<Operation>.<Field.Path[0].Sub>: <what is wrong>"``. Strings holding a ref
    (``${vpc.VpcId}``) skip pattern, length and enum checks; a whole-string ref may stand for any type.
    """
    model, problem = _operation_model(service, operation)
    if problem:
        return [f"{operation}: {problem}"]
    input_ref = model["operations"][operation].get("input")
    checker = _Checker(model["shapes"], operation)
    if input_ref is None:
        if params:
            checker.problem("", f"takes no parameters, got {', '.join(sorted(params))}")
        return checker.problems
    if service == "route53" and isinstance(params, Mapping):
        params = _route53_ids(params, model["shapes"][input_ref["shape"]])
    checker.check(params, input_ref["shape"], "")
    return checker.problems + rule_problems(service, operation, params, region)


def check_request(service: str, operation: str, params: Mapping, region: str | None = None) -> None:
    """Raise :class:`AwsRequestError` when :func:`validate_request` finds any problem."""
    problems = validate_request(service, operation, params, region)
    if not problems:
        return
    more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
    raise AwsRequestError(
        message=f"{service}:{operation} refused offline: {problems[0]}{more}",
        hint="change the spec value named in the problem, or fix the request builder if the spec is right; "
        "all problems: " + "; ".join(problems),
    )


def check_requests(resources: Iterable, region: str) -> None:
    """Every create and update request of ``resources`` checked as the transport checks each call, all before the
    first is sent: a request AWS would refuse half-way through an apply would leave what came before it made."""
    for resource in resources:
        for request in [*resource.create, *resource.update]:
            check_request(request.service, request.operation, request.params, region)


# --- service models -----------------------------------------------------------------------------------


@functools.cache
def idempotency_member(service: str, operation: str) -> str | None:
    """The request member AWS deduplicates retries by (ClientToken, IdempotencyToken, CallerReference), or None when
    the operation has none."""
    model, _ = _operation_model(service, operation)
    if model is None:
        return None
    shape = model["operations"][operation].get("input", {}).get("shape")
    members = model["shapes"].get(shape, {}).get("members", {}) if shape else {}
    marked = [name for name, member in members.items() if member.get("idempotencyToken")]
    named = [name for name in ("ClientToken", "IdempotencyToken", "CallerReference") if name in members]
    return next(iter(marked + named), None)  # ACM's IdempotencyToken and Route 53's CallerReference are unmarked


@functools.cache
def _operation_model(service: str, operation: str) -> tuple[dict | None, str | None]:
    """(a model holding ``operation`` and every shape its input reaches, None) or (None, why not).

    botocore's EC2 model is 5 MB of JSON (~90 ms to parse) for the two dozen operations a plan sends, so the
    input shapes of each operation used are kept in a small per-service file beside the compile cache, keyed by
    the model file's path, size and modification time: a botocore upgrade reads the new model once.
    """
    path = _bundled_model_path(service)
    subsets = _OperationSubsets.of(service, path) if path else None
    if subsets is not None and operation in subsets.model["operations"]:
        return subsets.model, None
    try:
        model = _load_model(service)
    except Exception as exc:
        from botocore.exceptions import DataNotFoundError  # base of UnknownServiceError; loaded by now

        if not isinstance(exc, DataNotFoundError):
            raise
        return None, f"unknown service {service!r}{_did_you_mean(service, _available_services())}"
    if operation not in model["operations"]:
        return None, f"{service} has no operation {operation!r}{_did_you_mean(operation, model['operations'])}"
    if subsets is not None:
        subsets.add(operation, model)
    return model, None


class _OperationSubsets:
    """The operations of one service model used so far on this machine, each with the shapes its input reaches."""

    FORMAT = 1

    def __init__(self, file: Path) -> None:
        self.file = file
        try:
            self.model = marshal.loads(file.read_bytes())
        except (OSError, EOFError, ValueError, TypeError):
            self.model = {"operations": {}, "shapes": {}}

    @classmethod
    @functools.cache
    def of(cls, service: str, model_path: str) -> _OperationSubsets | None:
        try:
            stat = os.stat(model_path)
        except OSError:
            return None
        identity = f"{cls.FORMAT}|{model_path}|{stat.st_size}|{stat.st_mtime_ns}".encode()
        digest = hashlib.sha256(identity).hexdigest()[:16]
        return cls(default_cache_dir() / "botocore-shapes" / f"{service}-{digest}.marshal")

    def add(self, operation: str, model: Mapping) -> None:
        definition = model["operations"][operation]
        self.model["operations"][operation] = _undocumented(definition)
        pending = [definition["input"]["shape"]] if definition.get("input") else []
        while pending:
            name = pending.pop()
            if name in self.model["shapes"]:
                continue
            shape = self.model["shapes"][name] = _undocumented(model["shapes"][name])
            refs = [*shape.get("members", {}).values(), shape.get("member"), shape.get("key"), shape.get("value")]
            pending += [ref["shape"] for ref in refs if ref]
        try:  # a cache: a read-only home or a full disk costs speed, never a plan
            self.file.parent.mkdir(parents=True, exist_ok=True)
            partial = self.file.with_name(f"{self.file.name}.{os.getpid()}.tmp")
            partial.write_bytes(marshal.dumps(self.model))
            os.replace(partial, self.file)
        except OSError:
            pass


def _undocumented(node: Any) -> Any:
    """``node`` without its documentation strings: most of a model's bytes, none of its rules."""
    if isinstance(node, dict):
        return {key: _undocumented(value) for key, value in node.items() if key != "documentation"}
    if isinstance(node, list):
        return [_undocumented(value) for value in node]
    return node


@functools.cache
def _load_model(service: str) -> dict:
    path = _bundled_model_path(service)
    if path is None:
        # Customer models, sdk-extras merges or a service we cannot find: botocore's Loader knows the rules.
        from botocore.loaders import Loader

        return Loader().load_service_model(service, "service-2")
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        return json.loads(f.read())


def _bundled_model_path(service: str) -> str | None:
    """The newest bundled ``service-2.json(.gz)``, or None when botocore's Loader could pick another file."""
    if os.environ.get("AWS_DATA_PATH") or os.path.isdir(os.path.expanduser(f"~/.aws/models/{service}")):
        return None
    spec = importlib.util.find_spec("botocore")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = os.path.join(spec.submodule_search_locations[0], "data", service)
    if not os.path.isdir(root):
        return None
    for version in sorted(os.listdir(root), reverse=True):
        folder = os.path.join(root, version)
        if os.path.exists(os.path.join(folder, "service-2.sdk-extras.json")):
            return None
        for name in ("service-2.json", "service-2.json.gz"):  # the Loader's order
            if os.path.exists(os.path.join(folder, name)):
                return os.path.join(folder, name)
    return None


def _available_services() -> list[str]:
    from botocore.loaders import Loader

    return Loader().list_available_services("service-2")


def _route53_ids(params: Mapping, input_shape: dict) -> Mapping:
    # boto3 strips "/hostedzone/" style prefixes from these top-level members before validating
    # (botocore.handlers.fix_route53_ids), so the prefixed form is legal input.
    fixed = dict(params)
    for name, member in input_shape.get("members", {}).items():
        if member["shape"] in ("ResourceId", "DelegationSetId", "ChangeId") and isinstance(fixed.get(name), str):
            fixed[name] = fixed[name].split("/")[-1]
    return fixed


# --- the walk -----------------------------------------------------------------------------------------

_EXPECTED = {
    "structure": "a mapping",
    "map": "a mapping",
    "list": "a list",
    "string": "a string",
    "integer": "an integer",
    "long": "an integer",
    "boolean": "a boolean",
    "float": "a number",
    "double": "a number",
    "timestamp": "a datetime or ISO 8601 string",
    "blob": "bytes or a string",
}


class _Checker:
    def __init__(self, shapes: dict, operation: str) -> None:
        self.shapes = shapes
        self.operation = operation
        self.problems: list[str] = []

    def problem(self, path: str, text: str) -> None:
        self.problems.append(f"{self.operation}.{path}: {text}" if path else f"{self.operation}: {text}")

    def check(self, value: Any, shape_name: str, path: str) -> None:
        if is_ref(value):
            return  # stands for a value of any type, known only at apply time
        shape = self.shapes[shape_name]
        kind = shape["type"]
        if shape.get("document"):
            return  # free-form JSON by definition
        if not _TYPE_OK[kind](value):
            self.problem(path, f"expected {_EXPECTED[kind]}, got {type(value).__name__} {_show(value)}")
            return
        getattr(self, "_" + kind, _no_more_checks)(value, shape, path)

    def _structure(self, value: Mapping, shape: dict, path: str) -> None:
        members = shape.get("members", {})
        for name in shape.get("required", ()):
            # botocore fills idempotency tokens itself when they are missing
            if name not in value and not members[name].get("idempotencyToken"):
                self.problem(_join(path, name), "required member is missing")
        for name, item in value.items():
            if name not in members:
                self.problem(_join(path, name), "unknown member" + _did_you_mean(name, members, list_all=True))
            else:
                self.check(item, members[name]["shape"], _join(path, name))
        if shape.get("union") and len(value) != 1:
            self.problem(path, f"set exactly one of {', '.join(members)} (got {len(value)})")

    def _list(self, value: list, shape: dict, path: str) -> None:
        self._bounds(len(value), shape, path, "items")
        for i, item in enumerate(value):
            self.check(item, shape["member"]["shape"], f"{path}[{i}]")

    def _map(self, value: Mapping, shape: dict, path: str) -> None:
        self._bounds(len(value), shape, path, "entries")
        for key, item in value.items():
            self.check(key, shape["key"]["shape"], f"{path} key {key!r}")
            self.check(item, shape["value"]["shape"], f"{path}[{key!r}]")

    def _string(self, value: str, shape: dict, path: str) -> None:
        if contains_ref(value):
            return  # the final text is unknown until apply; it is still a string, which is all we can tell
        # AWS services count UTF-16 code units (Java String.length()), so an emoji counts twice.
        length = len(value) if value.isascii() else len(value.encode("utf-16-le")) // 2
        self._bounds(length, shape, path, "characters")
        enum = shape.get("enum")
        if enum is not None and value not in enum:
            allowed = f"one of {', '.join(enum)}" if len(enum) <= 12 else f"one of the {len(enum)} allowed values"
            self.problem(path, f"{_show(value)} is not {allowed}{_did_you_mean(value, enum)}")
        pattern = shape.get("pattern")
        if pattern is not None and matches_pattern(pattern, value) is False:
            self.problem(path, f"{_show(value)} does not match the pattern {pattern}")

    def _integer(self, value: int, shape: dict, path: str) -> None:
        self._bounds(value, shape, path, "")

    _long = _float = _double = _integer

    def _blob(self, value: Any, shape: dict, path: str) -> None:
        if isinstance(value, bytes | bytearray | str):
            size = len(value.encode()) if isinstance(value, str) else len(value)
            self._bounds(size, shape, path, "bytes")

    def _bounds(self, amount: float, shape: dict, path: str, unit: str) -> None:
        low, high = shape.get("min"), shape.get("max")
        what = f"{amount} {unit}".strip()
        if low is not None and amount < low:
            self.problem(path, f"{what} is below the minimum {low}")
        if high is not None and amount > high:
            self.problem(path, f"{what} is over the maximum {high}")


def _no_more_checks(value: Any, shape: dict, path: str) -> None:
    pass


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)  # True is an int to Python, not to AWS


def _is_timestamp(value: Any) -> bool:
    if isinstance(value, dt.datetime) or _is_int(value) or isinstance(value, float):
        return True
    if not isinstance(value, str):
        return False
    if contains_ref(value):
        return True
    text = value.strip()
    try:
        float(text)  # botocore accepts epoch seconds as text too
        return True
    except ValueError:
        pass
    try:
        dt.datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
        return True
    except ValueError:
        return False


_TYPE_OK = {
    "structure": lambda v: isinstance(v, Mapping),
    "map": lambda v: isinstance(v, Mapping),
    "list": lambda v: isinstance(v, list | tuple),
    "string": lambda v: isinstance(v, str),
    "integer": _is_int,
    "long": _is_int,
    "boolean": lambda v: isinstance(v, bool),
    "float": lambda v: _is_int(v) or isinstance(v, float | Decimal),
    "double": lambda v: _is_int(v) or isinstance(v, float | Decimal),
    "timestamp": _is_timestamp,
    "blob": lambda v: isinstance(v, bytes | bytearray | str) or hasattr(v, "read"),
}


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 70 else text[:60] + "..." + text[-6:]


def _did_you_mean(name: str, choices, list_all: bool = False) -> str:
    choices = list(choices)
    squashed = name.replace("_", "").replace("-", "").lower()
    close = [c for c in choices if c.replace("-", "").lower() == squashed]
    close = close or difflib.get_close_matches(name, choices, n=3, cutoff=0.6)
    if close:
        return f" (did you mean {' or '.join(repr(c) for c in close)}?)"
    if list_all and choices:
        shown = ", ".join(choices[:15]) + (", ..." if len(choices) > 15 else "")
        return f" (valid: {shown})"
    return ""


# --- Java patterns in Python --------------------------------------------------------------------------
#
# botocore patterns are Java regexes, matched by AWS against the whole value. Python's re lacks \p{...}
# classes and a few other Java spellings, which are rewritten here. \p classes are expanded only over ASCII
# plus the characters the checked value actually contains: membership of any other character cannot matter
# for this value, and expanding over all of Unicode costs ~170 ms.

_ASCII = [chr(c) for c in range(128)]
_POSIX = {  # Java's POSIX classes are ASCII-only by default
    "Lower": string.ascii_lowercase,
    "Upper": string.ascii_uppercase,
    "ASCII": "".join(_ASCII),
    "Alpha": string.ascii_letters,
    "Digit": string.digits,
    "Alnum": string.ascii_letters + string.digits,
    "Punct": string.punctuation,
    "Graph": string.digits + string.ascii_letters + string.punctuation,
    "Print": " " + string.digits + string.ascii_letters + string.punctuation,
    "Blank": " \t",
    "Cntrl": "".join(_ASCII[:32]) + "\x7f",
    "XDigit": string.hexdigits,
    "Space": " \t\n\x0b\f\r",
}
_CATEGORIES = set("LMNPSZC") | set(
    "Lu Ll Lt Lm Lo Mn Mc Me Nd Nl No Pc Pd Ps Pe Pi Pf Po Sm Sc Sk So Zs Zl Zp Cc Cf Cs Co Cn".split()
)
_QUANTIFIER = re.compile(r"\{\d+(,\d*)?\}")
_UNCOMPILABLE: dict[str, str] = {}


class _Untranslatable(ValueError):
    pass


def matches_pattern(pattern: str, value: str) -> bool | None:
    """Whether ``value`` fully matches botocore (Java) ``pattern``; None when Python cannot express it."""
    needs_chars = "\\p" in pattern or "\\P" in pattern
    extra = frozenset(c for c in value if ord(c) > 127) if needs_chars else frozenset()
    compiled = _compiled(pattern, extra)
    return None if compiled is None else compiled.fullmatch(value) is not None


def uncompilable_patterns() -> dict[str, str]:
    """Patterns met so far that were skipped because Python cannot express them, with the reason."""
    return dict(_UNCOMPILABLE)


@functools.lru_cache(maxsize=4096)
def _compiled(pattern: str, extra: frozenset[str]) -> re.Pattern | None:
    try:
        python = _to_python(pattern, extra)
        with warnings.catch_warnings():
            # a FutureWarning ("possible nested set") means Python reads the pattern differently from Java
            warnings.simplefilter("error")
            return re.compile(python, re.ASCII)  # Java's \d \w \s \b are ASCII-only
    except (re.error, _Untranslatable, FutureWarning, ValueError) as exc:
        _UNCOMPILABLE[pattern] = str(exc)
        return None


def _to_python(java: str, extra: frozenset[str]) -> str:
    out: list[str] = []
    in_class = False
    i, n = 0, len(java)
    while i < n:
        c = java[i]
        if c == "\\":
            e = java[i + 1 : i + 2]
            if e in ("p", "P"):
                name, i = _property_name(java, i + 2)
                chars = _class_chars(name, negate=e == "P", extra=extra)
                if in_class:
                    out.append(chars or _absent(extra))
                    i = _literal_dash(java, i, out)
                else:
                    out.append(f"[{chars}]" if chars else "(?!)")
                continue
            if e == "u":
                code, i = _utf16_escape(java, i)
                out.append(f"\\U{code:08X}")
                continue
            if e == "x" and java.startswith("{", i + 2):
                end = java.index("}", i)
                out.append(f"\\U{int(java[i + 3 : end], 16):08X}")
                i = end + 1
                continue
            if e == "Q":
                raise _Untranslatable("\\Q...\\E quoting is not translated")
            out.append("\\Z" if e == "z" else java[i : i + 2])
            i += 2
            if in_class and e and e in "wdsWDS":
                i = _literal_dash(java, i, out)
            continue
        if in_class:
            if c == "[" or java.startswith("&&", i):
                raise _Untranslatable("Java nested or intersected character classes")
            in_class = c != "]"
            if c in "|~":
                c = "\\" + c  # literal in a Java class; Python reserves "||" and "~~" for set operations
        elif c == "[":
            in_class = True
        elif c == "$" and _QUANTIFIER.match(java, i + 1):
            # Java lets a quantifier follow $; Python only allows it on a group
            out.append("(?:$)")
            i += 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _property_name(java: str, i: int) -> tuple[str, int]:
    if java.startswith("{", i):
        end = java.index("}", i)
        return java[i + 1 : end], end + 1
    return java[i : i + 1], i + 1


def _class_chars(name: str, negate: bool, extra: frozenset[str]) -> str:
    category = name[2:] if name.startswith("Is") else name
    if name in _POSIX:
        member = set(_POSIX[name]).__contains__
    elif category in _CATEGORIES:
        member = lambda ch: unicodedata.category(ch).startswith(category)  # noqa: E731
    else:
        raise _Untranslatable(f"unsupported Java property \\p{{{name}}}")
    chosen = [ch for ch in _ASCII + sorted(extra) if member(ch) != negate]
    return "".join(f"\\U{ord(ch):08X}" for ch in chosen)


def _absent(extra: frozenset[str]) -> str:
    # A class must not be empty; a code point the value does not contain keeps it non-empty yet inert.
    code = 0x10FFFD
    while chr(code) in extra:
        code -= 1
    return f"\\U{code:08X}"


def _literal_dash(java: str, i: int, out: list[str]) -> int:
    # Java reads "[\w-.]" as \w, '-', '.'; Python would try a range from \w and fail.
    if java.startswith("-", i) and not java.startswith("-]", i):
        out.append("\\-")
        return i + 1
    return i


def _utf16_escape(java: str, i: int) -> tuple[int, int]:
    code = int(java[i + 2 : i + 6], 16)
    # Java spells a code point above U+FFFF as a surrogate pair: \uD800\uDC00 is U+10000.
    if 0xD800 <= code <= 0xDBFF and java.startswith("\\u", i + 6):
        low = int(java[i + 8 : i + 12], 16)
        if 0xDC00 <= low <= 0xDFFF:
            return 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00), i + 12
    return code, i + 6
