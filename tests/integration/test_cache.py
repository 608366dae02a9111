"""The compile cache with real processes (concurrency, SIGKILL) and a shared S3 prefix on a real moto server."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from neurondeploy.compiler.cache import CacheWarning, CompileCache, cache_key

pytestmark = pytest.mark.integration

KEY = cache_key(
    {
        "model_digest": "sha256:" + "12" * 32,
        "bucket": {"input_ids": [4, 128]},
        "compiler_args": ["-O2"],
        "backend": "cpu",
        "target": "inf2",
        "compiler_version": "test",
    }
)
PAYLOAD = b"deterministic compiled module " * 300

# A worker process: waits at a file barrier so all workers call get_or_build at the same moment, then prints
# the result as JSON. The build appends a line to the counter file, writes the module, then sleeps.
WORKER = textwrap.dedent("""
    import json, os, sys, time
    from pathlib import Path
    from neurondeploy.compiler.cache import CompileCache

    root, key, counter, barrier, me, workers, build_sleep_s = sys.argv[1:8]
    Path(barrier, me).touch()
    deadline = time.monotonic() + 20
    while len(os.listdir(barrier)) < int(workers):
        if time.monotonic() > deadline:
            sys.exit("barrier timeout")
        time.sleep(0.002)

    def build(directory):
        with open(counter, "a") as handle:
            handle.write(f"{os.getpid()}\\n")
        (directory / "model.pt").write_bytes(b"deterministic compiled module " * 300)
        Path(barrier, "building").touch()
        time.sleep(float(build_sleep_s))
        return {"builder_pid": os.getpid()}

    result = CompileCache(Path(root), lock_timeout_s=20).get_or_build(key, build)
    print(json.dumps({"pid": os.getpid(), "hit": result.hit, "source": result.source, "path": str(result.entry.path),
                      "metadata": result.entry.metadata, "files": result.entry.files,
                      "module": (result.entry.path / "model.pt").read_bytes().decode()}))
