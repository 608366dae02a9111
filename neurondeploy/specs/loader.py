"""YAML in, a validated spec out — or one ``SpecError`` per problem naming file:line, the field, and a fix.

YAML is composed into nodes first so every value keeps its line; pydantic errors are then mapped
back to the line of the field they name. Duplicate keys are errors (YAML silently keeps the last).
"""

from __future__ import annotations

import difflib
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, get_args, get_origin

import yaml
from pydantic import BaseModel, Field, ValidationError

from neurondeploy.errors import SpecError
from neurondeploy.specs.common import FieldIssue
from neurondeploy.specs.inference import InferenceSpec
from neurondeploy.specs.training import TrainingSpec
from neurondeploy.user_files import read_user_file

# Every spec is one of these, told apart by ``kind``; code that differs by kind or platform dispatches on
# ``(spec.kind, spec.platform)`` through a table, never by testing types along the way.
Spec = Annotated[InferenceSpec | TrainingSpec, Field(discriminator="kind")]
SPEC_KINDS: dict[str, type[BaseModel]] = {"inference": InferenceSpec, "training": TrainingSpec}
MAX_SPEC_BYTES = 1 << 20
# A spec is a few hundred values a few levels deep. Aliases can make a 1 KB file expand to billions of values
# ("billion laughs") or refer to themselves; both limits stop that before it costs memory or a RecursionError.
MAX_SPEC_VALUES = 20_000
MAX_SPEC_DEPTH = 32
MAX_INTEGER_DIGITS = 30  # larger than any count or size a spec holds; Python refuses str() of a 4300-digit int

Path_ = tuple[Any, ...]


@dataclass
class SourceMap:
    """Line (1-based) of every mapping key and value in a YAML document, by field path."""

    file: str
    lines: dict[Path_, int] = field(default_factory=dict)

    def line_of(self, path: Path_) -> int:
        # A missing or model-level field has no line of its own: use its nearest ancestor's.
        for end in range(len(path), -1, -1):
            if path[:end] in self.lines:
                return self.lines[path[:end]]
        return 1

    def where(self, path: Path_) -> str:
        return f"{self.file}:{self.line_of(path)}"


@dataclass
class LoadedSpec:
    """A validated spec with where it came from (for error lines, relative paths and plan staleness)."""

    spec: Spec
    source: SourceMap
    path: Path | None
    digest: str  # sha256 of the file's bytes: a saved plan records it to refuse being applied to a changed spec
    overrides: tuple[str, ...] = ()  # hyperparameters given on the command line (`train --hp`), not in the file

    @property
    def base_dir(self) -> Path:
        return self.path.parent if self.path else Path.cwd()


class _Builder:
    def __init__(self, source: SourceMap) -> None:
        self.source = source
        self.values = 0

    def build(self, node: yaml.Node, path: Path_) -> Any:
        self.values += 1
        if self.values > MAX_SPEC_VALUES or len(path) > MAX_SPEC_DEPTH:
            what = f"more than {MAX_SPEC_VALUES} values" if self.values > MAX_SPEC_VALUES else "nested too deep"
            raise SpecError(
                f"{self.source.file}:{node.start_mark.line + 1}: {_dotted(path)}: {what} (aliases that expand or "
                f"refer to themselves?)",
                f"a spec has at most {MAX_SPEC_VALUES} values, {MAX_SPEC_DEPTH} levels deep; write the values out",
            )
        self.source.lines.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            result: dict[Any, Any] = {}
            for key_node, value_node in node.value:
                key = self.build(key_node, path + ("<key>",))
                if not isinstance(key, (str, int, float, bool)) or isinstance(key, bool):
                    raise SpecError(
                        f"{self.source.file}:{key_node.start_mark.line + 1}: mapping keys must be plain names",
                        "write keys as words, e.g. `name: my-endpoint`",
                    )
                key = str(key)
                if key in result:
                    raise SpecError(
                        f"{self.source.file}:{key_node.start_mark.line + 1}: {_dotted(path + (key,))}: key given twice",
                        "keep one of the two entries",
                    )
                self.source.lines[path + (key,)] = key_node.start_mark.line + 1
                result[key] = self.build(value_node, path + (key,))
            return result
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, path + (index,)) for index, item in enumerate(node.value)]
        if node.tag == "tag:yaml.org,2002:int" and len(node.value.lstrip("+-")) > MAX_INTEGER_DIGITS:
            raise SpecError(
                f"{self.source.file}:{node.start_mark.line + 1}: {_dotted(path)}: a {len(node.value)}-digit number",
                "give a value of the size the field takes (see `neurondeploy schema`)",
            )
        return yaml.SafeLoader.construct_object(_CONSTRUCTOR, node, deep=True)


_CONSTRUCTOR = yaml.SafeLoader("")


def _dotted(path: Path_) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


# libyaml's parser where PyYAML was built with it (wheels are): 5-10x faster than the pure-Python one.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _parse_yaml(text: str, source: SourceMap) -> Any:
    try:
        nodes = list(yaml.compose_all(text, Loader=_LOADER))
    except RecursionError:  # the pure-Python composer recurses once per level: thousands of nested brackets
        raise SpecError(
            f"{source.file}: nested too deep to read", f"a spec is at most {MAX_SPEC_DEPTH} levels deep"
        ) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 1
        if "maximum nesting depth" in str(exc.problem):  # libyaml stops at 1000 levels, before composing
            raise SpecError(
                f"{source.file}:{line}: nested too deep (more than {MAX_SPEC_DEPTH} levels)",
                f"a spec is at most {MAX_SPEC_DEPTH} levels deep; write the values out",
            ) from None
        raise SpecError(
            f"{source.file}:{line}: not valid YAML: {exc.problem or exc.context}",
            "check indentation and quoting on that line",
        ) from None
    except yaml.YAMLError as exc:
        raise SpecError(
            f"{source.file}: not valid YAML: {' '.join(str(exc).split())}", "check the file is YAML text"
        ) from None
    nodes = [node for node in nodes if node is not None]
    if not nodes:
        raise SpecError(f"{source.file}: the spec is empty", "start from a file in templates/")
    if len(nodes) > 1:
        raise SpecError(
            f"{source.file}:{nodes[1].start_mark.line + 1}: more than one YAML document", "put one spec per file"
        )
    try:
        return _Builder(source).build(nodes[0], ())
    except yaml.YAMLError as exc:
        raise SpecError(
            f"{source.file}: not valid YAML: {' '.join(str(exc).split())}", "check the file's values"
        ) from None


