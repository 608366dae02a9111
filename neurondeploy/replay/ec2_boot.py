"""EC2 boot replay: the launch template's UserData run as cloud-init runs it (bash, once), in a sandbox root.

Stand-ins, and only these: the host paths the script writes (``/opt``, ``/etc``, ``/var``) are moved under the sandbox
root (the script's text is rewritten at those prefixes), ``systemctl`` is :mod:`systemctl_shim`, and the DLAMI's venv
is a fresh venv at the same (sandboxed) path that sees this machine's packages without neurondeploy (its torch stands
in for the SDK's; a stand-in vLLM can be put ahead of them for the vLLM DLAMI). Everything else is the script's own
doing against S3 (moto in tests): the download, the sha256 checks, ``pip install`` of the uploaded wheel, the artifact
or model, the unit; then the unit's server must answer ``/ping`` as the target group's health check asks.
"""

from __future__ import annotations

import base64
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from neurondeploy.replay import systemctl_shim
from neurondeploy.replay.sandbox import (
    Logged,
    ReplayError,
    host_path,
    process_env,
    python_standin,
    wait_for_ping,
)
from neurondeploy.resources.model import DLAMI_NEURON_VENV
from neurondeploy.standin import CPU_STANDIN_ENV

HOST_PREFIXES = re.compile(r"(?:(?<=^)|(?<=[\s'\"=>(:]))/(?=(?:opt|etc|var)/)", re.MULTILINE)
UNIT = "neurondeploy.service"
HOST_DIRS = ("/opt", "/etc/systemd/system", "/var/log", "/run", "/tmp")


def sandboxed_script(script: str, root: Path) -> str:
    """The boot script with its host paths under ``root``."""
    return HOST_PREFIXES.sub(str(root).rstrip("/") + "/", script)


def user_data_of(launch_template_data: dict) -> str:
    return base64.b64decode(launch_template_data["UserData"]).decode()


def dlami_venv_standin(root: Path, venv: str = DLAMI_NEURON_VENV, ahead: Path | None = None) -> Path:
    """The DLAMI's venv: at its (sandboxed) path, seeing this machine's packages minus neurondeploy, behind
    ``ahead`` (a stand-in of what the DLAMI has and this machine lacks: vLLM)."""
    return python_standin(host_path(root, venv), root, ahead)


@dataclass
class UnitProcess(Logged):
    """The server a unit started, by the pid the shim recorded."""

    pid: int
    log: Path

    def returncode(self) -> int | None:
        try:
            os.kill(self.pid, 0)
        except OSError:
            return -1
        state = Path(f"/proc/{self.pid}/stat")
        if state.is_file() and state.read_text().split(") ", 1)[-1].startswith("Z"):
            return -1
        return None

    def stop(self) -> None:
        try:
            os.killpg(self.pid, signal.SIGTERM)
        except OSError:
            return
        for _ in range(100):
            if self.returncode() is not None:
                return
            time.sleep(0.1)
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except OSError:
            pass


@dataclass
class BootReplay:
    root: Path
    venv: Path
    url: str
    server: UnitProcess
    boot_log: str
    ping_s: float
    notes: list[str] = field(default_factory=list)

    def stop(self) -> None:
        self.server.stop()


def _unit_port(unit_file: Path) -> int:
    command = shlex.split(systemctl_shim.read_unit(unit_file)["ExecStart"][-1])
    return int(command[command.index("--port") + 1])


def replay_boot(
    launch_template_data: dict,
    root: Path,
    *,
    boot_timeout_s: float = 900,
    health_timeout_s: float = 600,
    venv: str = DLAMI_NEURON_VENV,
    venv_ahead: Path | None = None,
) -> BootReplay:
    """Run the UserData of ``launch_template_data`` (as sent in CreateLaunchTemplate) in ``root``, on the DLAMI
    whose venv is ``venv`` (:func:`dlami_venv_standin`), then hold the unit's server to ``health_timeout_s`` for
    /ping. The caller stops it (``.stop()``)."""
    root = Path(root).resolve()
    for directory in HOST_DIRS:  # what any Ubuntu host has before cloud-init runs
        host_path(root, directory).mkdir(parents=True, exist_ok=True)
    venv_dir = dlami_venv_standin(root, venv, venv_ahead)
    shim_bin = root / ".replay" / "bin"
    shim_bin.mkdir(parents=True, exist_ok=True)
    shim = shim_bin / "systemctl"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{systemctl_shim.__file__}" "$@"\n')
    shim.chmod(0o755)
    script = root / ".replay" / "user-data.sh"
    script.write_text(sandboxed_script(user_data_of(launch_template_data), root))
    env = process_env(
        {"PATH": f"{shim_bin}:{os.environ.get('PATH', '/usr/bin:/bin')}", "NEURONDEPLOY_REPLAY_ROOT": str(root)},
        aws=True,  # the instance role, stood in for by the caller's credentials (moto's in tests)
    )
    try:
        boot = subprocess.run(
            ["bash", str(script)], env=env, cwd=root, capture_output=True, text=True, timeout=boot_timeout_s
        )
    except subprocess.TimeoutExpired:
        raise ReplayError(f"the boot script ran past {boot_timeout_s:.0f} s", f"see {script}") from None
    if boot.returncode != 0:
        tail = (boot.stdout + boot.stderr)[-1500:]
        raise ReplayError(f"the boot script exited with {boot.returncode}: {tail}", f"the script is {script}")
    unit_file = root / systemctl_shim.UNIT_DIR / UNIT
    pid_file = root / "run" / f"{UNIT}.pid"
    if not pid_file.is_file():
        raise ReplayError(f"the boot script did not start {UNIT}", "it must end with systemctl enable --now")
    server = UnitProcess(int(pid_file.read_text()), root / "var" / "log" / f"{UNIT}.log")
    url = f"http://127.0.0.1:{_unit_port(unit_file)}"
    try:
        ping_s = wait_for_ping(server, f"{url}/ping", health_timeout_s, UNIT)
    except ReplayError:
        server.stop()
        raise
    notes = [
        "host paths under the sandbox root; systemctl is the replay's shim; the DLAMI venv is a stand-in"
        + (f" with {venv_ahead} ahead" if venv_ahead else ""),
        "the Neuron runtime is a CPU stand-in (" + env[CPU_STANDIN_ENV] + ")",
    ]
    return BootReplay(root, venv_dir, url, server, boot.stdout + boot.stderr, ping_s, notes)
