"""One claim per deployment, through the CLI against a moto server: two states never both build one deployment.

The failure this covers: two applies of one spec from two state files, started together, both passed the ownership
sweep (nothing existed yet) and both created a VPC, a certificate and a DNS record before one failed. What moto holds
is counted before and after, not what our code says it did.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from support.cli import run_cli
from support.ec2_deployment import NAME, apply_args, counts, transport

from neurondeploy.engine.claims import read_claim, take_claim
from neurondeploy.engine.state import StateStore
from neurondeploy.resources.model import PlanContext
from neurondeploy.resources.naming import bucket_name
from neurondeploy.resources.s3 import claim_key

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("cpu_standin")]


@pytest.fixture(autouse=True)
def _tags(launch_template_tags):
    """moto's launch template tags gap (conftest)."""


def shared_bucket() -> str:
    return bucket_name("us-east-1", PlanContext(account_id=transport().call("sts", "GetCallerIdentity", {})["Account"]))


@pytest.mark.slow
def test_two_states_applying_together_make_one_deployment(aws, world, artifact, tmp_path):
    loaded, zone = world
    before = counts(aws, zone)
    states = [tmp_path / "first.db", tmp_path / "second.db"]
    with ThreadPoolExecutor(2) as pool:  # both processes start together: neither sees the other's objects yet
        runs = list(pool.map(lambda state: run_cli(*apply_args(loaded, artifact), state=state), states))
    codes = sorted(run.returncode for run in runs)
    assert codes == [0, 6], [run.stderr[-2000:] for run in runs]
    winner, loser = (runs[0], runs[1]) if runs[0].returncode == 0 else (runs[1], runs[0])
    error = loser.stderr.strip().splitlines()[-1]
    assert f"deployment {NAME} is claimed by another state" in error and "Traceback" not in loser.stderr, error
    after = counts(aws, zone)
    made = {kind: after[kind] - before[kind] for kind in after}
    # One deployment's worth: one of each, and no second VPC, certificate or record.
    assert made["vpcs"] == 1 and made["certificates"] == 1 and made["load balancers"] == 1, made
    assert made["auto scaling groups"] == 1 and made["launch templates"] == 1, made
    loser_state = states[runs.index(loser)]
    assert StateStore(loser_state).get(NAME) is None or not StateStore(loser_state).get(NAME).resources
    assert json.loads(winner.stdout)["mutating_calls"] > 0


def test_a_claimed_name_refuses_another_state_with_nothing_made_and_import_moves_the_claim(
    aws, world, artifact, tmp_path
):
    """A claim left by a state whose apply created nothing (its file since lost): the next state's apply is refused
    before any create, `import` takes the claim over, and destroy gives it back."""
    loaded, zone = world
    bucket = shared_bucket()
    aws.client("s3").create_bucket(Bucket=bucket)
    take_claim(transport(), bucket, NAME, "0" * 32, "/lost/laptop/state.db")
    before = counts(aws, zone)

    state = tmp_path / "state.db"
    refused = run_cli(*apply_args(loaded, artifact), state=state)
    assert refused.returncode == 6, refused.stderr
    error = refused.stderr.strip().splitlines()[-1]
    assert f"deployment {NAME} is claimed by another state (lineage {'0' * 32}, /lost/laptop/state.db" in error, error
    assert f"neurondeploy import {NAME}" in error and "Traceback" not in refused.stderr
    assert counts(aws, zone) == before  # nothing made
    assert read_claim(transport(), bucket, NAME)["lineage"] == "0" * 32  # and the claim is left as it was

    imported = run_cli("import", NAME, "--region", "us-east-1", "--zone", zone, state=state)
    assert imported.returncode == 0, imported.stderr
    lineage = StateStore(state).lineage
    assert read_claim(transport(), bucket, NAME)["lineage"] == lineage

    applied = run_cli(*apply_args(loaded, artifact), state=state)
    assert applied.returncode == 0, applied.stderr
    again = run_cli(*apply_args(loaded, artifact), state=state)  # the claim is read, not written again
    assert again.returncode == 0 and json.loads(again.stdout)["mutating_calls"] == 0, again.stderr

    gone = run_cli("destroy", NAME, "--yes", state=state)
    assert gone.returncode == 0, gone.stderr
    assert read_claim(transport(), bucket, NAME) is None  # destroy gives the name back
    keys = [o["Key"] for o in aws.client("s3").list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert claim_key(NAME) not in keys
