"""An apply killed right after AWS carried out a mutating call (SIGKILL: no exception handler, no state write after
the call), then re-applied through the CLI: it converges to the resources of an undisturbed apply, deletes nothing,
and destroy leaves nothing. Against a moto server over HTTP.

The kill is injected into the CLI subprocess by a ``sitecustomize`` module on its path: it lets the k-th mutating
call reach AWS and then ends the process with ``os._exit`` before the answer is used, as ``kill -9`` would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from support.ec2_deployment import AMI_PARAMETER, NAME, count_resources, tagged, transport

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.usefixtures("cpu_standin"),
]  # CPU artifacts stand in for NEFFs, on purpose

KILLER = textwrap.dedent(
    """
    import os
    from neurondeploy.aws import transport

    _call, _seen = transport.AwsTransport.call, [0]

    def call(self, service, operation, params):
        response = _call(self, service, operation, params)
        if transport.is_mutating(operation) and operation == os.environ["KILL_AFTER"]:
            os._exit(137)  # AWS did it; nobody hears back
        return response

    transport.AwsTransport.call = call
    """
)


def cli(args, state, *, kill_after: str | None = None, tmp_path=None) -> subprocess.CompletedProcess:
    env = os.environ.copy()
    env["NEURONDEPLOY_STATE"] = str(state)
    if kill_after:
        hook = tmp_path / "kill-hook"
        hook.mkdir(exist_ok=True)
        (hook / "sitecustomize.py").write_text(KILLER)
        env["PYTHONPATH"] = os.pathsep.join([str(hook), env.get("PYTHONPATH", "")])
        env["KILL_AFTER"] = kill_after
    return subprocess.run([sys.executable, "-m", "neurondeploy.cli", *args], capture_output=True, text=True, env=env)


@pytest.mark.parametrize("operation", ["CreateVpc", "CreateLoadBalancer", "CreateAutoScalingGroup"])
def test_an_apply_killed_after_a_create_converges_on_reapply(world, artifact, tmp_path, operation):  # noqa: F811
    loaded, zone = world
    args = ["apply", loaded.source.file, "--artifact", str(artifact), "--ami-ssm-parameter", AMI_PARAMETER,
            "--wait-delay-s", "1", "--sequential", "--yes", "--json", "--no-smoke"]  # fmt: skip
    state = tmp_path / "state.db"
    killed = cli(args, state, kill_after=operation, tmp_path=tmp_path)
    assert killed.returncode == 137, killed.stderr
    made = count_resources(transport(), zone)
    resumed = cli(args, state)
    assert resumed.returncode == 0, resumed.stderr
    assert "adopted" in resumed.stderr, resumed.stderr  # what the killed call made, taken over
    after = count_resources(transport(), zone)
    assert all(after.get(kind, 0) >= count for kind, count in made.items())  # nothing it made was deleted
    again = cli(args, state)
    assert again.returncode == 0 and json.loads(again.stdout)["mutating_calls"] == 0
    reference = {"ec2:vpc": 1, "elbv2:load-balancer": 1, "autoscaling:group": 1, "elbv2:listener": 2}
    assert {kind: after.get(kind) for kind in reference} == reference  # no second copy of anything
    gone = cli(["destroy", NAME, "--yes"], state)
    assert gone.returncode == 0, gone.stderr
    assert tagged(transport(), zone) == []
