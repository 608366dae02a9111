"""Directories packed for S3 (compiled artifacts, training source): reproducible archives and their digests."""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
from collections.abc import Mapping
from pathlib import Path

# Never part of an upload: caches, version control, and local runs' work directories.
SKIPPED_NAMES = frozenset({"__pycache__", ".git", ".neurondeploy", ".ipynb_checkpoints", ".pytest_cache"})


def packed_files(directory: Path) -> list[Path]:
    """The files an upload of ``directory`` holds, sorted (reproducible archives and digests)."""
    return sorted(
        p
        for p in directory.rglob("*")
        if p.is_file() and not SKIPPED_NAMES.intersection(p.relative_to(directory).parts) and p.suffix != ".pyc"
    )


def artifact_digest(directory: Path, generated: Mapping[str, bytes] | None = None) -> str:
    """sha256 over every file's path and contents: decides whether the object in S3 is current, without
    packing (compiled modules barely compress, and packing gigabytes takes far longer than hashing them).
    ``generated``: files written for the upload (relative path: contents) that are packed beside the directory's."""
    digest = hashlib.sha256()
    for name, path in _entries(directory, generated):
        file_digest = hashlib.sha256(generated[name]).hexdigest() if path is None else file_sha256(path)
        digest.update(f"{name}\0{file_digest}\0".encode())
    return digest.hexdigest()


def file_sha256(path: Path) -> str:
    """sha256 of a file's contents, read in 1 MiB chunks (artifacts run to gigabytes)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _entries(directory: Path, generated: Mapping[str, bytes] | None) -> list[tuple[str, Path | None]]:
    """(archive name, file or None for a generated one), sorted by name; a generated file takes its name's place."""
    generated = generated or {}
    entries = {p.relative_to(directory).as_posix(): p for p in packed_files(directory)}
    entries.update(dict.fromkeys(generated))
    return sorted(entries.items())


def _member(name: str, size: int) -> tarfile.TarInfo:
    """A regular file's header with nothing of this machine in it: no time, owner, group or permissions."""
    info = tarfile.TarInfo(name)
    info.size = size
    info.type, info.mode, info.mtime = tarfile.REGTYPE, 0o644, 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def pack_artifact(directory: Path, generated: Mapping[str, bytes] | None = None) -> bytes:
    """A reproducible .tar.gz of an artifact directory: same files, same bytes. Members sorted, headers without
    times or owners (:func:`_member`), a gzip header without a name or time. (The bytes also depend on this
    zlib's output; what decides an upload is :func:`artifact_digest`, which depends on the files alone.)
    Fastest gzip level: TorchScript modules are zip archives of weights that hardly compress further."""
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", fileobj=buffer, mode="wb", mtime=0, compresslevel=1) as compressed:
        with tarfile.open(fileobj=compressed, mode="w", format=tarfile.PAX_FORMAT) as archive:
            for name, path in _entries(directory, generated):
                if path is None:
                    archive.addfile(_member(name, len(generated[name])), io.BytesIO(generated[name]))
                    continue
                with path.open("rb") as handle:
                    archive.addfile(_member(name, path.stat().st_size), handle)
    return buffer.getvalue()
