"""`neurondeploy unlock NAME`: releases a lock whose holder is gone or on another host, refuses one whose holder
runs here, and says so when there is nothing to do. Holders are real processes that took the lock."""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from neurondeploy.cli.main import main
from neurondeploy.engine.state import DeploymentLocked, StateStore, UnknownDeployment

REPO = Path(__file__).resolve().parents[2]
TAKE_LOCK = """
import os, sys
from neurondeploy.engine.state import StateStore
store = StateStore(sys.argv[1])
with store.lock("web", "us-east-1", "inference"):
    print(os.getpid(), flush=True)
    if sys.argv[2] == "die":
        os._exit(0)  # gone without releasing it: a killed apply
    sys.stdin.read()  # hold it until the test closes stdin
"""


@pytest.fixture
def state(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "state.db"
    store = StateStore(path)
    with store.lock("web", "us-east-1", "inference"):
        pass
    monkeypatch.setenv("NEURONDEPLOY_STATE", str(path))
    return path


def holder(path: Path) -> tuple:
    db = sqlite3.connect(path)
    try:
        return db.execute("SELECT lock_pid, lock_host FROM deployments WHERE name = 'web'").fetchone()
    finally:
        db.close()


def unlock(name: str, capsys) -> tuple[int, str, str]:
    code = main(["unlock", name])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_deployment_that_is_not_locked(state, capsys):
    assert unlock("web", capsys) == (0, "web is not locked\n", "")


def test_an_unknown_deployment(state, capsys):
    code, out, err = unlock("nope", capsys)
    assert code not in (0, 70) and out == ""
    assert err == f"error: no deployment nope in state {state} (fix: known: web)\n"
    with pytest.raises(UnknownDeployment):
        StateStore(state).unlock("nope")


def test_a_lock_whose_process_died_on_this_host_is_released(state, capsys):
    dead = subprocess.run(
        [sys.executable, "-c", TAKE_LOCK, str(state), "die"], capture_output=True, text=True, cwd=REPO, check=True
    )
    pid = int(dead.stdout)
    assert holder(state) == (pid, socket.gethostname())  # left behind by the process that died

    code, out, err = unlock("web", capsys)
    assert (code, err) == (0, "")
    assert out.startswith(f"unlocked web: its holder, pid {pid} on this host since ") and out.endswith(" is gone\n")
    assert holder(state) == (None, None)
    assert unlock("web", capsys) == (0, "web is not locked\n", "")


def test_a_live_holders_lock_is_released_only_once_confirmed_naming_the_holder(state, capsys):
    running = subprocess.Popen(
        [sys.executable, "-c", TAKE_LOCK, str(state), "hold"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        pid = int(running.stdout.readline())
        code, out, err = unlock("web", capsys)  # no terminal to ask, no --yes: refused, nothing changed
        assert code == 1 and out == "" and err.count("\n") == 1
        assert f"pid {pid} on this host ({socket.gethostname()})" in err and "still running" in err
        assert "--yes" in err and "kill" not in err
        assert holder(state) == (pid, socket.gethostname())  # untouched
        with pytest.raises(DeploymentLocked):
            StateStore(state).unlock("web")

        code = main(["unlock", "web", "--yes"])
        out, err = capsys.readouterr()
        assert (code, err) == (0, "")
        assert out.startswith(f"unlocked web by force: pid {pid} on this host (since ") and "still runs" in out
        assert holder(state) == (None, None)
    finally:
        running.communicate("", timeout=60)
    assert running.returncode == 0 and holder(state) == (None, None)  # its own release leaves another's lock be


def stale_lock_on_a_reused_pid(state: Path) -> subprocess.Popen:
    """A killed apply's lock whose pid now belongs to an unrelated live process (pids wrap around; after a reboot or
    in a container they start again from 1): the row keeps the dead holder's identity, the pid is the live one's."""
    dead = subprocess.run(
        [sys.executable, "-c", TAKE_LOCK, str(state), "die"], capture_output=True, text=True, cwd=REPO, check=True
    )
    assert holder(state) == (int(dead.stdout), socket.gethostname())
    unrelated = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    db = sqlite3.connect(state, isolation_level=None)
    db.execute("UPDATE deployments SET lock_pid = ? WHERE name = 'web'", (unrelated.pid,))
    db.close()
    return unrelated


def test_a_lock_whose_pid_now_belongs_to_another_process_is_taken_over_and_unlock_releases_it(state, capsys):
    unrelated = stale_lock_on_a_reused_pid(state)
    try:
        with StateStore(state).lock("web", "us-east-1", "inference"):  # an apply takes it over
            assert holder(state) == (os.getpid(), socket.gethostname())
        unrelated.communicate(b"", timeout=60)
        unrelated = stale_lock_on_a_reused_pid(state)
        code, out, err = unlock("web", capsys)
        assert (code, err) == (0, "")
        assert out.startswith(f"unlocked web: its holder, pid {unrelated.pid} on this host since ")
        assert out.endswith(f"is gone (pid {unrelated.pid} is now another process)\n")
        assert holder(state) == (None, None) and unrelated.poll() is None  # the unrelated process is left alone
    finally:
        unrelated.communicate(b"", timeout=60)


def test_a_lock_held_on_another_host_is_released(state, capsys):
    # What another machine's apply wrote: a pid that happens to be alive here must not matter.
    db = sqlite3.connect(state, isolation_level=None)
    db.execute(
        "UPDATE deployments SET lock_pid = ?, lock_host = 'build-host-2', lock_since = 1 WHERE name = 'web'",
        (os.getpid(),),
    )
    db.close()
    with pytest.raises(DeploymentLocked):  # apply still refuses it: it cannot tell whether that process runs
        with StateStore(state).lock("web", "us-east-1", "inference"):
            pass

    code, out, err = unlock("web", capsys)
    assert (code, err) == (0, "")
    assert out.startswith(f"unlocked web: released the lock of pid {os.getpid()} on build-host-2 (since ")
    assert holder(state) == (None, None)
    with StateStore(state).lock("web", "us-east-1", "inference"):  # and now it can be taken
        assert holder(state) == (os.getpid(), socket.gethostname())
