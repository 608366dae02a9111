"""What every replay shares: the sandbox root for host paths, S3 reads and writes through the transport, the
processes it starts (the container's or the unit's command) and the health check it holds them to."""

from __future__ import annotations

import io
import os
import signal
import socket
import subprocess
import sys
import sysconfig
import tarfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from neurondeploy.aws.paging import Paged
from neurondeploy.aws.transport import AwsTransport
from neurondeploy.errors import NeurondeployError
from neurondeploy.resources.naming import split_s3
from neurondeploy.standin import CPU_STANDIN_ENV, CPU_STANDIN_REASON

# What a process started by a replay inherits from this one: where to find programs, and how to reach AWS (on AWS the
# instance or execution role gives credentials; here the caller's credentials and endpoint stand in for the role).
PASSED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR")
AWS_ENV_PREFIXES = ("AWS_",)
STOP_GRACE_S = 20


class ReplayError(NeurondeployError):
    exit_code = 9


def free_port() -> int:
    """A loopback port no one listens on now: where a replayed container's fixed port (8080, 29500) goes here."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def host_path(root: Path, path: str) -> Path:
    """Where the host path ``path`` (absolute, as AWS's host or container sees it) lives in the sandbox ``root``."""
    return root / path.lstrip("/")


def process_env(*layers: Mapping[str, str], aws: bool = False) -> dict[str, str]:
    """A clean environment, as a container or a systemd unit starts with (not this process's), plus ``layers`` in
    order, plus the CPU stand-in flag. ``aws``: the caller's AWS_* settings, standing in for the role."""
    env = {key: os.environ[key] for key in PASSED_ENV if key in os.environ}
    if aws:
        env.update({k: v for k, v in os.environ.items() if k.startswith(AWS_ENV_PREFIXES)})
    for layer in layers:
        env.update(layer)
    env[CPU_STANDIN_ENV] = CPU_STANDIN_REASON
    return env


# --- S3, as the service fetches and stores -------------------------------------------------------------------


def s3_bytes(transport: AwsTransport, uri: str) -> bytes:
    bucket, key = split_s3(uri)
    return transport.call("s3", "GetObject", {"Bucket": bucket, "Key": key})["Body"].read()


def s3_download_prefix(transport: AwsTransport, uri: str, directory: Path) -> list[Path]:
    """Every object under ``uri`` into ``directory`` by its key relative to the prefix (SageMaker's S3Prefix channels
    and checkpoint download)."""
    bucket, prefix = split_s3(uri)
    prefix = prefix.rstrip("/") + "/" if prefix else ""
    written = []
    for page in Paged(transport).call("s3", "ListObjectsV2", {"Bucket": bucket, "Prefix": prefix}):
        for item in page.get("Contents", []):
            relative = item["Key"][len(prefix) :]
            if not relative or relative.endswith("/"):
                continue
            target = (directory / relative).resolve()
            if directory.resolve() not in target.parents:
                raise ReplayError(f"s3://{bucket}/{item['Key']} would land outside {directory}", "rename the object")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(s3_bytes(transport, f"s3://{bucket}/{item['Key']}"))
            written.append(target)
    return written


def s3_put(transport: AwsTransport, uri: str, body: bytes) -> None:
    bucket, key = split_s3(uri)
    transport.call("s3", "PutObject", {"Bucket": bucket, "Key": key, "Body": body})


def unpack(archive: bytes, directory: Path) -> None:
    """A .tar.gz into ``directory``; members that would leave it (absolute, .., links out) are refused."""
    directory.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        tar.extractall(directory, filter="data")


def pack(directory: Path) -> bytes:
    """``directory`` as SageMaker packs /opt/ml/model: a .tar.gz of its contents."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path in sorted(directory.rglob("*")):
            if path.is_file():
                tar.add(path, arcname=path.relative_to(directory).as_posix())
    return buffer.getvalue()


# --- a host's Python ------------------------------------------------------------------------------------------

WITHOUT = ("neurondeploy", "__editable__", "__editable___neurondeploy")  # what a host's Python must not see yet


def python_standin(directory: Path, root: Path, ahead: Path | None = None) -> Path:
    """A venv at ``directory`` standing in for a host's or image's Python (the DLAMI's Neuron venv, the DLC's):
    its interpreter sees this machine's packages minus neurondeploy (through a directory of links and a .pth
    file), behind the packages in ``ahead`` (the image's own versions where they differ from this machine's), so
    neurondeploy is there only once the replayed boot or container installs it; ``pip`` is that interpreter's
    ``-m pip``."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(directory)], check=True)
    mirror = root / ".replay" / f"site-packages-{directory.name}"
    mirror.mkdir(parents=True, exist_ok=True)
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.startswith(WITHOUT) and entry.suffix != ".pth":
            (mirror / entry.name).symlink_to(entry)
    site = Path(
        subprocess.run(
            [str(directory / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    (site / "host-standin.pth").write_text("".join(f"{path}\n" for path in (ahead, mirror) if path))
    script(directory / "bin" / "pip", f'exec "{directory}/bin/python" -m pip "$@"')
    return directory


def script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


# --- processes -----------------------------------------------------------------------------------------------


def _die_with_parent() -> None:
    """Linux: the started process gets SIGTERM if we die first, so nothing a replay started outlives it."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


class Logged:
    """A process whose output goes to ``self.log``."""

    log: Path

    def output(self, last: int = 4000) -> str:
        try:
            return self.log.read_text(errors="replace")[-last:]
        except OSError:
            return ""


@dataclass
class Started(Logged):
    """A process a replay started, in its own process group, its output in ``log``."""

    command: list[str]
    process: subprocess.Popen
    log: Path
    notes: list[str] = field(default_factory=list)
    lock: object | None = None  # an open file holding a machine-wide lock while the process runs

    def returncode(self) -> int | None:
        return self.process.poll()

    def stop(self) -> None:
        """SIGTERM to the group (a container's stop), SIGKILL after the grace period."""
        try:
            if self.process.poll() is None:
                os.killpg(self.process.pid, signal.SIGTERM)
                self.process.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        except ProcessLookupError:
            pass
        try:  # what the leader started may outlive it in the group (TorchServe's Java frontend and workers)
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if self.lock is not None:
            self.lock.close()
            self.lock = None


def start(command: list[str], *, env: dict[str, str], cwd: Path, log: Path) -> Started:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as handle:
        process = subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
    return Started(command, process, log)


def wait_for_ping(started, url: str, timeout_s: float, what: str) -> float:
    """Poll ``url`` (GET /ping) until it answers 200, as SageMaker's and the ALB's health checks do; seconds taken.
    The process exiting or the timeout passing is a failure naming the process's last output. ``started`` has
    ``returncode()`` (None while it runs), ``output()`` and ``log``: a :class:`Started`, or a unit's process."""
    began = time.monotonic()
    last = "not listening yet"
    while time.monotonic() - began < timeout_s:
        if started.returncode() is not None:
            raise ReplayError(
                f"{what} exited with {started.returncode()} before {url} answered: {started.output(600)!r}",
                f"its full output is in {started.log}",
            )
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return time.monotonic() - began
        except urllib.error.HTTPError as exc:
            last = f"HTTP {exc.code}"
        except (urllib.error.URLError, OSError) as exc:
            last = str(exc)
        time.sleep(0.2)
    raise ReplayError(
        f"{what}: {url} did not answer 200 within {timeout_s:.0f} s ({last})",
        f"AWS would fail it the same way; its output is in {started.log}",
    )
