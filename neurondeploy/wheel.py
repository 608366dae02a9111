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
import importlib.metadata
import io
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

from neurondeploy import __version__

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


def _package_files(package_dir: Path) -> list[tuple[str, bytes]]:
    files = []
    for path in sorted(package_dir.rglob("*")):
        relative = path.relative_to(package_dir.parent)
        if path.is_file() and not _SKIPPED.intersection(relative.parts) and path.suffix not in (".pyc", ".pyo"):
            files.append((relative.as_posix(), path.read_bytes()))
    return files


def _metadata(version: str, requires: list[str]) -> bytes:
    lines = ["Metadata-Version: 2.1", f"Name: {DISTRIBUTION}", f"Version: {version}", "Requires-Python: >=3.10"]
    lines += [f"Requires-Dist: {requirement}" for requirement in requires]
    return ("\n".join(lines) + "\n").encode()


def _entry_points() -> bytes:
    try:
        text = importlib.metadata.distribution(DISTRIBUTION).read_text("entry_points.txt")
    except importlib.metadata.PackageNotFoundError:
        text = None
    return (text or "[console_scripts]\nneurondeploy = neurondeploy.cli.main:main\n").encode()


def runtime_constraints(requires: list[str]) -> str:
    """``name==version`` for every installed runtime dependency, followed through their own requirements; extras
    and what is not installed here are left out (pip applies a constraint only to what it installs anyway)."""
    pinned: dict[str, str] = {}
    pending = [r for r in requires if "extra ==" not in r]
    while pending:
        match = _NAME.match(pending.pop())
        if not match:
            continue
        name = _normalise(match[1])
        if name in pinned or name in UNPINNED:
            continue
        try:
            distribution = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        pinned[name] = distribution.version
        pending += [r for r in distribution.requires or [] if "extra ==" not in r]
    return "".join(f"{name}=={version}\n" for name, version in sorted(pinned.items()))


@functools.lru_cache(maxsize=1)
def toolkit_wheel() -> ToolkitWheel:
    """The wheel of the neurondeploy imported here (built once per process)."""
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