def _model_at(model: type[BaseModel], path: Path_) -> type[BaseModel] | None:
    """The pydantic model class a field path points into (for 'did you mean' over its fields)."""
    current: Any = model
    for part in path:
        if isinstance(part, int) or current is None:
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        info = current.model_fields.get(part)
        if info is None:
            return None
        current = _first_model(info.annotation)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _first_model(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _first_model(arg)
        if found is not None:
            return found
    if get_origin(annotation) is dict:
        return None
    return None


def _field_description(model: type[BaseModel], path: Path_) -> str | None:
    parent = _model_at(model, path[:-1])
    if parent is None or not path or path[-1] not in parent.model_fields:
        return None
    return parent.model_fields[path[-1]].description


def _problem(model: type[BaseModel], error: dict[str, Any], source: SourceMap) -> SpecError:
    loc = tuple(part for part in error["loc"])
    kind = error["type"]
    original = (error.get("ctx") or {}).get("error")
    if isinstance(original, FieldIssue):
        loc = loc + tuple(original.field.split("."))
    where = source.where(loc)
    name = _dotted(loc)
    if kind == "extra_forbidden":
        parent = _model_at(model, loc[:-1])
        known = list(parent.model_fields) if parent else []
        close = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
        hint = (
            f"did you mean `{close[0]}`?"
            if close
            else (f"known fields here: {', '.join(known)}" if known else "remove it")
        )
        return SpecError(f"{where}: {name}: unknown field", hint)
    description = _field_description(model, loc)
    if kind == "missing":
        return SpecError(
            f"{where}: {name}: required field is missing",
            f"add `{loc[-1]}:`" + (f" — {description}" if description else ""),
        )
    message = str(original) if original is not None else error["msg"]
    if kind == "literal_error":
        message = f"{error.get('input')!r} is not allowed; {error['msg'][0].lower()}{error['msg'][1:]}"
    elif kind == "string_pattern_mismatch":
        message = f"{error.get('input')!r} has the wrong form"
    # Our own validators already say how to fix it; pydantic's generic messages get the field's description.
    if original is not None:
        hint = getattr(original, "fix", None)
    else:
        hint = description or "see `neurondeploy schema` for this field"
    return SpecError(f"{where}: {name}: {message}", hint)


class SpecErrors(SpecError):
    """Several problems in one spec; ``problems`` holds each as its own SpecError (one line each)."""

    def __init__(self, problems: list[SpecError]) -> None:
        first = problems[0]
        super().__init__(first.message, first.hint)
        self.problems = problems


def parse_spec(text: str | bytes, file: str = "<spec>", path: Path | None = None) -> LoadedSpec:
    """Validate spec text. Raises SpecError (SpecErrors for several problems)."""
    raw = text.encode() if isinstance(text, str) else text
    if len(raw) > MAX_SPEC_BYTES:
        raise SpecError(f"{file}: {len(raw)} bytes is too large for a spec", f"specs are under {MAX_SPEC_BYTES} bytes")
    try:
        decoded = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(
            f"{file}: not UTF-8 text (byte {exc.start})", "a spec is a YAML text file; check the path"
        ) from None
    if "\x00" in decoded:
        raise SpecError(f"{file}: contains NUL bytes, not a text file", "a spec is a YAML text file; check the path")
    source = SourceMap(file)
    data = _parse_yaml(decoded, source)
    if not isinstance(data, dict):
        raise SpecError(
            f"{file}:1: the spec must be a mapping of fields, found {type(data).__name__}",
            "start with `kind: inference` or `kind: training` and `name: ...`",
        )
    kind = data.get("kind")
    if not isinstance(kind, str) or kind not in SPEC_KINDS:
        close = difflib.get_close_matches(str(kind), list(SPEC_KINDS), n=1)
        hint = f"did you mean `kind: {close[0]}`?" if close else "set `kind: inference` or `kind: training`"
        found = "missing" if kind is None else f"{kind!r} is not a spec kind"
        raise SpecError(f"{source.where(('kind',))}: kind: {found}", hint)
    model = SPEC_KINDS[kind]
    try:
        spec = model.model_validate(data)
    except ValidationError as exc:
        problems = [_problem(model, error, source) for error in exc.errors(include_url=False)]
        raise SpecErrors(problems) from None
    return LoadedSpec(spec=spec, source=source, path=path, digest=hashlib.sha256(raw).hexdigest())


def load_spec(path: str | Path) -> LoadedSpec:
    """Read and validate a spec file."""
    path = Path(path)
    try:
        raw = read_user_file(
            path, max_bytes=MAX_SPEC_BYTES, what="a spec file", fix="give the path of a .yaml file", error=SpecError
        )
    except FileNotFoundError:
        raise SpecError(f"{path}: no such file", "check the path; templates/ has examples") from None
    return parse_spec(raw, file=str(path), path=path)
