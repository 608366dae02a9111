"""Compiled artifacts are a function of their inputs: compiling an unchanged spec again packs the same bytes
(same sha256, so apply uploads nothing); a changed model gives another digest. Real CPU compiles of the tiny
models in tests/fixtures; no clock, timing or cache hit ends up in what is hashed or packed."""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import torch

from neurondeploy.archive import artifact_digest, pack_artifact
from neurondeploy.compiler.artifact import MANIFEST, load_artifact, read_manifest
from neurondeploy.compiler.cache import CompileCache
from neurondeploy.compiler.compile import compile_spec
from neurondeploy.specs import parse_spec

REPO = Path(__file__).parents[2]
FIXTURES = REPO / "tests" / "fixtures"
SPEC = (
    "kind: inference\nname: tiny\ntask: feature-extraction\n"
    "model: {factory: 'tiny_models:text_encoder', dtype: float32}\n"
    "compile: {batch_sizes: [1, 2], sequence_lengths: [8]}\n"
)
RUN_FACTS = {"created", "compile_s", "cache_hit"}


@pytest.fixture(autouse=True)
def tiny_models(monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))
    monkeypatch.setenv("TINY_MODEL_SEED", "0")


def compile_into(tmp_path: Path, cache: str, out: str, text: str = SPEC):
    return compile_spec(
        parse_spec(text, file="tiny.yaml", path=tmp_path / "tiny.yaml"),
        backend="cpu",
        cache=CompileCache(root=tmp_path / cache),
        out_dir=tmp_path / out,
    )


def keys_in(value) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {key for item in value.values() for key in keys_in(item)}
    if isinstance(value, list):
        return {key for item in value for key in keys_in(item)}
    return set()


def test_compiling_an_unchanged_spec_again_gives_the_same_digest_and_the_same_packed_bytes(tmp_path):
    first = compile_into(tmp_path, "cache", "artifact")
    digest, packed = artifact_digest(first.artifact_dir), pack_artifact(first.artifact_dir)
    manifest_json = (first.artifact_dir / MANIFEST).read_bytes()

    again = compile_into(tmp_path, "cache", "artifact")  # cache hit, rewritten in place
    elsewhere = compile_into(tmp_path, "cache", "elsewhere")  # cache hit, another directory
    assert [b.cache_hit for b in first.manifest.buckets] == [False, False]
    assert [b.cache_hit for b in again.manifest.buckets] == [True, True]
    assert first.manifest.compile_s is not None and first.manifest.created is not None  # the run's own facts
    for result in (again, elsewhere):
        assert (result.artifact_dir / MANIFEST).read_bytes() == manifest_json
        assert artifact_digest(result.artifact_dir) == digest
        assert pack_artifact(result.artifact_dir) == packed

    # manifest.json holds what identifies the model, never what one run did; read back, those are None
    written = json.loads(manifest_json)
    assert not RUN_FACTS & keys_in(written)
    assert written["model_digest"] == first.manifest.model_digest and len(written["buckets"]) == 2
    assert all(bucket["sha256"] and bucket["cache_key"] and bucket["check"]["passed"] for bucket in written["buckets"])
    read = read_manifest(first.artifact_dir)
    assert read.created is None and read.compile_s is None
    assert [(b.cache_hit, b.compile_s) for b in read.buckets] == [(None, None)] * 2


def test_a_changed_model_or_bucket_gives_another_digest(tmp_path, monkeypatch):
    reference = artifact_digest(compile_into(tmp_path, "cache", "reference").artifact_dir)
    monkeypatch.setenv("TINY_MODEL_SEED", "1")  # same architecture, other weights
    reseeded = compile_into(tmp_path, "cache", "reseeded")
    assert artifact_digest(reseeded.artifact_dir) != reference
    monkeypatch.setenv("TINY_MODEL_SEED", "0")
    reshaped = compile_into(
        tmp_path, "cache", "reshaped", SPEC.replace("sequence_lengths: [8]", "sequence_lengths: [12]")
    )
    assert artifact_digest(reshaped.artifact_dir) != reference
    assert artifact_digest(compile_into(tmp_path, "cache", "back").artifact_dir) == reference


def test_a_fresh_cache_in_a_new_process_builds_the_same_artifact(tmp_path):
    """What a teammate or CI with an empty cache does: two `neurondeploy compile` runs, each with its own new cache."""
    spec = tmp_path / "tiny.yaml"
    spec.write_text(SPEC)
    environment = os.environ | {"PYTHONPATH": f"{FIXTURES}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    outputs = []
    for run in ("one", "two"):
        args = ["compile", str(spec), "--backend", "cpu", "--cache-dir", str(tmp_path / f"cache-{run}")]
        args += ["--out", str(tmp_path / f"artifact-{run}"), "--json"]
        result = subprocess.run(
            [sys.executable, "-m", "neurondeploy.cli", *args],
            capture_output=True,
            text=True,
            env=environment | {"TINY_MODEL_SEED": "0"},
            cwd=REPO,
            check=True,
        )
        outputs.append(json.loads(result.stdout))
    assert [b["source"] for output in outputs for b in output["buckets"]] == ["built"] * 4
    one, two = tmp_path / "artifact-one", tmp_path / "artifact-two"
    assert artifact_digest(one) == artifact_digest(two)
    assert pack_artifact(one) == pack_artifact(two)


def test_packing_records_no_times_modes_or_owners(tmp_path):
    source = compile_into(tmp_path, "cache", "artifact").artifact_dir
    packed = pack_artifact(source)
    copy = tmp_path / "copy"
    shutil.copytree(source, copy)
    for path in copy.rglob("*"):
        if path.is_file():
            os.chmod(path, 0o600)
            os.utime(path, (1_000_000_000, 1_000_000_000))
            if os.geteuid() == 0:
                os.chown(path, 4321, 4321)
    assert pack_artifact(copy) == packed and artifact_digest(copy) == artifact_digest(source)

    assert packed[:2] == b"\x1f\x8b" and packed[3] == 0  # gzip: no FNAME / FCOMMENT / FEXTRA flags
    assert packed[4:8] == b"\0\0\0\0"  # gzip header mtime 0
    with tarfile.open(fileobj=io.BytesIO(packed), mode="r:gz") as archive:
        members = archive.getmembers()
    names = [member.name for member in members]
    assert names == sorted(names) and "manifest.json" in names
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname, m.mode, m.type) for m in members} == {
        (0, 0, 0, "", "", 0o644, tarfile.REGTYPE)
    }
    assert gzip.decompress(packed)  # a plain, complete gzip stream


def test_a_manifest_written_by_an_earlier_version_still_loads(tmp_path):
    """Artifacts compiled before the run facts left manifest.json carry created/compile_s/cache_hit: still valid."""
    artifact = compile_into(tmp_path, "cache", "artifact").artifact_dir
    manifest = json.loads((artifact / MANIFEST).read_text())
    manifest |= {"compile_s": 1.25, "created": "2025-01-01T00:00:00+00:00"}
    for bucket in manifest["buckets"]:
        bucket |= {"compile_s": 0.5, "cache_hit": False}
    (artifact / MANIFEST).write_text(json.dumps(manifest, indent=2))
    loaded = load_artifact(artifact, runtime="cpu")
    assert loaded.manifest.created == "2025-01-01T00:00:00+00:00" and loaded.manifest.buckets[0].compile_s == 0.5
    module = loaded.modules[(1, 8)]
    assert module(torch.ones(1, 8, dtype=torch.int64), torch.ones(1, 8, dtype=torch.int64)).shape == (1, 16)
