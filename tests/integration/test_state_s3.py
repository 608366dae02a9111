"""The S3 state backend against a moto server over HTTP: the same contract as the SQLite store (tested by the
apply/destroy flow itself), a lock that two holders cannot both get, and takeover of a dead holder's lock."""

from __future__ import annotations

import subprocess
import sys

import pytest
from support.ec2_deployment import NAME, apply_once, tagged, transport

from neurondeploy.engine.destroy import destroy
from neurondeploy.engine.executor import Executor
from neurondeploy.engine.state import DeploymentLocked, ResourceState
from neurondeploy.engine.state_s3 import S3StateStore, open_state

pytestmark = [
    pytest.mark.integration,
    pytest.mark.usefixtures("cpu_standin"),
]  # CPU artifacts stand in for NEFFs, on purpose
STATE_BUCKET = "team-neurondeploy-state"


@pytest.fixture
def state_uri(aws) -> str:
    aws.client("s3").create_bucket(Bucket=STATE_BUCKET)
    return f"s3://{STATE_BUCKET}/platform/prod"


def resource(name: str, **changes) -> ResourceState:
    values = dict(
        name=name,
        type="ec2:vpc",
        outputs={"VpcId": "vpc-1"},
        completed=1,
        total=1,
        create_hash="h",
        delete_requests=[{"service": "ec2", "operation": "DeleteVpc", "params": {"VpcId": "vpc-1"}, "wait": None}],
        depends_on=[],
        taggable=True,
        created=1.0,
        sequence=-1,
    )
    return ResourceState(**{**values, **changes})


def test_what_one_store_writes_another_reads_back(state_uri, aws):
    writer, reader = S3StateStore(state_uri), open_state(state_uri)
    assert isinstance(reader, S3StateStore) and reader.names() == []
    with writer.lock("web", "us-east-1", "inference"):
        writer.put_resource("web", resource("vpc"))
        writer.put_resource("web", resource("subnet", type="ec2:subnet", depends_on=["vpc"], completed=0, total=2))
        writer.record_spec("web", "digest", "{}")
    deployment = reader.get("web")
    assert (deployment.region, deployment.kind, deployment.spec_digest) == ("us-east-1", "inference", "digest")
    assert list(deployment.resources) == ["vpc", "subnet"]  # creation order kept (destroy reverses it)
    assert [r.sequence for r in deployment.resources.values()] == [1, 2]
    assert not deployment.resources["subnet"].complete and deployment.resources["vpc"].outputs == {"VpcId": "vpc-1"}
    keys = [o["Key"] for o in aws.client("s3").list_objects_v2(Bucket=STATE_BUCKET)["Contents"]]
    assert keys == ["platform/prod/deployments/web.json"]  # the lock is gone once released
    with writer.lock("web", "us-east-1", "inference"):
        writer.remove_resource("web", "subnet")
    assert list(reader.get("web").resources) == ["vpc"] and reader.names() == ["web"]
    writer.forget("web")
    assert reader.get("web") is None and reader.names() == []


def test_of_two_holders_one_gets_the_lock_and_the_other_is_told_who_has_it(state_uri):
    first, second = S3StateStore(state_uri), S3StateStore(state_uri)
    with first.lock("web", "us-east-1", "inference"):
        with first.lock("web", "us-east-1", "inference"):  # re-entered by the same holder (the executor does)
            pass
        with pytest.raises(DeploymentLocked) as refused:  # the inner release did not free it
            with second.lock("web", "us-east-1", "inference"):
                pytest.fail("two holders")
        assert "is being changed by pid" in refused.value.message and "neurondeploy unlock web" in refused.value.hint
    with second.lock("web", "us-east-1", "inference"):
        second.put_resource("web", resource("vpc"))
    assert list(first.get("web").resources) == ["vpc"]


def test_a_lock_left_by_a_dead_process_on_this_host_is_taken_over_and_unlock_frees_any(state_uri, aws):
    import json
    import socket

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = {"pid": int(gone.stdout), "host": socket.gethostname(), "since": 0, "token": "x"}
    s3 = aws.client("s3")
    s3.put_object(Bucket=STATE_BUCKET, Key="platform/prod/locks/web.json", Body=json.dumps(stale).encode())
    store = S3StateStore(state_uri)
    with store.lock("web", "us-east-1", "inference"):
        store.put_resource("web", resource("vpc"))
    elsewhere = {**stale, "host": "build-agent-7"}  # another host: cannot tell whether it runs, so refused
    s3.put_object(Bucket=STATE_BUCKET, Key="platform/prod/locks/web.json", Body=json.dumps(elsewhere).encode())
    with pytest.raises(DeploymentLocked, match="build-agent-7"):
        with store.lock("web", "us-east-1", "inference"):
            pass
    store.unlock("web")
    with store.lock("web", "us-east-1", "inference"):
        pass


def test_a_missing_state_bucket_is_one_clear_error(aws):
    from neurondeploy.engine.state import StateError

    with pytest.raises(StateError, match="state bucket no-such-bucket"):
        S3StateStore("s3://no-such-bucket/x").get("web")


def test_the_ec2_template_applies_reapplies_and_destroys_with_state_in_s3(world, artifact, state_uri, aws):  # noqa: F811
    loaded, zone = world
    state = open_state(state_uri)
    _, first = apply_once(loaded, state, artifact)
    assert all(r.complete for r in S3StateStore(state_uri).get(NAME).resources.values())  # another reader sees it
    again, second = apply_once(loaded, state, artifact)
    assert second.mutating_calls() == [] and again.created == []  # state traffic goes through its own transport
    t = transport()
    report = destroy(NAME, Executor(t, state), t, state)
    assert report.clean and tagged(transport(), zone) == []
    assert state.get(NAME) is None
    keys = [o["Key"] for o in aws.client("s3").list_objects_v2(Bucket=STATE_BUCKET).get("Contents", [])]
    assert keys == ["platform/prod/meta.json"]  # the state's lineage outlives its deployments


def test_the_cli_takes_an_s3_state_location(state_uri, capsys):
    from neurondeploy.cli.main import main

    store = S3StateStore(state_uri)
    with store.lock("web", "us-east-1", "inference"):
        store.put_resource("web", resource("vpc"))
    assert main(["status", "web", "--state", state_uri]) == 0
    assert "web (inference, us-east-1)\n" in (out := capsys.readouterr().out) and "  1 resources" in out