""")


def spawn(script: Path, *args: object) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(script), *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def wait_for(path: Path, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.005)


@pytest.fixture
def worker_script(tmp_path) -> Path:
    path = tmp_path / "worker.py"
    path.write_text(WORKER)
    return path


def test_two_concurrent_compiles_of_one_key_make_one_entry(tmp_path, worker_script):
    root, counter, barrier = tmp_path / "cache", tmp_path / "builds.txt", tmp_path / "barrier"
    barrier.mkdir()
    procs = [spawn(worker_script, root, KEY, counter, barrier, name, 2, 1.0) for name in ("a", "b")]
    outputs = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 0, stderr
        outputs.append(json.loads(stdout))

    assert len(counter.read_text().splitlines()) == 1  # exactly one build ran
    assert sorted(out["source"] for out in outputs) == ["built", "local"]
    assert sorted(out["hit"] for out in outputs) == [False, True]
    builder = next(out for out in outputs if out["source"] == "built")
    assert all(out["metadata"] == {"builder_pid": builder["pid"]} for out in outputs)  # the same entry, both
    assert outputs[0]["path"] == outputs[1]["path"] == str(root / "entries" / KEY)
    assert outputs[0]["files"] == outputs[1]["files"] and outputs[0]["module"] == outputs[1]["module"]
    assert [p.name for p in (root / "entries").iterdir()] == [KEY]
    assert list((root / "tmp").iterdir()) == []


def test_compile_killed_half_way_leaves_no_entry_and_no_lock(tmp_path, worker_script):
    root, counter, barrier = tmp_path / "cache", tmp_path / "builds.txt", tmp_path / "barrier"
    barrier.mkdir()
    proc = spawn(worker_script, root, KEY, counter, barrier, "victim", 1, 60)
    try:
        wait_for(barrier / "building")  # the build has written its module and is now "compiling"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    assert list((root / "entries").iterdir()) == []  # no entry, not even a partial one
    (stale,) = (root / "tmp").iterdir()  # the half-built temp dir of the dead process
    assert (stale / "model.pt").exists()

    cache = CompileCache(root, lock_timeout_s=5)  # the lock died with its holder: no 5 s wait, no error
    assert cache.get(KEY) is None

    def rebuild(directory: Path) -> dict:
        (directory / "model.pt").write_bytes(PAYLOAD)
        return {"rebuilt": True}

    started = time.monotonic()
    result = cache.get_or_build(KEY, rebuild)
    assert time.monotonic() - started < 2
    assert (result.hit, result.source, result.entry.metadata) == (False, "built", {"rebuilt": True})
    assert not stale.exists()  # cleaned by the next build of the key
    assert cache.get(KEY) is not None


# ------------------------------------------------------------------ shared S3 cache
BUCKET = "team-compile-cache"
PREFIX = "neurondeploy/cache"


class CountingBuild:
    def __init__(self, payload: bytes = PAYLOAD) -> None:
        self.calls = 0
        self.payload = payload

    def __call__(self, directory: Path) -> dict:
        self.calls += 1
        (directory / "model.pt").write_bytes(self.payload)
        (directory / "neff").mkdir()
        (directory / "neff" / "graph.neff").write_bytes(b"NEFF" + bytes(range(256)) * 8)
        return {"outputs": [{"name": "logits", "shape": [4, 2]}]}


def must_not_build(directory: Path) -> dict:
    raise AssertionError("a verified S3 entry existed: the build must not run")


def s3_keys(s3) -> list[str]:
    return sorted(item["Key"] for item in s3.list_objects_v2(Bucket=BUCKET).get("Contents", []))


@pytest.fixture
def s3(aws):
    client = aws.client("s3")
    client.create_bucket(Bucket=BUCKET)
    return client


def shared_cache(tmp_path: Path, name: str, s3) -> CompileCache:
    return CompileCache(tmp_path / name, s3_uri=f"s3://{BUCKET}/{PREFIX}", s3_client=s3, lock_timeout_s=5)


def test_s3_shared_cache_push_then_hit_from_an_empty_local_cache(tmp_path, s3):
    build = CountingBuild()
    a = shared_cache(tmp_path, "a", s3).get_or_build(KEY, build)
    assert (a.source, build.calls) == ("built", 1)
    assert s3_keys(s3) == [f"{PREFIX}/{KEY}/{rel}" for rel in ("entry.json", "model.pt", "neff/graph.neff")]

    cache_b = shared_cache(tmp_path, "b", s3)
    assert cache_b.get(KEY) is None  # nothing local
    b = cache_b.get_or_build(KEY, must_not_build)
    assert (b.hit, b.source) == (True, "s3")
    assert b.entry.path == tmp_path / "b" / "entries" / KEY
    for rel in ("model.pt", "neff/graph.neff"):
        assert (b.entry.path / rel).read_bytes() == (a.entry.path / rel).read_bytes()
    assert b.entry.metadata == a.entry.metadata and b.entry.files == a.entry.files
    assert b.entry.created == a.entry.created
    assert cache_b.get_or_build(KEY, must_not_build).source == "local"  # now a local entry, verified
    assert list((tmp_path / "b" / "tmp").iterdir()) == []


def test_corrupt_s3_object_is_detected_and_rebuilt_not_used(tmp_path, s3):
    shared_cache(tmp_path, "a", s3).get_or_build(KEY, CountingBuild())
    s3.put_object(Bucket=BUCKET, Key=f"{PREFIX}/{KEY}/neff/graph.neff", Body=b"NEFF" + b"\xff" * 2048)  # bit rot

    build = CountingBuild()
    cache_c = shared_cache(tmp_path, "c", s3)
    with pytest.warns(CacheWarning, match="corrupt"):
        result = cache_c.get_or_build(KEY, build)
    assert (result.source, build.calls) == ("built", 1)
    assert (result.entry.path / "neff" / "graph.neff").read_bytes() == b"NEFF" + bytes(range(256)) * 8
    fixed = s3.get_object(Bucket=BUCKET, Key=f"{PREFIX}/{KEY}/neff/graph.neff")["Body"].read()
    assert fixed == b"NEFF" + bytes(range(256)) * 8  # the rebuild was pushed over the corrupt object

    d = shared_cache(tmp_path, "d", s3).get_or_build(KEY, must_not_build)
    assert d.source == "s3"


# The uploader is SIGKILLed by a botocore hook at the moment it is about to write the record: a real process
# dying in the middle of a push, after the files went up.
UPLOADER = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    import boto3
    from neurondeploy.compiler.cache import CompileCache

    root, key, bucket, prefix = sys.argv[1:5]
    client = boto3.client("s3")  # AWS_ENDPOINT_URL from the environment: the moto server

    def die_before_record(params, **kwargs):
        if params["Key"].endswith("/entry.json"):
            os.kill(os.getpid(), signal.SIGKILL)

    client.meta.events.register("provide-client-params.s3.PutObject", die_before_record)

    def build(directory):
        (directory / "model.pt").write_bytes(b"uploaded but never recorded")
        return {}

    CompileCache(Path(root), s3_uri=f"s3://{bucket}/{prefix}", s3_client=client).get_or_build(key, build)
    sys.exit("not killed")
""")


