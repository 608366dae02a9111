"""The compile cache on a real local directory: keys, verification, no poisoned entries, ls/rm/prune."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from neurondeploy.compiler.cache import CacheEntry, CacheWarning, CompileCache, cache_key, default_cache_dir
from neurondeploy.compiler.locking import FileLock
from neurondeploy.errors import CacheError, NeurondeployError

PARTS = {
    "model_digest": "sha256:" + "ab" * 32,
    "bucket": {
        "input_ids": {"shape": [1, 128], "dtype": "int64"},
        "attention_mask": {"shape": [1, 128], "dtype": "int64"},
    },
    "compiler_args": ["--auto-cast", "none", "-O2"],
    "backend": "neuron",
    "target": "inf2",
    "compiler_version": "2.21.0",
}


def key_of(n: int) -> str:
    return cache_key({**PARTS, "n": n})


class Builder:
    """A build that writes real files and counts its calls."""

    def __init__(self, payload: bytes = b"compiled-bytes" * 100, metadata: dict | None = None) -> None:
        self.calls = 0
        self.payload = payload
        self.metadata = {"trace_s": 1.5} if metadata is None else metadata

    def __call__(self, directory: Path) -> dict:
        self.calls += 1
        (directory / "model.pt").write_bytes(self.payload)
        (directory / "sub").mkdir()
        (directory / "sub" / "neff.bin").write_bytes(b"\x00\x01" * 50)
        return self.metadata


@pytest.fixture
def cache(tmp_path) -> CompileCache:
    return CompileCache(tmp_path / "cache", lock_timeout_s=5)


def rot(path: Path, data: bytes) -> None:
    """Change an entry file behind the cache's back (entry files are read-only; bit rot does not care)."""
    os.chmod(path, 0o644)
    path.write_bytes(data)


def tmp_leftovers(cache: CompileCache) -> list[str]:
    return sorted(p.name for p in cache.tmp_dir.iterdir()) if cache.tmp_dir.exists() else []


# ------------------------------------------------------------------ keys
def test_key_is_stable_under_dict_ordering():
    reordered = {k: PARTS[k] for k in reversed(list(PARTS))}
    reordered["bucket"] = {k: dict(reversed(list(v.items()))) for k, v in reversed(list(PARTS["bucket"].items()))}
    assert list(reordered) != list(PARTS)
    assert cache_key(reordered) == cache_key(PARTS)
    assert len(cache_key(PARTS)) == 64 and int(cache_key(PARTS), 16) >= 0


@pytest.mark.parametrize(
    "part, value",
    [
        ("model_digest", "sha256:" + "cd" * 32),
        (
            "bucket",
            {
                "input_ids": {"shape": [1, 256], "dtype": "int64"},
                "attention_mask": {"shape": [1, 128], "dtype": "int64"},
            },
        ),
        (
            "bucket",
            {
                "input_ids": {"shape": [1, 128], "dtype": "int32"},
                "attention_mask": {"shape": [1, 128], "dtype": "int64"},
            },
        ),
        ("compiler_args", ["--auto-cast", "none", "-O1"]),
        ("compiler_args", ["-O2", "--auto-cast", "none"]),  # order of compiler flags is meaningful
        ("backend", "cpu"),
        ("target", "trn1"),
        ("compiler_version", "2.21.1"),
    ],
)
def test_key_changes_when_any_part_changes(part, value):
    assert cache_key({**PARTS, part: value}) != cache_key(PARTS)


def test_key_refuses_non_json_parts():
    with pytest.raises(CacheError, match="not plain JSON"):
        cache_key({**PARTS, "path": Path("/x")})
    with pytest.raises(CacheError):
        cache_key({**PARTS, "tolerance": float("nan")})


