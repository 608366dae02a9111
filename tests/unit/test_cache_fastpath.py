"""Warm lookups trust a file only while it is untouched since it was verified; `verify` always hashes."""

from __future__ import annotations

import os
import time

import pytest

from neurondeploy.cli.main import main
from neurondeploy.compiler.cache import STAMP_NS, CompileCache, cache_key
from neurondeploy.compiler.models import DigestMemo


def _build(directory):
    (directory / "model.pt").write_bytes(b"x" * 4096)
    return {"ok": True}


def test_a_rewritten_file_is_hashed_and_caught_even_with_the_same_size(tmp_path):
    cache = CompileCache(root=tmp_path)
    entry = cache.get_or_build(cache_key({"a": 1}), _build).entry
    path = entry.path / "model.pt"
    assert path.stat().st_mtime_ns == STAMP_NS
    path.chmod(0o644)
    path.write_bytes(b"y" * 4096)  # same size; the write moves mtime off the stamp
    with pytest.warns(Warning, match="corrupt"):
        assert cache.get(entry.key) is None


def test_damage_that_keeps_the_stamp_is_found_by_verify(tmp_path, capsys):
    cache = CompileCache(root=tmp_path)
    entry = cache.get_or_build(cache_key({"a": 2}), _build).entry
    path = entry.path / "model.pt"
    path.chmod(0o644)
    path.write_bytes(b"z" * 4096)
    os.utime(path, ns=(STAMP_NS, STAMP_NS))  # as bit rot would: contents change, metadata does not
    assert cache.get(entry.key) is not None  # the fast path cannot see it
    assert main(["cache", "--cache-dir", str(tmp_path), "verify"]) == 1
    assert "1 corrupt entries removed" in capsys.readouterr().out
    assert cache.get(entry.key) is None


def test_digest_memo_reuses_only_old_unchanged_files(tmp_path):
    weights = tmp_path / "weights.bin"
    weights.write_bytes(b"a" * 1000)
    old = time.time() - 60
    os.utime(weights, (old, old))
    memo = DigestMemo(tmp_path / "digests.json")
    first = memo.sha256(weights)
    memo.save()
    reloaded = DigestMemo(tmp_path / "digests.json")
    assert reloaded.known and reloaded.sha256(weights) == first
    weights.write_bytes(b"b" * 1000)  # fresh mtime: not remembered, and not mistaken for the old file
    assert reloaded.sha256(weights) != first
    assert str(weights.resolve()) in reloaded.known and reloaded.known[str(weights.resolve())]["sha256"] == first
