"""Ownership through the CLI, as a user runs it: a state deletes only what carries its lineage.

The scenario that used to delete a live deployment: apply the EC2 template with one state, then apply (twice) and
destroy the same spec with ``NEURONDEPLOY_STATE`` pointing at another file. Against a moto server over HTTP.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from neurondeploy.engine.ownership import NEVER_ORPHANS
from neurondeploy.engine.state import StateStore

from .test_apply import AMI_PARAMETER, NAME, artifact, tagged, transport, world  # noqa: F401  (fixtures)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.usefixtures("cpu_standin"),
]  # CPU artifacts stand in for NEFFs, on purpose


@pytest.fixture(autouse=True)
def _tags(launch_template_tags):
    """moto's launch template tags gap (conftest): `import` retags the template."""


def cli(*args: str, state, env_state: bool = False) -> subprocess.CompletedProcess:
    env = os.environ.copy()
    argv = [sys.executable, "-m", "neurondeploy.cli", *args]
    if env_state:
        env["NEURONDEPLOY_STATE"] = str(state)
    else:
        argv += ["--state", str(state)]
    return subprocess.run(argv, capture_output=True, text=True, env=env)


def apply_args(loaded, artifact_dir) -> list[str]:
    return [
        "apply",
        loaded.source.file,
        "--artifact",
        str(artifact_dir),
        "--ami-ssm-parameter",
        AMI_PARAMETER,
        "--wait-delay-s",
        "1",
        "--yes",
        "--json",
    ]


def live(zone) -> set[tuple[str, str, str | None]]:
    """What carries the deployment's tag, with its lineage (instances and registrations: their group's)."""
    return {(item.type, item.id, item.lineage) for item in tagged(transport(), zone) if item.type not in NEVER_ORPHANS}


def test_another_state_is_refused_and_the_live_deployment_keeps_every_resource(world, artifact, tmp_path):  # noqa: F811
    loaded, zone = world
    owner = tmp_path / "state.db"
    first = cli(*apply_args(loaded, artifact), state=owner, env_state=True)
    assert first.returncode == 0, first.stderr
    lineage = StateStore(owner).lineage
    before = live(zone)
    assert len(before) >= 20 and {item[2] for item in before} == {lineage}  # everything carries the owner's lineage

    other = tmp_path / "other.db"
    for attempt in (1, 2):  # the second run once swept the live deployment as "orphans of an interrupted apply"
        refused = cli(*apply_args(loaded, artifact), state=other, env_state=True)
        assert refused.returncode == 6, (attempt, refused.stderr)
        error = refused.stderr.strip().splitlines()[-1]
        assert f"deployment {NAME} exists in AWS under another state (lineage {lineage})" in error, error
        assert f"neurondeploy import {NAME}" in error and "Traceback" not in refused.stderr
        assert live(zone) == before, attempt
        assert StateStore(other).get(NAME) is None  # the refused apply recorded nothing either

    destroy = cli("destroy", NAME, "--region", "us-east-1", "--yes", state=other, env_state=True)
    assert destroy.returncode == 6 and "belongs to another state" in destroy.stderr, destroy.stderr
    assert live(zone) == before

    again = cli(*apply_args(loaded, artifact), state=owner, env_state=True)  # the owner still converges
    assert again.returncode == 0 and json.loads(again.stdout)["mutating_calls"] == 0, again.stderr

    # `import` moves the deployment into the other state: its apply then adopts every object (no second copy), the
    # first state no longer owns any of it, and the other state's destroy leaves nothing.
    imported = cli("import", NAME, "--region", "us-east-1", "--zone", zone, state=other, env_state=True)
    assert imported.returncode == 0, imported.stderr
    adopted = cli(*apply_args(loaded, artifact), state=other, env_state=True)
    assert adopted.returncode == 0, adopted.stderr
    new_lineage = StateStore(other).lineage
    assert live(zone) == {(kind, ident, new_lineage) for kind, ident, _ in before}
    assert all(r.complete for r in StateStore(other).get(NAME).resources.values())
    assert cli(*apply_args(loaded, artifact), state=owner, env_state=True).returncode == 6
    gone = cli("destroy", NAME, "--yes", state=other, env_state=True)
    assert gone.returncode == 0, gone.stderr
    assert live(zone) == set()
