"""Content-addressed cache of compiled artifacts: local directory, optionally shared through an S3 prefix.

Key: ``cache_key(parts)`` = sha256 of the canonical JSON of everything that decides the compiled bytes (model
digest, bucket shapes and dtypes, compiler args, backend, target, compiler version).

Local layout under ``root`` (``default_cache_dir()`` unless given)::

    entries/<key>/...files the build wrote...   committed entries only (renamed in whole from tmp/)
    entries/<key>/entry.json                    the record: every file's sha256 and size, metadata, created
    locks/<key>.lock                            one flock per key: one build of a key at a time, across processes
    tmp/<key>.<pid>.<random>/                   builds and S3 downloads in progress
    tmp/del.<key>.<random>/                     entries being deleted (renamed out of entries/ first)

Guarantees:

* A build that raises stores nothing (no poisoned cache); a build killed half-way leaves only a temp dir, which
  the next build of that key (or ``prune``) removes. The record is written last and the whole directory is renamed
  into ``entries/`` in one atomic step, so a reader sees a complete entry or none.
* Two builds of one key at once: the second waits on the key's lock, then finds the first one's entry.
* Every ``get`` checks the record and every file's size, and hashes every file that is not exactly as it was
  committed (see ``STAMP_NS``); a corrupt or incomplete entry is removed (with a :class:`CacheWarning`) and
  rebuilt by the next ``get_or_build``. ``verify()`` hashes everything, for damage that keeps file metadata.
* S3 (``s3://bucket/prefix``): ``<prefix>/<key>/<file>`` for each file, then ``<prefix>/<key>/entry.json`` last,
  so an interrupted upload is never an entry. Downloads are verified against the record before use. S3 problems
  (unreachable, denied) warn and fall back to building: the shared cache speeds a compile up, it never fails one.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from neurondeploy.aws.errors import is_s3_missing, is_s3_missing_object
from neurondeploy.aws.paging import Paged
from neurondeploy.aws.transport import AwsCallError, AwsTransport, Transfer, default_region
from neurondeploy.compiler.disk_space import disk_full
from neurondeploy.compiler.locking import FileLock
from neurondeploy.errors import CacheError, DiskFull, NeurondeployWarning, is_disk_full
from neurondeploy.paths import default_cache_dir, file_in_the_way

RECORD_FILE = "entry.json"
RECORD_FORMAT = 1
MIN_PREFIX_LEN = 6
_KEY_RE = re.compile(r"^[0-9a-f]{64}$")
_HEX_RE = re.compile(r"^[0-9a-f]+$")
_SHA_RE = re.compile(r"^[0-9a-f]{64}$")
_CHUNK = 1 << 20
CACHE_FULL_FIX = "free space there, or set NEURONDEPLOY_CACHE_DIR to a directory on a larger disk"


class CacheWarning(NeurondeployWarning):
    """Something in the cache was wrong and was worked around: a corrupt entry removed, S3 unreachable, ..."""


class _Corrupt(Exception):
    """An entry (local or in S3) that does not match its record, or whose record is unreadable."""


def cache_key(parts: Mapping[str, Any]) -> str:
    """sha256 (hex) of the canonical JSON of ``parts``: independent of dict ordering, changes with any value."""
    try:
        canonical = json.dumps(parts, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise CacheError(
            f"cache key parts are not plain JSON data: {exc}",
            "pass str/int/float/bool/None, lists and dicts with string keys",
        ) from exc
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


@dataclass(frozen=True)
class CacheEntry:
    key: str
    path: Path  # the entry directory: the build's files (and entry.json)
    created: float  # epoch seconds, when the build finished
    size_bytes: int  # sum of the build's files (entry.json not counted)
    metadata: dict  # what the build returned
    last_used: float  # epoch seconds, last get() hit (the entry directory's mtime)
    files: dict = field(default_factory=dict, compare=False)  # relative posix path -> sha256, as verified


@dataclass(frozen=True)
class CacheResult:
    entry: CacheEntry
    hit: bool
    source: str  # "local" | "s3" | "built"


class CompileCache:
    def __init__(
        self, root: Path | str | None = None, s3_uri: str | None = None, s3_client=None, lock_timeout_s: float = 3600
    ) -> None:
        self.root = Path(root).expanduser() if root is not None else default_cache_dir()
        blocker = file_in_the_way(self.root)
        if blocker is not None:
            raise CacheError(
                f"the compile cache {self.root} cannot be used: {blocker} is a file, not a directory",
                "set NEURONDEPLOY_CACHE_DIR (or --cache-dir) to a directory",
            )
        self.lock_timeout_s = lock_timeout_s
        self.s3_uri = s3_uri
        self._s3 = _S3Store(s3_uri, s3_client) if s3_uri else None

    # ---------------------------------------------------------------- layout
    @property
    def entries_dir(self) -> Path:
        return self.root / "entries"

    @property
    def locks_dir(self) -> Path:
        return self.root / "locks"

    @property
    def tmp_dir(self) -> Path:
        return self.root / "tmp"

    def lock_path(self, key: str) -> Path:
        return self.locks_dir / f"{key}.lock"

    def _lock(self, key: str) -> FileLock:
        return FileLock(self.lock_path(key), self.lock_timeout_s, purpose=f"the cache lock of entry {key[:12]}")

    def _ensure_dirs(self) -> None:
        for directory in (self.entries_dir, self.locks_dir, self.tmp_dir):
            directory.mkdir(parents=True, exist_ok=True)

    # ---------------------------------------------------------------- lookups
    def s3_record(self, key: str) -> dict | None:
        """The record (``entry.json``) of entry ``key`` in the S3 cache, read without downloading the entry; None if
        S3 has none, or no bucket yet. For entries too large to fetch here (an exported LLM)."""
        if self._s3 is None:
            return None
        return self._s3.record(_check_key(key))

    def get(self, key: str) -> CacheEntry | None:
        """The verified local entry of ``key`` (its last_used touched), or None. A corrupt entry is removed."""
        return self._get(_check_key(key), locked=False)

    def _get(self, key: str, *, locked: bool, deep: bool = False) -> CacheEntry | None:
        directory = self.entries_dir / key
        if not directory.is_dir():
            return None
        try:
            record = _verify_local(key, directory, deep=deep)
        except _Corrupt as problem:
            self._drop_corrupt(key, directory, str(problem), locked=locked, deep=deep)
            return None
        try:
            os.utime(directory)
        except OSError:
            pass  # read-only cache: still usable, LRU order just does not move
        return _entry(key, directory, record)

    def _drop_corrupt(self, key: str, directory: Path, problem: str, *, locked: bool, deep: bool = False) -> None:
        if locked:
            self._discard(directory)
            warnings.warn(
                f"cache entry {key[:12]} is corrupt ({problem}); removed, it will be rebuilt",
                CacheWarning,
                stacklevel=4,
            )
            return
        lock = self._lock(key)
        try:
            acquired = lock.try_acquire()
        except OSError:
            acquired = False  # no locks dir (read-only or half-made root): leave it to get_or_build
        if not acquired:  # a build of this key is running; it re-checks under the lock and replaces the entry
            warnings.warn(f"cache entry {key[:12]} is corrupt ({problem}); ignored", CacheWarning, stacklevel=4)
            return
        try:
            try:
                _verify_local(key, directory, deep=deep)  # someone may have replaced it between our check and the lock
                return
            except _Corrupt:
                self._discard(directory)
        finally:
            lock.release()
        warnings.warn(
            f"cache entry {key[:12]} is corrupt ({problem}); removed, it will be rebuilt", CacheWarning, stacklevel=4
        )

    def get_or_build(
        self, key: str, build: Callable[[Path], Mapping[str, Any] | None], *, deep: bool = False
    ) -> CacheResult:
        """A verified entry of ``key``: local hit, else (under the key's lock) S3 hit, else ``build(tmpdir)``.

        ``build`` writes its files into the directory it is given and returns JSON-able metadata. If it raises,
        nothing is stored and the exception propagates. ``deep``: a local hit is hashed in full, not trusted for
        its stamp (what goes into an artifact: bit rot keeps size and stamp); a rotten one is rebuilt.
        """
        key = _check_key(key)
        entry = self._get(key, locked=False, deep=deep)
        if entry is not None:
            return CacheResult(entry, True, "local")
        self._ensure_dirs()
        with self._lock(key):
            entry = self._get(key, locked=True, deep=deep)  # built by another process while we waited
            if entry is not None:
                return CacheResult(entry, True, "local")
            self._clean_tmp_of(key)  # we hold the key's lock: every temp dir of this key is a dead one's
            if self._s3 is not None:
                entry = self._fetch_s3(key)
                if entry is not None:
                    return CacheResult(entry, True, "s3")
            entry = self._build(key, build)
            if self._s3 is not None:
                self._push_s3(entry)
            return CacheResult(entry, False, "built")

    def _new_tmp(self, key: str) -> Path:
        path = self.tmp_dir / f"{key}.{os.getpid()}.{secrets.token_hex(4)}"
        path.mkdir()
        return path

    def _build(self, key: str, build: Callable[[Path], Mapping[str, Any] | None]) -> CacheEntry:
        staging = self._new_tmp(key)
        try:
            metadata = build(staging)
            if metadata is None:
                metadata = {}
            if not isinstance(metadata, Mapping):
                raise CacheError(
                    f"the build of cache entry {key[:12]} returned {type(metadata).__name__}, "
                    "not a mapping of metadata",
                    "return a dict (or None)",
                )
            files = _scan_build_output(staging)
            record = {
                "format": RECORD_FORMAT,
                "key": key,
                "created": time.time(),
                "metadata": dict(metadata),
                "files": files,
            }
            try:
                raw = json.dumps(record, sort_keys=True, indent=1, allow_nan=False).encode()
            except (TypeError, ValueError) as exc:
                raise CacheError(
                    f"the build of cache entry {key[:12]} returned metadata that is not JSON: {exc}",
                    "return str/int/float/bool/None, lists and dicts",
                ) from exc
            _write_durably(staging / RECORD_FILE, raw)  # the record last: before it, this is no entry
            _fsync_dir(staging)
            self._commit(key, staging, files)
        except BaseException as exc:
            full = isinstance(exc, DiskFull) or is_disk_full(exc)  # said of the cache, not of a file in it
            needed = getattr(exc, "needed", None)
            # Of a write of unknown size, what the build had written when the disk filled: more is needed.
            written = sum(path.stat().st_size for path in staging.rglob("*") if path.is_file()) if full else 0
            shutil.rmtree(staging, ignore_errors=True)
            if full:
                raise disk_full(self.root, needed or written, CACHE_FULL_FIX, at_least=needed is None) from None
            raise
        return _entry(key, self.entries_dir / key, record)

    def _commit(self, key: str, staging: Path, files: Mapping[str, Any]) -> None:
        for rel in files:  # read-only: a hard link to an entry file (artifact dirs use them) cannot edit the entry
            os.chmod(staging / rel, 0o444)
            os.utime(staging / rel, ns=(STAMP_NS, STAMP_NS))
        final = self.entries_dir / key
        if final.exists():  # a corrupt leftover we could not remove before: move it aside
            self._discard(final)
        os.rename(staging, final)  # atomic on one filesystem; tmp/ and entries/ share root
        _fsync_dir(self.entries_dir)
        os.utime(final)

    def _discard(self, directory: Path) -> bool:
        """Remove an entry directory: rename it out of entries/ (atomic), then delete it."""
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        trash = self.tmp_dir / f"del.{directory.name}.{secrets.token_hex(4)}"
        try:
            os.rename(directory, trash)
        except FileNotFoundError:
            return False
        shutil.rmtree(trash, ignore_errors=True)
        return True

    def _clean_tmp_of(self, key: str) -> None:
        for path in self.tmp_dir.glob(f"{key}.*"):
            shutil.rmtree(path, ignore_errors=True)

    # ---------------------------------------------------------------- S3
    def _fetch_s3(self, key: str) -> CacheEntry | None:
        assert self._s3 is not None
        staging = self._new_tmp(key)
        try:
            try:
                record = self._s3.fetch(key, staging)
            except _Corrupt as problem:
                warnings.warn(
                    f"cache entry {key[:12]} in {self.s3_uri} is corrupt ({problem}); rebuilding it",
                    CacheWarning,
                    stacklevel=3,
                )
                self._s3.forget(key)
                record = None
            except Exception as exc:  # S3 is an accelerator: never fail a compile on it
                if not _is_aws_error(exc):
                    raise
                warnings.warn(
                    f"cache entry {key[:12]}: cannot read {self.s3_uri} ({exc}); taken as not cached",
                    CacheWarning,
                    stacklevel=3,
                )
                record = None
            if record is None:
                shutil.rmtree(staging, ignore_errors=True)
                return None
            _write_durably(staging / RECORD_FILE, json.dumps(record, sort_keys=True, indent=1).encode())
            _fsync_dir(staging)
            self._commit(key, staging, record["files"])
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return _entry(key, self.entries_dir / key, record)

    def _push_s3(self, entry: CacheEntry) -> None:
        assert self._s3 is not None
        try:
            self._s3.push(entry.key, entry.path)
        except Exception as exc:
            if not _is_aws_error(exc):
                raise
            warnings.warn(
                f"cache entry {entry.key[:12]} built but not shared: cannot write {self.s3_uri} ({exc})",
                CacheWarning,
                stacklevel=3,
            )

    # ---------------------------------------------------------------- management
    def verify(self) -> tuple[list[str], list[str]]:
        """Hash every file of every local entry against its record; remove corrupt entries.
        Returns (verified keys, removed keys)."""
        verified, removed = [], []
        for key, directory in self._entry_dirs():
            try:
                _verify_local(key, directory, deep=True)
                verified.append(key)
            except _Corrupt as problem:
                self._drop_corrupt(key, directory, str(problem), locked=False, deep=True)
                removed.append(key)
        return verified, removed

    def ls(self) -> list[CacheEntry]:
        """Committed local entries, newest first (records are read, files are not hashed)."""
        found = []
        for key, directory in self._entry_dirs():
            try:
                record = _parse_record((directory / RECORD_FILE).read_bytes(), key)
            except (OSError, _Corrupt):
                continue
            found.append(_entry(key, directory, record))
        return sorted(found, key=lambda entry: (entry.created, entry.key), reverse=True)

    def remove(self, key_or_prefix: str, *, remote: bool = False) -> list[str]:
        """Remove the entries whose key starts with ``key_or_prefix`` (≥ 6 hex characters); return their keys.

        With ``remote=True`` and an S3 prefix, remove them from S3 too (record first, so nobody reads half).
        """
        prefix = key_or_prefix.strip().lower()
        if not _HEX_RE.match(prefix) or len(prefix) > 64:
            raise CacheError(f"{key_or_prefix!r} is not a cache key or key prefix", "keys are hex, see `cache ls`")
        if len(prefix) < MIN_PREFIX_LEN:
            raise CacheError(
                f"key prefix {key_or_prefix!r} is too short to remove by",
                f"give at least {MIN_PREFIX_LEN} hex characters of the key (see `cache ls`)",
            )
        removed = {key for key, directory in self._entry_dirs() if key.startswith(prefix) and self._discard(directory)}
        if remote and self._s3 is not None:
            removed |= set(self._s3.remove_prefix(prefix))
        if not removed:
            where = f"{self.root}" + (f" or {self.s3_uri}" if remote and self._s3 is not None else "")
            raise CacheError(f"no cache entry matches {key_or_prefix!r} in {where}", "see `neurondeploy cache ls`")
        return sorted(removed)

    def prune(self, *, older_than_s: float | None = None, max_bytes: int | None = None) -> list[str]:
        """Drop entries unused for ``older_than_s``, then least recently used ones until the total ≤ ``max_bytes``.

        Also removes dead temp dirs, unreadable entries and unused lock files. Returns the removed keys.
        """
        removed: list[str] = []
        self._prune_tmp()
        now = time.time()
        alive: list[CacheEntry] = []
        for key, directory in self._entry_dirs():
            try:
                record = _parse_record((directory / RECORD_FILE).read_bytes(), key)
            except (OSError, _Corrupt):
                if self._discard(directory):
                    removed.append(key)
                continue
            alive.append(_entry(key, directory, record))
        if older_than_s is not None:
            for entry in [e for e in alive if now - e.last_used > older_than_s]:
                if self._discard(entry.path):
                    removed.append(entry.key)
                alive.remove(entry)
        if max_bytes is not None:
            alive.sort(key=lambda e: (e.last_used, e.created))  # least recently used first
            total = sum(entry.size_bytes for entry in alive)
            while alive and total > max_bytes:
                entry = alive.pop(0)
                if self._discard(entry.path):
                    removed.append(entry.key)
                total -= entry.size_bytes
        self._prune_locks()
        return removed

    def _entry_dirs(self) -> list[tuple[str, Path]]:
        try:
            children = list(self.entries_dir.iterdir())
        except FileNotFoundError:
            return []
        return [(child.name, child) for child in children if _KEY_RE.match(child.name) and child.is_dir()]

    def _prune_tmp(self) -> None:
        try:
            children = list(self.tmp_dir.iterdir())
        except FileNotFoundError:
            return
        by_key: dict[str, list[Path]] = {}
        for child in children:
            if child.name.startswith("del."):
                shutil.rmtree(child, ignore_errors=True)  # a deletion that was interrupted
            elif _KEY_RE.match(child.name.split(".", 1)[0]):
                by_key.setdefault(child.name.split(".", 1)[0], []).append(child)
        for key, paths in by_key.items():
            self.locks_dir.mkdir(parents=True, exist_ok=True)
            lock = self._lock(key)
            if lock.try_acquire():  # no build of this key running: its temp dirs are dead
                try:
                    for path in paths:
                        shutil.rmtree(path, ignore_errors=True)
                finally:
                    lock.release()

    def _prune_locks(self) -> None:
        try:
            lock_files = list(self.locks_dir.glob("*.lock"))
        except FileNotFoundError:
            return
        for path in lock_files:
            lock = FileLock(path, 0)
            try:
                if lock.try_acquire():
                    lock.unlink_and_release()
            except FileNotFoundError:
                pass


# -------------------------------------------------------------------- records and files
# Committed files get this fixed, long-past modification time once their sha256 is verified. Any later write
# (or a replacement file) gets the current time instead, so a file still carrying the stamp is the verified one
# and a warm lookup need not re-hash gigabytes; a file without it is hashed in full. ``verify()`` always hashes,
# for damage that bypasses the filesystem (bit rot).
STAMP_NS = 1_000_000_000 * 10**9  # 2001-09-09T01:46:40Z


def _check_key(key: str) -> str:
    if not isinstance(key, str) or not _KEY_RE.match(key):
        raise CacheError(f"{key!r} is not a cache key", "make keys with neurondeploy.compiler.cache.cache_key()")
    return key


def _entry(key: str, directory: Path, record: Mapping[str, Any]) -> CacheEntry:
    try:
        last_used = directory.stat().st_mtime
    except OSError:
        last_used = float(record["created"])
    files = record["files"]
    return CacheEntry(
        key=key,
        path=directory,
        created=float(record["created"]),
        size_bytes=sum(info["size"] for info in files.values()),
        metadata=dict(record["metadata"]),
        last_used=last_used,
        files={rel: info["sha256"] for rel, info in files.items()},
    )


def _parse_record(raw: bytes, key: str) -> dict:
    """The record of entry ``key``, checked for shape and safe paths; raises _Corrupt."""
    try:
        record = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _Corrupt(f"unreadable {RECORD_FILE}: {exc}") from None
    if not isinstance(record, dict) or record.get("format") != RECORD_FORMAT:
        raise _Corrupt(f"{RECORD_FILE} is not a format-{RECORD_FORMAT} record")
    if record.get("key") != key:
        raise _Corrupt(f"{RECORD_FILE} belongs to key {str(record.get('key'))[:12]}")
    files, metadata, created = record.get("files"), record.get("metadata"), record.get("created")
    if not isinstance(files, dict) or not isinstance(metadata, dict) or not isinstance(created, (int, float)):
        raise _Corrupt(f"{RECORD_FILE} lacks files, metadata or created")
    for rel, info in files.items():
        _check_relative(rel)
        if (
            not isinstance(info, dict)
            or not isinstance(info.get("sha256"), str)
            or not _SHA_RE.match(info["sha256"])
            or not isinstance(info.get("size"), int)
            or info["size"] < 0
        ):
            raise _Corrupt(f"{RECORD_FILE} has a bad record for {rel}")
    return record


def _check_relative(rel: str) -> None:
    path = PurePosixPath(rel)
    if (
        not rel
        or path.is_absolute()
        or "\\" in rel
        or any(part in ("", ".", "..") for part in rel.split("/"))
        or rel == RECORD_FILE
    ):
        raise _Corrupt(f"{RECORD_FILE} names an unsafe path {rel!r}")


def _verify_local(key: str, directory: Path, *, deep: bool = False) -> dict:
    try:
        raw = (directory / RECORD_FILE).read_bytes()
    except FileNotFoundError:
        raise _Corrupt(f"no {RECORD_FILE}") from None
    except OSError as exc:
        raise _Corrupt(f"cannot read {RECORD_FILE}: {exc}") from None
    record = _parse_record(raw, key)
    for rel, info in record["files"].items():
        path = directory / rel
        if path.is_symlink() or not path.is_file():
            raise _Corrupt(f"{rel} is missing")
        stat = path.stat()
        if stat.st_size != info["size"]:
            raise _Corrupt(f"{rel} has {stat.st_size} bytes, expected {info['size']}")
        if stat.st_mtime_ns == STAMP_NS and not deep:
            continue  # untouched since it was verified and stamped (see STAMP_NS)
        digest, _ = _hash_file(path)
        if digest != info["sha256"]:
            raise _Corrupt(f"{rel} does not match its sha256")
    return record


def _hash_file(path: Path, *, fsync: bool = False) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
        if fsync:
            os.fsync(handle.fileno())
    return digest.hexdigest(), size


def _scan_build_output(staging: Path) -> dict[str, dict[str, Any]]:
    """{relative posix path: {sha256, size}} of every file the build wrote (flushed to disk); refuses links."""
    files: dict[str, dict[str, Any]] = {}
    for dirpath, dirnames, filenames in os.walk(staging):
        base = Path(dirpath)
        for name in dirnames + filenames:
            path = base / name
            rel = path.relative_to(staging).as_posix()
            if path.is_symlink():
                raise CacheError(
                    f"the build wrote a symbolic link {rel}; cache entries hold regular files only",
                    "copy the file into the build directory instead of linking it",
                )
            if name in filenames:
                if not path.is_file():
                    raise CacheError(f"the build wrote {rel}, which is not a regular file")
                if rel == RECORD_FILE:
                    raise CacheError(
                        f"the build wrote {RECORD_FILE}, a name the cache reserves for its record",
                        "name the file differently",
                    )
                digest, size = _hash_file(path, fsync=True)
                files[rel] = {"sha256": digest, "size": size}
    return files


def _write_durably(path: Path, data: bytes) -> None:
    with open(path, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _is_aws_error(exc: BaseException) -> bool:
    """S3 trouble: a request AWS refused or never answered, or a download that broke off mid-body."""
    if isinstance(exc, AwsCallError):
        return True
    try:
        from botocore.exceptions import BotoCoreError
    except ImportError:  # pragma: no cover - boto3 is a dependency
        return False
    return isinstance(exc, BotoCoreError)  # reading a response body happens after the call returned


# -------------------------------------------------------------------- S3 store
class _S3Store:
    """``<prefix>/<key>/<file>`` objects, ``<prefix>/<key>/entry.json`` written last and read first.

    Every request goes through an :class:`~neurondeploy.aws.transport.AwsTransport` of its own, over ``client``
    (an injected boto3 S3 client) when given, else over the transport's client (which honours AWS_ENDPOINT_URL,
    profiles and regions)."""

    def __init__(self, uri: str, client=None) -> None:
        match = re.match(r"^s3://([a-z0-9][a-z0-9.\-]{1,61}[a-z0-9])(?:/(.*))?$", uri or "")
        if not match:
            raise CacheError(f"{uri!r} is not an S3 URI for the shared cache", "write s3://bucket/prefix")
        self.uri = uri
        self.bucket = match.group(1)
        self.prefix = (match.group(2) or "").strip("/")
        self._client = client
        self._transport = None

    @property
    def transport(self):
        if self._transport is None:  # lazily: the package import stays free of boto3
            if self._client is not None:
                self._transport = AwsTransport(self._client.meta.region_name or default_region())
                self._transport.adopt("s3", self._client)
            else:  # 5 attempts, as boto3's default client made: unreachable S3 delays a compile no longer than it did
                self._transport = AwsTransport(default_region(), max_attempts=5)
        return self._transport

    def object_key(self, key: str, rel: str = "") -> str:
        return "/".join(part for part in (self.prefix, key, rel) if part)

    def record(self, key: str) -> dict | None:
        try:
            response = self.transport.call(
                "s3", "GetObject", {"Bucket": self.bucket, "Key": self.object_key(key, RECORD_FILE)}
            )
        except AwsCallError as exc:
            if is_s3_missing(exc):
                return None
            raise
        with response["Body"] as body:
            return _parse_record(body.read(), key)

    def fetch(self, key: str, staging: Path) -> dict | None:
        """Download and verify entry ``key`` into ``staging``; None if S3 has no record (or no bucket yet: a new
        account's first compile). Raises _Corrupt."""
        record = self.record(key)
        if record is None:
            return None
        for rel, info in record["files"].items():
            target = staging / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                response = self.transport.call(
                    "s3", "GetObject", {"Bucket": self.bucket, "Key": self.object_key(key, rel)}
                )
            except AwsCallError as exc:
                if is_s3_missing_object(exc):
                    raise _Corrupt(f"{rel} is missing") from None
                raise
            digest = hashlib.sha256()
            size = 0
            with response["Body"] as body, open(target, "wb") as handle:
                while chunk := body.read(_CHUNK):
                    digest.update(chunk)
                    size += len(chunk)
                    handle.write(chunk)
                handle.flush()
                os.fsync(handle.fileno())
            if size != info["size"] or digest.hexdigest() != info["sha256"]:
                raise _Corrupt(f"{rel} does not match its sha256")
        return record

    def push(self, key: str, directory: Path) -> None:
        """Upload the files of a committed local entry, then its record (so a half-upload is no entry)."""
        record_raw = (directory / RECORD_FILE).read_bytes()
        record = json.loads(record_raw)
        upload = Transfer(self.transport)  # multipart above 8 MiB, so artifacts over 5 GiB work too
        for rel in sorted(record["files"]):
            upload.call("s3", "PutObject", {"Bucket": self.bucket, "Key": self.object_key(key, rel)}, directory / rel)
        self.transport.call(
            "s3",
            "PutObject",
            {
                "Bucket": self.bucket,
                "Key": self.object_key(key, RECORD_FILE),
                "Body": record_raw,
                "ContentType": "application/json",
            },
        )

    def forget(self, key: str) -> None:
        """Delete a corrupt entry's record (best effort), so others stop downloading it before our rebuild lands."""
        try:
            self.transport.call("s3", "DeleteObject", {"Bucket": self.bucket, "Key": self.object_key(key, RECORD_FILE)})
        except Exception as exc:
            if not _is_aws_error(exc):
                raise

    def remove_prefix(self, key_prefix: str) -> list[str]:
        """Delete every object of the entries whose key starts with ``key_prefix``; records first."""
        listing_prefix = self.object_key(key_prefix)
        objects: dict[str, list[str]] = {}
        for page in Paged(self.transport).call(
            "s3", "ListObjectsV2", {"Bucket": self.bucket, "Prefix": listing_prefix}
        ):
            for item in page.get("Contents", []):
                rest = item["Key"][len(self.prefix) + 1 :] if self.prefix else item["Key"]
                key = rest.split("/", 1)[0]
                if _KEY_RE.match(key):
                    objects.setdefault(key, []).append(item["Key"])
        for key, names in objects.items():
            record = self.object_key(key, RECORD_FILE)
            if record in names:
                self.transport.call("s3", "DeleteObject", {"Bucket": self.bucket, "Key": record})
            rest = [name for name in names if name != record]
            for start in range(0, len(rest), 1000):
                self.transport.call(
                    "s3",
                    "DeleteObjects",
                    {
                        "Bucket": self.bucket,
                        "Delete": {"Objects": [{"Key": name} for name in rest[start : start + 1000]], "Quiet": True},
                    },
                )
        return sorted(objects)
