"""A cache entry whose bytes rotted behind the filesystem's back (contents changed, size and stamp kept: what the
warm fast path trusts) never becomes an artifact: compile hashes each module it puts into one, once per compile,
drops the rotten entry and rebuilds it; and apply refuses an artifact whose files do not match its manifest before
it uploads or creates anything. Real CPU compiles of the tiny models in tests/fixtures."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from unit.test_artifact_determinism import compile_into, tiny_models  # noqa: F401 (tiny_models: a fixture)

from neurondeploy.compiler.artifact import load_artifact, read_manifest
from neurondeploy.compiler.cache import STAMP_NS, CompileCache

REPO = Path(__file__).parents[2]


def rot(path: Path) -> None:
    """Flip one byte in the middle, keeping size and modification time (bit rot bypasses the filesystem)."""
    stat = path.stat()
    path.chmod(0o644)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_a_rotten_cache_entry_is_rebuilt_not_shipped(tmp_path):
    first = compile_into(tmp_path, "cache", "first")
    bucket = first.manifest.buckets[0]
    entry = CompileCache(root=tmp_path / "cache").entries_dir / bucket.cache_key
    module = next(p for p in entry.iterdir() if p.suffix == ".pt")
    assert module.stat().st_mtime_ns == STAMP_NS  # verified and stamped: the warm path would trust it
    os.unlink(first.artifact_dir / bucket.file)  # the first artifact may share the cache's inode (a hard link)
    rot(module)

    with pytest.warns(Warning, match="corrupt"):
        second = compile_into(tmp_path, "cache", "second")
    assert second.buckets[0].cache_hit is False  # rebuilt, not taken from the rotten entry
    shipped = second.artifact_dir / second.manifest.buckets[0].file
    assert hashlib.sha256(shipped.read_bytes()).hexdigest() == second.manifest.buckets[0].sha256
    load_artifact(second.artifact_dir, runtime="cpu")  # and it loads


def test_apply_refuses_an_artifact_whose_files_do_not_match_its_manifest_before_any_call(tmp_path):
    result = compile_into(tmp_path, "cache", "artifact")
    shipped = result.artifact_dir / read_manifest(result.artifact_dir).buckets[0].file
    copy = shipped.read_bytes()
    os.unlink(shipped)  # break the hard link to the cache, then damage the artifact's own copy
    shipped.write_bytes(copy[:100] + bytes([copy[100] ^ 0xFF]) + copy[101:])
    spec = tmp_path / "ec2.yaml"
    spec.write_text((REPO / "templates" / "minilm-ec2-alb.yaml").read_text())
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": "x",
        "AWS_SECRET_ACCESS_KEY": "x",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
    }
    env["NEURONDEPLOY_CPU_STANDIN"] = "1"  # past the target gate: the damage is what must stop it
    done = subprocess.run(
        [sys.executable, "-m", "neurondeploy.cli", "apply", str(spec), "--artifact", str(result.artifact_dir), "--yes"]
        + ["--state", str(tmp_path / "state.db")],
        capture_output=True,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 3 and "Traceback" not in done.stderr, done.stderr  # ArtifactError's documented code
    assert len(lines) == 1 and "does not match the sha256 in the manifest" in lines[0], done.stderr
    assert not (tmp_path / "state.db").exists() or b"minilm" not in (tmp_path / "state.db").read_bytes()
