"""The S3 state's lineage (``<prefix>/meta.json``) against a moto server over HTTP: made once, on first use, by
whichever of several first users gets there, and the same for every reader since; unlock through the CLI."""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor

import pytest

from neurondeploy.cli.main import main
from neurondeploy.engine.state_s3 import S3StateStore

pytestmark = pytest.mark.integration
BUCKET = "team-neurondeploy-state"


@pytest.fixture
def state_uri(aws) -> str:
    aws.client("s3").create_bucket(Bucket=BUCKET)
    return f"s3://{BUCKET}/platform/prod"


def test_the_lineage_is_made_once_and_read_by_every_store(state_uri, aws):
    s3 = aws.client("s3")
    assert s3.list_objects_v2(Bucket=BUCKET).get("KeyCount") == 0  # opening a store writes nothing
    with ThreadPoolExecutor(8) as pool:  # eight first users at once: one conditional PutObject wins
        lineages = set(pool.map(lambda _: S3StateStore(state_uri).lineage, range(8)))
    (lineage,) = lineages
    assert re.fullmatch(r"[0-9a-f]{32}", lineage)
    meta = json.loads(s3.get_object(Bucket=BUCKET, Key="platform/prod/meta.json")["Body"].read())
    assert meta["lineage"] == lineage
    assert S3StateStore(state_uri).lineage == lineage
    assert S3StateStore(f"s3://{BUCKET}/platform/dev").lineage != lineage  # another prefix, another state
    assert S3StateStore(state_uri).names() == []  # meta.json is not a deployment


def test_unlock_through_the_cli(state_uri, aws, capsys):
    lock = {"pid": 4321, "host": "build-host-2", "since": 1.0, "token": "t"}  # as an apply killed elsewhere left it
    aws.client("s3").put_object(Bucket=BUCKET, Key="platform/prod/locks/web.json", Body=json.dumps(lock).encode())
    store = S3StateStore(state_uri)
    assert main(["unlock", "web", "--state", state_uri]) == 0
    assert capsys.readouterr().out == "unlocked web\n"
    with store.lock("web", "us-east-1", "inference"):  # free again
        pass
