"""Whether a write fits, and the one line a full disk gets: the place, what is free, what is needed."""

from __future__ import annotations

import shutil
from pathlib import Path

from neurondeploy.errors import DiskFull, is_disk_full


def free_bytes(path: Path) -> int:
    """Free space for unprivileged writes on the device that holds ``path`` (or its nearest existing parent)."""
    existing = next((p for p in (path, *path.parents) if p.exists()), Path("/"))
    return shutil.disk_usage(existing).free


def size_text(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} GiB"


def disk_full(where: Path, needed: int | None, fix: str, *, at_least: bool = False) -> DiskFull:
    """The one-line error for a full disk at ``where``: ``needed`` bytes (``at_least``: what was written when it
    filled, so more than that)."""
    free = free_bytes(where)
    need = "more needed" if needed is None else f"{'more than ' if at_least else ''}{size_text(needed)} needed"
    error = DiskFull(f"no space left on the device of {where}: {size_text(free)} free, {need}", fix)
    error.needed = needed
    return error


def write_checked(path: Path, data: bytes, *, fix: str) -> None:
    """Write ``data`` to ``path`` when the device has room for it, else raise :class:`DiskFull` before writing (a
    write that fills the disk half-way leaves a truncated file); a write that fails for want of room all the same
    (another writer took it meanwhile) raises it too, with the partial file removed."""
    if free_bytes(path.parent) < len(data):
        raise disk_full(path, len(data), fix)
    try:
        path.write_bytes(data)
    except OSError as exc:
        if not is_disk_full(exc):
            raise
        path.unlink(missing_ok=True)
        raise disk_full(path, len(data), fix) from None
