"""An exclusive, inter-process file lock (``fcntl.flock``) with a timeout.

The kernel releases a ``flock`` when the holding process exits for any reason (SIGKILL included), so a crashed
compile never leaves the cache locked. The lock conflicts between any two open file descriptions, so it also
serialises threads of one process that each use their own :class:`FileLock`.

Lock files may be deleted (``prune`` does, while holding them): after locking, the holder checks that the path
still names the inode it locked and starts over if not, so a waiter never ends up holding a deleted lock file.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import time
from pathlib import Path

from neurondeploy.errors import CacheError

_POLL_START_S = 0.005
_POLL_MAX_S = 0.1


class FileLock:
    """``with FileLock(path, timeout_s=60): ...`` holds an exclusive lock on ``path`` (created if missing)."""

    def __init__(self, path: Path | str, timeout_s: float = 3600.0, *, purpose: str = "the cache lock") -> None:
        self.path = Path(path)
        self.timeout_s = timeout_s
        self.purpose = purpose
        self._fd: int | None = None

    def try_acquire(self) -> bool:
        """Take the lock if it is free right now; never waits."""
        if self._fd is not None:
            raise RuntimeError(f"{self.path} is already held by this FileLock")
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    return False
                raise
            if self._still_linked(fd):
                self._fd = fd
                self._write_holder()
                return True
            os.close(fd)  # deleted by prune between our open and our flock: lock the new file instead

    def acquire(self) -> None:
        """Wait up to ``timeout_s`` for the lock; raise :class:`CacheError` naming the lock file on timeout."""
        deadline = time.monotonic() + self.timeout_s
        delay = _POLL_START_S
        while not self.try_acquire():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                holder = self._read_holder()
                raise CacheError(
                    f"timed out after {self.timeout_s:g} s waiting for {self.purpose} {self.path}"
                    + (f" (held by {holder})" if holder else ""),
                    "another process is building the same cache entry; wait for it to finish or raise the lock "
                    "timeout. The OS frees the lock when its holder exits, so a lock that never frees means that "
                    "process is still running",
                )
            time.sleep(min(delay, remaining))
            delay = min(delay * 2, _POLL_MAX_S)

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def unlink_and_release(self) -> None:
        """Delete the lock file while still holding it (waiters notice and re-create it), then release."""
        if self._fd is None:
            raise RuntimeError(f"{self.path} is not held")
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        self.release()

    def __enter__(self) -> FileLock:  # noqa: PYI034
        self.acquire()
        return self

    def __exit__(self, *exc_info) -> None:
        self.release()

    def _still_linked(self, fd: int) -> bool:
        try:
            on_disk = os.stat(self.path)
        except FileNotFoundError:
            return False
        mine = os.fstat(fd)
        return (on_disk.st_dev, on_disk.st_ino) == (mine.st_dev, mine.st_ino)

    def _write_holder(self) -> None:
        assert self._fd is not None
        try:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        except OSError:
            pass  # the holder note is only for error messages

    def _read_holder(self) -> str:
        try:
            return self.path.read_text(errors="replace").strip()
        except OSError:
            return ""
