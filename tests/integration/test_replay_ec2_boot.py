"""The EC2 template applied to a moto server, then its launch template's UserData run as cloud-init would run it
(replay.ec2_boot): it downloads the wheel apply uploaded (sha256 checked), installs it into the DLAMI venv
stand-in, fetches the artifact, and the unit it installs serves /ping and /invocations."""

from __future__ import annotations

import json
import socket
import subprocess
import urllib.request
from pathlib import Path

import pytest
from support.ec2_deployment import NAME, apply_once

from neurondeploy.engine.state import StateStore
from neurondeploy.replay.ec2_boot import replay_boot
from neurondeploy.replay.sandbox import ReplayError
from neurondeploy.specs import parse_spec
from neurondeploy.standin import CPU_STANDIN_ENV, CPU_STANDIN_REASON
from neurondeploy.wheel import toolkit_wheel

# apply sends a CPU trace to inf2 here, then the replay runs it on the CPU: both say so (NEURONDEPLOY_CPU_STANDIN)
pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("cpu_standin")]
BUCKET = "neurondeploy-123456789012-us-east-1"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# A container env value holding every character systemd or a shell treats specially (but no control character,
# which validate refuses): the unit's server must see it byte for byte.
AWKWARD_VALUE = "a \"b\" $HOME ${X} %n %% \\x `id` 'q' ;# UNIT"


def with_port(loaded, port: int):
    """The template as applied, serving on a free port (the machine is shared; 8080 may be taken), with a container
    env value that a shell, a heredoc or systemd would change if it reached them unescaped."""
    text = loaded.source.file and open(loaded.source.file).read()
    awkward = AWKWARD_VALUE.replace("'", "''")
    text = text.replace(
        "  instance_type: inf2.xlarge\n",
        f"  instance_type: inf2.xlarge\n  container:\n    env:\n      NOTE: '{awkward}'\n",
    )
    path = loaded.source.file.replace(".yaml", "-port.yaml")
    text += f"serving:\n  port: {port}\n"
    open(path, "w").write(text)
    return parse_spec(text, file=path, path=Path(path))


def launch_template_data(aws) -> dict:
    """What EC2 holds for the fleet: the default version's data, as an instance would boot it."""
    versions = aws.client("ec2").describe_launch_template_versions(
        LaunchTemplateName=f"{NAME}-lt", Versions=["$Default"]
    )["LaunchTemplateVersions"]
    return versions[0]["LaunchTemplateData"]


def post(url: str, payload: dict):
    request = urllib.request.Request(
        f"{url}/invocations", json.dumps(payload).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def test_the_boot_script_installs_the_uploaded_wheel_and_its_unit_serves(world, artifact, tmp_path, aws):  # noqa: F811
    loaded, _ = world
    loaded = with_port(loaded, free_port())
    apply_once(loaded, StateStore(tmp_path / "state.db"), artifact)
    wheel = toolkit_wheel()
    keys = {o["Key"] for o in aws.client("s3").list_objects_v2(Bucket=BUCKET)["Contents"]}
    wheel_key = next(k for k in keys if k.endswith(wheel.filename))
    assert f"toolkit-{wheel.sha256[:16]}/" in wheel_key and wheel_key.replace(wheel.filename, "constraints.txt") in keys

    boot = replay_boot(launch_template_data(aws), tmp_path / "instance", health_timeout_s=120)
    try:
        # the server is the wheel's: installed into the venv stand-in from the bucket, not this checkout
        located = subprocess.run(
            [str(boot.venv / "bin" / "python"), "-c", "import neurondeploy; print(neurondeploy.__file__)"],
            capture_output=True,
            text=True,
            check=True,
            cwd=tmp_path,  # not this checkout: python -c puts the working directory first on sys.path
        ).stdout.strip()
        assert located.startswith(str(boot.venv)), located
        installed = subprocess.run(
            [str(boot.venv / "bin" / "python"), "-m", "pip", "show", "-f", "neurondeploy"],
            capture_output=True,
            text=True,
            check=True,
            cwd=tmp_path,
        ).stdout
        assert "Location: " + str(boot.venv) in installed
        assert (tmp_path / "instance" / "opt" / "neurondeploy" / "artifact" / "manifest.json").is_file()
        assert "sha256" not in boot.boot_log or "refusing" not in boot.boot_log
        # the unit's server is told, explicitly, that it is a CPU stand-in of the Neuron runtime
        environ = (Path("/proc") / str(boot.server.pid) / "environ").read_bytes().split(b"\0")
        assert f"{CPU_STANDIN_ENV}={CPU_STANDIN_REASON}".encode() in environ
        assert f"NOTE={AWKWARD_VALUE}".encode() in environ  # through the EnvironmentFile, exactly as written
        answer = post(boot.url, {"inputs": [1, 2, 3]})
        assert len(answer) == 16 and all(isinstance(value, float) for value in answer)
        unit_log = (tmp_path / "instance" / "var" / "log" / "neurondeploy.service.log").read_text()
        assert "not applied here: LimitNOFILE, NoNewPrivileges, PrivateTmp" in boot.boot_log, boot.boot_log[-500:]
        assert unit_log is not None
    finally:
        boot.stop()


def test_a_wheel_that_does_not_match_its_sha256_is_refused_at_boot(world, artifact, tmp_path, aws):  # noqa: F811
    loaded, _ = world
    loaded = with_port(loaded, free_port())
    apply_once(loaded, StateStore(tmp_path / "state.db"), artifact)
    s3 = aws.client("s3")
    wheel_key = next(
        o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"] if o["Key"].endswith(toolkit_wheel().filename)
    )
    s3.put_object(Bucket=BUCKET, Key=wheel_key, Body=b"not the build apply uploaded")
    with pytest.raises(ReplayError, match="refusing to install it"):
        replay_boot(launch_template_data(aws), tmp_path / "instance", health_timeout_s=30)
    assert not (tmp_path / "instance" / "run" / "neurondeploy.service.pid").exists()
