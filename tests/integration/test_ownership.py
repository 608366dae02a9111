"""Ownership through the CLI, as a user runs it: a state deletes only what carries its lineage.

The scenario that used to delete a live deployment: apply the EC2 template with one state, then apply (twice) and
destroy the same spec with ``NEURONDEPLOY_STATE`` pointing at another file. Against a moto server over HTTP.
"""

from __future__ import annotations

import json

import pytest
from support.cli import run_cli
from support.ec2_deployment import NAME, apply_args, tagged, transport

from neurondeploy.engine.ownership import NEVER_ORPHANS
from neurondeploy.engine.state import StateStore

pytestmark = [
    pytest.mark.integration,
    pytest.mark.usefixtures("cpu_standin"),
]  # CPU artifacts stand in for NEFFs, on purpose


@pytest.fixture(autouse=True)
def _tags(launch_template_tags):
    """moto's launch template tags gap (conftest): `import` retags the template."""


def live(zone) -> set[tuple[str, str, str | None]]:
    """What carries the deployment's tag, with its lineage (instances and registrations: their group's)."""
    return {(item.type, item.id, item.lineage) for item in tagged(transport(), zone) if item.type not in NEVER_ORPHANS}


@pytest.mark.slow
def test_another_state_is_refused_and_the_live_deployment_keeps_every_resource(world, artifact, tmp_path):  # noqa: F811
    loaded, zone = world
    owner = tmp_path / "state.db"
    first = run_cli(*apply_args(loaded, artifact), state=owner, state_in_env=True)
    assert first.returncode == 0, first.stderr
    lineage = StateStore(owner).lineage
    before = live(zone)
    assert len(before) >= 20 and {item[2] for item in before} == {lineage}  # everything carries the owner's lineage

    other = tmp_path / "other.db"
    for attempt in (1, 2):  # the second run once swept the live deployment as "orphans of an interrupted apply"
        refused = run_cli(*apply_args(loaded, artifact), state=other, state_in_env=True)
        assert refused.returncode == 6, (attempt, refused.stderr)
        error = refused.stderr.strip().splitlines()[-1]
        assert f"deployment {NAME} exists in AWS under another state (lineage {lineage})" in error, error
        assert f"neurondeploy import {NAME}" in error and "Traceback" not in refused.stderr
        assert live(zone) == before, attempt
        assert StateStore(other).get(NAME) is None  # the refused apply recorded nothing either

    destroy = run_cli("destroy", NAME, "--region", "us-east-1", "--yes", state=other, state_in_env=True)
    assert destroy.returncode == 6 and "belongs to another state" in destroy.stderr, destroy.stderr
    assert live(zone) == before

    again = run_cli(*apply_args(loaded, artifact), state=owner, state_in_env=True)  # the owner still converges
    assert again.returncode == 0 and json.loads(again.stdout)["mutating_calls"] == 0, again.stderr

    # `import` moves the deployment into the other state: its apply then adopts every object (no second copy), the
    # first state no longer owns any of it, and the other state's destroy leaves nothing.
    imported = run_cli("import", NAME, "--region", "us-east-1", "--zone", zone, state=other, state_in_env=True)
    assert imported.returncode == 0, imported.stderr
    adopted = run_cli(*apply_args(loaded, artifact), state=other, state_in_env=True)
    assert adopted.returncode == 0, adopted.stderr
    new_lineage = StateStore(other).lineage
    assert live(zone) == {(kind, ident, new_lineage) for kind, ident, _ in before}
    assert all(r.complete for r in StateStore(other).get(NAME).resources.values())
    assert run_cli(*apply_args(loaded, artifact), state=owner, state_in_env=True).returncode == 6
    gone = run_cli("destroy", NAME, "--yes", state=other, state_in_env=True)
    assert gone.returncode == 0, gone.stderr
    assert live(zone) == set()