def test_default_cache_dir_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("NEURONDEPLOY_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "neurondeploy"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "neurondeploy"
    monkeypatch.setenv("NEURONDEPLOY_CACHE_DIR", str(tmp_path / "explicit"))
    assert default_cache_dir() == tmp_path / "explicit"
    assert CompileCache().root == tmp_path / "explicit"


def test_bad_keys_are_refused(cache):
    for bad in ("../../etc", "ABC", "ab" * 31, cache_key(PARTS) + "/x"):
        with pytest.raises(CacheError):
            cache.get(bad)
        with pytest.raises(CacheError):
            cache.get_or_build(bad, Builder())


def test_importing_the_cache_does_not_import_boto3():
    code = (
        "import sys, neurondeploy.compiler.cache; assert 'boto3' not in sys.modules and 'botocore' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ------------------------------------------------------------------ build, hit, verify
def test_build_then_verified_local_hit(cache):
    key, build = key_of(1), Builder()
    assert cache.get(key) is None
    first = cache.get_or_build(key, build)
    assert (first.hit, first.source, build.calls) == (False, "built", 1)
    entry = first.entry
    assert entry.path == cache.entries_dir / key
    assert (entry.path / "model.pt").read_bytes() == build.payload
    assert entry.metadata == {"trace_s": 1.5}
    assert entry.size_bytes == len(build.payload) + 100
    assert set(entry.files) == {"model.pt", "sub/neff.bin"}
    record = json.loads((entry.path / "entry.json").read_text())
    assert record["key"] == key and record["files"]["model.pt"]["size"] == len(build.payload)

    second = cache.get_or_build(key, build)
    assert (second.hit, second.source, build.calls) == (True, "local", 1)
    assert second.entry.path == entry.path and second.entry.metadata == entry.metadata
    assert tmp_leftovers(cache) == []
    # entry files are read-only, so an artifact directory hard-linking them cannot edit the cache by accident
    assert all((entry.path / rel).stat().st_mode & 0o222 == 0 for rel in entry.files)


def test_get_touches_last_used(cache):
    key = key_of(1)
    entry = cache.get_or_build(key, Builder()).entry
    os.utime(entry.path, (1_000_000, 1_000_000))
    assert cache.ls()[0].last_used == 1_000_000
    assert cache.get(key).last_used > time.time() - 60
    assert cache.ls()[0].last_used > time.time() - 60


@pytest.mark.parametrize("damage", ["flip_byte", "truncate", "delete_file", "delete_record", "garble_record"])
def test_corrupt_entry_is_detected_removed_and_rebuilt(cache, damage):
    key, build = key_of(2), Builder()
    entry = cache.get_or_build(key, build).entry
    target = entry.path / "sub" / "neff.bin"
    if damage == "flip_byte":
        data = bytearray(target.read_bytes())
        data[17] ^= 0x01  # same size, one bit off
        rot(target, bytes(data))
    elif damage == "truncate":
        rot(target, target.read_bytes()[:-1])
    elif damage == "delete_file":
        target.unlink()
    elif damage == "delete_record":
        (entry.path / "entry.json").unlink()
    else:
        rot(entry.path / "entry.json", b"{not json")

    with pytest.warns(CacheWarning, match="corrupt"):
        assert cache.get(key) is None
    assert not entry.path.exists()
    assert cache.ls() == []

    again = cache.get_or_build(key, build)
    assert (again.hit, again.source, build.calls) == (False, "built", 2)
    assert (again.entry.path / "sub" / "neff.bin").read_bytes() == b"\x00\x01" * 50
    assert cache.get(key) is not None


def test_corrupt_entry_found_by_get_or_build_is_rebuilt_at_once(cache):
    key, build = key_of(3), Builder()
    entry = cache.get_or_build(key, build).entry
    rot(entry.path / "model.pt", b"X" + build.payload[1:])
    with pytest.warns(CacheWarning, match="corrupt"):
        result = cache.get_or_build(key, build)
    assert (result.source, build.calls) == ("built", 2)
    assert (result.entry.path / "model.pt").read_bytes() == build.payload


# ------------------------------------------------------------------ no poisoned cache
class CompilerCrashed(RuntimeError):
    pass


def test_failed_build_stores_nothing_and_reraises(cache):
    key = key_of(4)

    def failing(directory: Path) -> dict:
        (directory / "model.pt").write_bytes(b"half a model")
        raise CompilerCrashed("neuronx-cc exited 70")

    with pytest.raises(CompilerCrashed, match="exited 70"):
        cache.get_or_build(key, failing)
    assert cache.get(key) is None
    assert list(cache.entries_dir.iterdir()) == []
    assert tmp_leftovers(cache) == []

    result = cache.get_or_build(key, Builder())  # the lock was released, the next attempt builds
    assert result.source == "built"


@pytest.mark.parametrize(
    "bad_output, message",
    [
        ("record_name", "reserves"),
        ("symlink", "symbolic link"),
        ("not_json", "not JSON"),
        ("not_mapping", "not a mapping"),
    ],
)
def test_bad_build_output_stores_nothing(cache, bad_output, message):
    key = key_of(5)

    def build(directory: Path):
        (directory / "model.pt").write_bytes(b"m")
        if bad_output == "record_name":
            (directory / "entry.json").write_text("{}")
        elif bad_output == "symlink":
            (directory / "link.pt").symlink_to(directory / "model.pt")
        elif bad_output == "not_json":
            return {"when": object()}
        elif bad_output == "not_mapping":
            return ["outputs"]
        return {}

    with pytest.raises(CacheError, match=message):
        cache.get_or_build(key, build)
    assert list(cache.entries_dir.iterdir()) == [] and tmp_leftovers(cache) == []


def test_stale_temp_dir_of_a_dead_build_is_cleaned_on_next_build(cache):
    key = key_of(6)
    cache.tmp_dir.mkdir(parents=True)
    stale = cache.tmp_dir / f"{key}.999999.deadbeef"
    stale.mkdir()
    (stale / "model.pt").write_bytes(b"half")
    other = cache.tmp_dir / f"{key_of(7)}.999999.deadbeef"  # another key's temp dir is not ours to judge here
    other.mkdir()
    cache.get_or_build(key, Builder())
    assert not stale.exists() and other.exists()
    assert cache.prune() == [] and not other.exists()  # prune: nobody holds key 7's lock, so it is dead


# ------------------------------------------------------------------ locking
def test_lock_wait_times_out_with_an_error_naming_the_lock(tmp_path):
    cache = CompileCache(tmp_path / "cache", lock_timeout_s=0.2)
    key, build = key_of(8), Builder()
    cache.locks_dir.mkdir(parents=True)
    holder = FileLock(cache.lock_path(key))  # a second open file description: conflicts like another process
    assert holder.try_acquire()
    try:
        started = time.monotonic()
        with pytest.raises(CacheError) as caught:
            cache.get_or_build(key, build)
        assert 0.2 <= time.monotonic() - started < 2
        assert str(cache.lock_path(key)) in caught.value.message
        assert f"pid {os.getpid()}" in caught.value.message
        assert isinstance(caught.value, NeurondeployError) and caught.value.hint
        assert build.calls == 0
    finally:
        holder.release()
    assert cache.get_or_build(key, build).source == "built"


def test_lock_file_deleted_while_waiting_is_not_a_second_lock(tmp_path):
    path = tmp_path / "k.lock"
    first = FileLock(path, 1)
    assert first.try_acquire()
    first.unlink_and_release()
    second, third = FileLock(path, 1), FileLock(path, 0.05)
    assert second.try_acquire()
    with pytest.raises(CacheError):
        third.acquire()
    second.release()


# ------------------------------------------------------------------ ls / remove / prune
def _entries(cache: CompileCache, n: int) -> list[CacheEntry]:
    made = []
    for i in range(n):
        entry = cache.get_or_build(key_of(100 + i), Builder(payload=b"p" * (1000 * (i + 1)))).entry
        made.append(entry)
    return made


def _set_times(entry: CacheEntry, *, created: float | None = None, last_used: float | None = None) -> None:
    if created is not None:
        record_path = entry.path / "entry.json"
        record = json.loads(record_path.read_text())
        record["created"] = created
        record_path.write_text(json.dumps(record))
    if last_used is not None:
        os.utime(entry.path, (last_used, last_used))


def test_ls_newest_first(cache):
    assert cache.ls() == []
    a, b, c = _entries(cache, 3)
    now = time.time()
    _set_times(a, created=now - 10)
    _set_times(b, created=now - 30)
    _set_times(c, created=now - 20)
    listed = cache.ls()
    assert [e.key for e in listed] == [a.key, c.key, b.key]
    assert [e.size_bytes for e in listed] == [1100, 3100, 2100]


def test_remove_by_full_key_and_prefix(cache):
    a, b = _entries(cache, 2)
    assert cache.remove(a.key) == [a.key]
    assert not a.path.exists() and b.path.exists()
    assert cache.remove(b.key[:6].upper()) == [b.key]
    assert cache.ls() == []
    with pytest.raises(CacheError, match="no cache entry"):
        cache.remove(b.key)


def test_remove_refuses_short_or_non_hex_prefix(cache):
    (a,) = _entries(cache, 1)
    with pytest.raises(CacheError, match="too short"):
        cache.remove(a.key[:5])
    with pytest.raises(CacheError, match="not a cache key"):
        cache.remove("../" + a.key)
    with pytest.raises(CacheError, match="not a cache key"):
        cache.remove("")
    assert [e.key for e in cache.ls()] == [a.key]


def test_prune_older_than(cache):
    a, b, c = _entries(cache, 3)
    now = time.time()
    _set_times(a, last_used=now - 3 * 86400)
    _set_times(b, last_used=now - 10)
    _set_times(c, last_used=now - 2 * 86400)
    assert sorted(cache.prune(older_than_s=86400)) == sorted([a.key, c.key])
    assert [e.key for e in cache.ls()] == [b.key]


def test_prune_max_bytes_drops_least_recently_used(cache):
    a, b, c = _entries(cache, 3)  # 1100, 2100, 3100 bytes
    now = time.time()
    _set_times(a, last_used=now - 300)
    _set_times(b, last_used=now - 100)
    _set_times(c, last_used=now - 200)
    assert cache.get(a.key) is not None  # a use makes a the most recent
    assert cache.prune(max_bytes=4300) == [c.key]  # 6300 -> drop c (LRU) -> 3200 ≤ 4300
    assert cache.prune(max_bytes=4300) == []
    assert cache.prune(max_bytes=1100) == [b.key]
    assert [e.key for e in cache.ls()] == [a.key]
    assert cache.prune(max_bytes=0) == [a.key]


def test_prune_removes_unreadable_entries_and_lock_files(cache):
    (a,) = _entries(cache, 1)
    (a.path / "entry.json").unlink()
    assert list(cache.locks_dir.iterdir())
    assert cache.prune() == [a.key]
    assert list(cache.entries_dir.iterdir()) == [] and list(cache.locks_dir.iterdir()) == []


def test_prune_keeps_temp_dirs_of_running_builds(cache):
    key = key_of(9)
    cache.locks_dir.mkdir(parents=True)
    cache.tmp_dir.mkdir(parents=True)
    running = cache.tmp_dir / f"{key}.{os.getpid()}.cafe0001"
    running.mkdir()
    holder = FileLock(cache.lock_path(key))
    assert holder.try_acquire()
    try:
        cache.prune()
        assert running.exists() and cache.lock_path(key).exists()
    finally:
        holder.release()
    cache.prune()
    assert not running.exists()
