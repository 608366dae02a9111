"""The exact build of this toolkit as a wheel, for the machines a deployment boots (EC2 instances, the SageMaker
container): what runs there is what ran here, not whatever an index serves under the same version number (and
`neurondeploy` is not on PyPI at all).

The wheel is built from the installed package itself (editable or not: the files Python imports), so no build
backend, network or source checkout is needed, and it is reproducible: sorted entries, fixed times and modes, so the
same files give the same bytes and the same sha256, which names its S3 object. Beside it, a pip constraints file with
the exact versions of the runtime dependencies installed here (their closure, torch excluded: on a Neuron host torch
is the SDK's own).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import io
import json
import os
import re
import sys
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from neurondeploy import __version__
from neurondeploy.paths import default_cache_dir

DISTRIBUTION = "neurondeploy"
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)  # the zip format's earliest date: no clock in the bytes
_SKIPPED = frozenset({"__pycache__"})
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
# Never pinned for a Neuron host: the Neuron SDK brings its own builds of these.
UNPINNED = frozenset({"torch", "torch-neuronx", "torch-xla", "neuronx-cc", "libneuronxla"})


@dataclass(frozen=True)
class ToolkitWheel:
    filename: str  # PEP 427 name: pip refuses a wheel file named otherwise
    data: bytes
    sha256: str
    constraints: str  # pip -c file: name==version per line

    @property
    def constraints_sha256(self) -> str:
        return hashlib.sha256(self.constraints.encode()).hexdigest()


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _package_paths(package_dir: Path) -> list[tuple[str, Path]]:
    paths = []
    for path in sorted(package_dir.rglob("*")):
        relative = path.relative_to(package_dir.parent)
        if path.is_file() and not _SKIPPED.intersection(relative.parts) and path.suffix not in (".pyc", ".pyo"):
            paths.append((relative.as_posix(), path))
    return paths


def _package_files(package_dir: Path) -> list[tuple[str, bytes]]:
    return [(name, path.read_bytes()) for name, path in _package_paths(package_dir)]


def _metadata(version: str, requires: list[str]) -> bytes:
    lines = ["Metadata-Version: 2.1", f"Name: {DISTRIBUTION}", f"Version: {version}", "Requires-Python: >=3.10"]
    lines += [f"Requires-Dist: {requirement}" for requirement in requires]
    return ("\n".join(lines) + "\n").encode()


def _entry_points() -> bytes:
    import importlib.metadata  # deferred: a plan that reads the wheel's record never builds it

    try:
        text = importlib.metadata.distribution(DISTRIBUTION).read_text("entry_points.txt")
    except importlib.metadata.PackageNotFoundError:
        text = None
    return (text or "[console_scripts]\nneurondeploy = neurondeploy.cli.main:main\n").encode()


def runtime_constraints(requires: list[str]) -> str:
    """``name==version`` for every installed runtime dependency, followed through their own requirements; extras
    and what is not installed here are left out (pip applies a constraint only to what it installs anyway)."""
    pinned = installed_requirements(requires, skip=UNPINNED)
    return "".join(f"{name}=={version}\n" for name, version in sorted(pinned.items()))


def installed_requirements(requires: Iterable[str], skip: frozenset[str] = frozenset()) -> dict[str, str]:
    """name -> version of every distribution installed here that ``requires`` (requirement strings or names)
    names, followed through their own requirements (extras left out; ``skip`` and what is not installed, too)."""
    import importlib.metadata

    found: dict[str, str] = {}
    pending = [r for r in requires if "extra ==" not in r]
    while pending:
        match = _NAME.match(pending.pop())
        if not match:
            continue
        name = _normalise(match[1])
        if name in found or name in skip:
            continue
        try:
            distribution = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        found[name] = distribution.version
        pending += [r for r in distribution.requires or [] if "extra ==" not in r]
    return found


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


def version_admits(specifier: str | None, version: str) -> bool:
    """Whether a PEP 440 specifier set (a distribution's ``Requires-Python`` such as ">=3.8,!=3.0.*", or a
    requirement's ">=4.44,<5") admits ``version`` ("3.10.12"), as pip decides which versions it may install. The
    clauses those use (comparisons, ``==X.Y.*``/``!=X.Y.*`` and ``~=``) over release numbers only: bare
    installs have no ``packaging``."""
    have = _release(version)
    for clause in filter(None, (c.strip() for c in (specifier or "").split(","))):
        match = re.fullmatch(r"(~=|==|!=|<=|>=|<|>)\s*([\d.]+)(\.\*)?", clause)
        if not match:
            continue  # not a release clause (pre-release or local segments): pip's reading is not ours to guess
        op, version, wildcard = match.groups()
        want = _release(version)
        if wildcard:  # ==3.10.*: the same leading numbers
            same = have[: len(want)] == want
            if (op == "==") != same:
                return False
            continue
        width = max(len(have), len(want))
        a, b = have + (0,) * (width - len(have)), want + (0,) * (width - len(want))
        ok = {
            ">=": a >= b,
            ">": a > b,
            "<=": a <= b,
            "<": a < b,
            "==": a == b,
            "!=": a != b,
            "~=": a >= b and have[: len(want) - 1] == want[: len(want) - 1],
        }[op]
        if not ok:
            return False
    return True


def held_names(held: Iterable[str]) -> set[str]:
    """The packages a target has: each of ``held`` ("name" or "name<spec>") and, where the version installed here
    is one the spec admits, what it requires as installed here (another version's requirements may differ)."""
    names: set[str] = set()
    for requirement in held:
        match = _NAME.match(requirement)
        if not match:
            continue
        name, spec = _normalise(match[1]), requirement[match.end() :].strip()
        names.add(name)
        here = installed_requirements([name])
        if name in here and version_admits(spec, here[name]):
            names |= set(here)
    return names


@dataclass(frozen=True)
class TargetConstraints:
    """This machine's pins as a target can take them."""

    text: str  # the pip -c file
    unfit: tuple[str, ...]  # "name==version (Python <spec>)": pins the target's Python cannot install
    held: tuple[str, ...]  # "name==version": pins of packages the target already has, left as they are there


def constraints_for(constraints: str, python: str, held: Iterable[str] = ()) -> TargetConstraints:
    """``constraints`` (this machine's pins) for a target running ``python`` that already has the packages ``held``
    names ("name" or "name<spec>"): without the pins of those (the target's own versions stay as they are where
    they satisfy the toolkit's ranges: pip upgrades nothing that does) nor the pins that Python cannot install
    (their Requires-Python, read from the distribution installed here, excludes it). pip on the target picks
    versions for those it does install, within the toolkit's own ranges (its Requires-Dist)."""
    import importlib.metadata

    holding = held_names(held)
    kept, unfit, kept_as_is = [], [], []
    for line in constraints.splitlines():
        name, _, version = line.partition("==")
        if _normalise(name) in holding:
            kept_as_is.append(line)
            continue
        try:
            requires_python = importlib.metadata.metadata(name)["Requires-Python"]
        except importlib.metadata.PackageNotFoundError:
            requires_python = None
        if version_admits(requires_python, python):
            kept.append(line)
        else:
            unfit.append(f"{name}=={version} (Python {requires_python})")
    return TargetConstraints("".join(f"{line}\n" for line in kept), tuple(unfit), tuple(kept_as_is))


@functools.lru_cache(maxsize=1)
def toolkit_wheel() -> ToolkitWheel:
    """The wheel of the neurondeploy imported here (built once per process)."""
    import importlib.metadata

    version = __version__
    try:
        requires = importlib.metadata.requires(DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        requires = []
    dist_info = f"{DISTRIBUTION}-{version}.dist-info"
    entries = _package_files(Path(__file__).resolve().parent)
    entries += [
        (f"{dist_info}/METADATA", _metadata(version, requires)),
        (
            f"{dist_info}/WHEEL",
            b"Wheel-Version: 1.0\nGenerator: neurondeploy\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        ),
        (f"{dist_info}/entry_points.txt", _entry_points()),
    ]
    record = "".join(f"{name},{_record_hash(data)},{len(data)}\n" for name, data in entries)
    entries.append((f"{dist_info}/RECORD", (record + f"{dist_info}/RECORD,,\n").encode()))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries:
            info = zipfile.ZipInfo(name, date_time=_FIXED_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, data)
    data = buffer.getvalue()
    return ToolkitWheel(
        f"{DISTRIBUTION}-{version}-py3-none-any.whl",
        data,
        hashlib.sha256(data).hexdigest(),
        runtime_constraints(requires),
    )


@dataclass(frozen=True)
class ToolkitIdentity:
    """What names and checks the wheel (what a plan's user data carries), without its bytes."""

    filename: str
    sha256: str
    constraints: str

    @property
    def constraints_sha256(self) -> str:
        return hashlib.sha256(self.constraints.encode()).hexdigest()


def _identity_key() -> str:
    """Changes whenever the wheel could: a package file's size or time, or what is installed (a sys.path folder's
    time moves when pip adds or removes a distribution, which is what the constraints list)."""
    digest = hashlib.sha256(f"{DISTRIBUTION}|{__version__}".encode())
    for name, path in _package_paths(Path(__file__).resolve().parent):
        stat = path.stat()
        digest.update(f"|{name}|{stat.st_size}|{stat.st_mtime_ns}".encode())
    for entry in sys.path:
        try:
            digest.update(f"|{entry}|{os.stat(entry or '.').st_mtime_ns}".encode())
        except OSError:
            continue
    return digest.hexdigest()[:32]


def toolkit_identity() -> ToolkitIdentity:
    """The name, sha256 and constraints :func:`toolkit_wheel` gives, read from this machine's cache when the same
    files were built before: a plan needs them for the user data, and building the wheel costs ~0.1-0.2 s of the
    0.35 s a plan may take. apply builds the wheel it uploads and checks it against these."""
    if toolkit_wheel.cache_info().currsize:  # built in this process already: that is the truth
        wheel = toolkit_wheel()
        return ToolkitIdentity(wheel.filename, wheel.sha256, wheel.constraints)
    record = default_cache_dir() / "toolkit-wheel" / f"{_identity_key()}.json"
    try:
        return ToolkitIdentity(**json.loads(record.read_text()))
    except (OSError, ValueError, TypeError):
        pass
    wheel = toolkit_wheel()
    identity = ToolkitIdentity(wheel.filename, wheel.sha256, wheel.constraints)
    try:  # a cache: a read-only home costs speed, never a plan
        record.parent.mkdir(parents=True, exist_ok=True)
        partial = record.with_name(f"{record.name}.{os.getpid()}.tmp")
        partial.write_text(json.dumps(identity.__dict__))
        os.replace(partial, record)
    except OSError:
        pass
    return identity
