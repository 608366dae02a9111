"""SageMaker's host names for a replayed multi-instance job: every container resolves ``algo-1`` .. ``algo-N`` to
its peers (the training toolkit blocks until each resolves, and torchrun's rendezvous dials ``algo-1``). Here the
hosts are processes on one machine, each given a loopback address of its own (127.0.0.N), through a private
``/etc/hosts``: each host's command runs in a mount namespace of its own (``unshare -m``, or ``unshare -rm`` as a
user namespace where this process is not root) with a copy of this machine's hosts file plus those names bind-mounted
over /etc/hosts. The network is this machine's loopback, shared: a port one host listens on is taken for all."""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import subprocess
from pathlib import Path

from neurondeploy.replay.sandbox import ReplayError


def loopback_address(index: int) -> str:
    """The address of host ``algo-<index>`` (1-based)."""
    return f"127.0.0.{index}"


@functools.cache
def unshare_command() -> list[str] | None:
    """The ``unshare`` that gives a command a private mount namespace here, or None when none is allowed."""
    if not shutil.which("unshare"):
        return None
    for command in (["unshare", "-m"], ["unshare", "-rm"]) if os.geteuid() == 0 else (["unshare", "-rm"],):
        probe = [*command, "sh", "-c", "mount --bind /etc/hosts /etc/hosts"]
        if subprocess.run(probe, capture_output=True, timeout=30).returncode == 0:
            return command
    return None


def hosts_file(directory: Path, hosts: list[str]) -> Path:
    """This machine's /etc/hosts, then one line per host at its own loopback address."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "hosts"
    lines = [f"{loopback_address(i)} {host}\n" for i, host in enumerate(hosts, 1)]
    path.write_text(Path("/etc/hosts").read_text() + "".join(lines))
    return path


# In the host's mount namespace, its /opt/ml directory is bound at /opt/ml, where the container has it: code that
# names SageMaker's paths itself (NxD Training's config does) finds them. This machine has no /opt/ml, and making one
# would change it: /opt is covered with a tmpfs holding /opt/ml and each of its own entries bound back.
_OPT_ML = """
set -e
opt_ml=$1; kept=$2; shift 2
if [ ! -e /opt/ml ]; then
  mkdir -p "$kept"; mount --bind /opt "$kept"; mount -t tmpfs neurondeploy-opt /opt
  for entry in "$kept"/* "$kept"/.[!.]*; do
    [ -e "$entry" ] || continue
    name=$(basename "$entry")
    if [ -d "$entry" ]; then mkdir "/opt/$name"; else touch "/opt/$name"; fi
    mount --bind "$entry" "/opt/$name"
  done
  mkdir /opt/ml
fi
mount --bind "$opt_ml" /opt/ml
"""


def with_host_names(command: list[str], hosts_path: Path, opt_ml: Path | None = None) -> list[str]:
    """``command`` run where ``/etc/hosts`` is ``hosts_path`` (module doc), and, given ``opt_ml``, where /opt/ml is
    that directory. Raises :class:`ReplayError` when this machine allows no mount namespace."""
    unshare = unshare_command()
    if unshare is None:
        raise ReplayError(
            "the replay names its hosts algo-1..algo-N through a private /etc/hosts, and this machine allows no "
            "mount namespace (unshare -m / -rm)",
            "replay on a machine that allows unprivileged user namespaces, or as root",
        )
    mount = f"mount --bind {shlex.quote(str(hosts_path))} /etc/hosts"
    if opt_ml is None or not Path("/opt").is_dir():
        return [*unshare, "sh", "-c", f'{mount} && exec "$@"', "sh", *command]
    kept = hosts_path.parent / "opt"  # where /opt itself stays reachable while the tmpfs covers it
    script = f'{_OPT_ML}{mount}\nexec "$@"'
    return [*unshare, "sh", "-c", script, "sh", str(opt_ml), str(kept), *command]