def test_interrupted_upload_is_not_an_entry(tmp_path, s3):
    script = tmp_path / "uploader.py"
    script.write_text(UPLOADER)
    proc = subprocess.run(
        [sys.executable, str(script), tmp_path / "up", KEY, BUCKET, PREFIX],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert s3_keys(s3) == [f"{PREFIX}/{KEY}/model.pt"]  # files first, record never written

    build = CountingBuild()
    result = shared_cache(tmp_path, "e", s3).get_or_build(KEY, build)
    assert (result.source, build.calls) == ("built", 1)
    assert f"{PREFIX}/{KEY}/entry.json" in s3_keys(s3)
    assert shared_cache(tmp_path, "f", s3).get_or_build(KEY, must_not_build).entry.files == result.entry.files


def test_remove_remote_deletes_the_shared_entry(tmp_path, s3):
    cache = shared_cache(tmp_path, "a", s3)
    cache.get_or_build(KEY, CountingBuild())
    other = cache_key({"other": 1})
    cache.get_or_build(other, CountingBuild())
    assert cache.remove(KEY[:8], remote=True) == [KEY]
    assert all(KEY not in name for name in s3_keys(s3)) and any(other in name for name in s3_keys(s3))
    assert shared_cache(tmp_path, "b", s3).get_or_build(KEY, CountingBuild()).source == "built"


def test_unreachable_s3_warns_and_builds(tmp_path, aws):
    dead = aws.client("s3", endpoint_url="http://127.0.0.1:9")  # discard port: connection refused
    cache = CompileCache(tmp_path / "a", s3_uri=f"s3://{BUCKET}/{PREFIX}", s3_client=dead, lock_timeout_s=5)
    build = CountingBuild()
    with pytest.warns(CacheWarning) as caught:
        result = cache.get_or_build(KEY, build)
    assert (result.source, build.calls) == ("built", 1)
    messages = " ".join(str(w.message) for w in caught)
    assert "cannot read" in messages and "not shared" in messages
    assert cache.get(KEY) is not None


def test_a_shared_bucket_not_made_yet_is_a_miss_not_a_warning(tmp_path, aws):
    """A new account's first compile --remote said "cannot read s3://... (NoSuchBucket); building locally" just
    before it started a remote job: no bucket holds no entry, which is a miss like any other."""
    import warnings

    class Missing(Exception):
        pass

    def missing(directory):  # as compile --remote looks up an entry: nothing built here
        raise Missing

    cache = CompileCache(tmp_path / "a", s3_uri=f"s3://{BUCKET}/{PREFIX}", s3_client=aws.client("s3"))
    with warnings.catch_warnings(record=True) as caught, pytest.raises(Missing):
        warnings.simplefilter("always")
        cache.get_or_build(KEY, missing)
    assert [str(w.message) for w in caught] == []


def test_default_s3_client_comes_from_the_environment(tmp_path, s3):
    """No client injected: boto3.client("s3") is made lazily and reaches the emulator through AWS_ENDPOINT_URL."""
    cache = CompileCache(tmp_path / "a", s3_uri=f"s3://{BUCKET}/{PREFIX}")
    assert cache.get_or_build(KEY, CountingBuild()).source == "built"
    assert f"{PREFIX}/{KEY}/entry.json" in s3_keys(s3)
