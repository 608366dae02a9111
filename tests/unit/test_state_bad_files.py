"""A state path that cannot be used is one line and exit 5 from every command that opens it, never a traceback
or exit 70, and the file stays as it was: corrupt, truncated, read-only, a directory, a path under a file.

Read-only is a real permission condition: as a normal user, chmod; as root (where chmod stops nothing) the CLI
runs without CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH (``setpriv``), so the kernel enforces the mode bits."""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from neurondeploy.cli.main import main
from neurondeploy.engine.state import ResourceState, StateError, StateStore

REPO = Path(__file__).resolve().parents[2]
COMMANDS = [["status"], ["status", "web"], ["unlock", "web"], ["drift", "web"], ["destroy", "web"]]


def resource(name: str) -> ResourceState:
    return ResourceState(name, "ec2:vpc", {"VpcId": "vpc-" + "0" * 200}, 1, 1, "h", [], [], True, 1.0, -1)


def real_state(path: Path, resources: int = 40) -> Path:
    store = StateStore(path)
    with store.lock("web", "us-east-1", "inference"):
        for i in range(resources):
            store.put_resource("web", resource(f"r{i}"))
    return path


def snapshot(directory: Path) -> dict[str, str]:
    """Every file under ``directory`` and its sha256: a refused state must change nothing and create nothing."""
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        for p in sorted(directory.rglob("*"))
    }


def cli(argv: list[str], state: Path, monkeypatch, capsys) -> tuple[int, str, str]:
    monkeypatch.setenv("NEURONDEPLOY_STATE", str(state))
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line(err: str, state: Path) -> None:
    assert err.count("\n") == 1 and err.startswith(f"error: state {state} "), err
    assert "Traceback" not in err and "internal error" not in err
    assert "NEURONDEPLOY_STATE" in err  # every hint says where else state can live


# --- corrupt, truncated, directory, path under a file ---------------------------------------------------------------


def random_bytes(tmp_path: Path) -> Path:
    path = tmp_path / "state.db"
    path.write_bytes(os.urandom(16384))
    return path


def short_garbage(tmp_path: Path) -> Path:
    path = tmp_path / "state.db"
    path.write_text("not a database\n")
    return path


def truncated(fraction: float):
    def make(tmp_path: Path) -> Path:
        whole = real_state(tmp_path / "whole" / "state.db").read_bytes()
        shutil.rmtree(tmp_path / "whole")
        path = tmp_path / "state.db"
        path.write_bytes(whole[: int(len(whole) * fraction)])
        return path

    return make


def first_page_only(tmp_path: Path) -> Path:
    whole = real_state(tmp_path / "whole" / "state.db").read_bytes()
    shutil.rmtree(tmp_path / "whole")
    path = tmp_path / "state.db"
    path.write_bytes(whole[:4096])
    return path


def one_byte_short(tmp_path: Path) -> Path:
    whole = real_state(tmp_path / "whole" / "state.db").read_bytes()
    shutil.rmtree(tmp_path / "whole")
    path = tmp_path / "state.db"
    path.write_bytes(whole[:-1])
    return path


def a_directory(tmp_path: Path) -> Path:
    path = tmp_path / "state.db"
    path.mkdir()
    (path / "keep").write_text("x")
    return path


def under_a_file(tmp_path: Path) -> Path:
    (tmp_path / "plain").write_text("a file, not a directory")
    return tmp_path / "plain" / "state.db"


def deep_under_a_file(tmp_path: Path) -> Path:
    (tmp_path / "plain").write_text("a file, not a directory")
    return tmp_path / "plain" / "more" / "state.db"


BAD = {
    "random-bytes": (random_bytes, "is not a SQLite database", True),
    "short-garbage": (short_garbage, "is not a SQLite database", True),
    "first-half": (truncated(0.5), "is damaged or truncated", True),
    "first-page-only": (first_page_only, "is damaged or truncated", True),
    "one-byte-short": (one_byte_short, "is truncated or damaged", True),
    "directory": (a_directory, "is a directory, not a file", False),
    "under-a-file": (under_a_file, "cannot be created: {tmp}/plain is a file, not a directory", False),
    "deep-under-a-file": (deep_under_a_file, "cannot be created: {tmp}/plain is a file, not a directory", False),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_state_path_is_one_line_and_exit_5_for_every_command(case, tmp_path, monkeypatch, capsys):
    make, problem, restorable = BAD[case]
    state = make(tmp_path)
    before = snapshot(tmp_path)
    for argv in COMMANDS:
        code, out, err = cli(argv, state, monkeypatch, capsys)
        assert code == 5, (argv, err)
        assert out == ""
        assert_one_line(err, state)
        assert err.startswith(f"error: state {state} {problem.format(tmp=tmp_path)}"), err
        if restorable:  # the recovery: a backup, the S3 backend, or rebuilding from what AWS has tagged
            assert "restore it from a backup" in err and "S3 state backend" in err
            assert "`neurondeploy import NAME`" in err
    assert snapshot(tmp_path) == before  # nothing changed, nothing created (no -wal, no -shm, no directory)
    with pytest.raises(StateError):
        StateStore(state)


def test_an_empty_file_is_a_new_state(tmp_path):
    path = tmp_path / "state.db"
    path.touch()  # what mktemp or touch leaves: SQLite makes it a database, and so does neurondeploy
    store = StateStore(path)
    assert store.names() == [] and len(store.lineage) == 32


# --- read-only ---------------------------------------------------------------------------------------------------


def without_permission_override() -> list[str]:
    """Argv prefix under which this user's writes obey file modes (empty unless root)."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: cannot make a read-only condition root respects")
    return [setpriv, "--bounding-set=-dac_override,-dac_read_search"]


def run_cli(argv: list[str], state: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NEURONDEPLOY_STATE": str(state)}
    command = [*without_permission_override(), sys.executable, "-m", "neurondeploy.cli", *argv]
    return subprocess.run(command, env=env, capture_output=True, text=True, cwd=REPO, timeout=120)


@pytest.fixture
def restore_modes(tmp_path):
    """Give every path back its write bits afterwards, so pytest can clean up."""
    yield
    for path in [tmp_path, *tmp_path.rglob("*")]:
        path.chmod(path.stat().st_mode | stat.S_IWUSR | stat.S_IXUSR * path.is_dir())


def locked_by_another_host(path: Path) -> Path:
    """A state whose unlock must write: web's lock is held by a process on another host."""
    real_state(path, resources=3)
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("UPDATE deployments SET lock_pid = 4321, lock_host = 'build-host-2', lock_since = 1")
    db.close()
    return path


def assert_really_read_only(path: Path) -> None:
    probe = subprocess.run(
        [*without_permission_override(), sys.executable, "-c", f"open({str(path)!r}, 'ab')"], capture_output=True
    )
    if probe.returncode == 0:
        pytest.skip(f"{path} stays writable here even without write permission (file system ignores modes)")


def test_a_read_only_state_file_reads_but_refuses_writes(tmp_path, restore_modes):
    state = locked_by_another_host(tmp_path / "state.db")
    state.chmod(0o444)
    assert_really_read_only(state)
    before = hashlib.sha256(state.read_bytes()).hexdigest()

    shown = run_cli(["status", "web"], state)
    assert (
        shown.returncode == 0
        and shown.stdout.startswith("web (inference, us-east-1)\n")
        and "  3 resources" in shown.stdout
    ), shown.stderr

    refused = run_cli(["unlock", "web"], state)  # a write: the lock must be cleared
    assert refused.returncode == 5, refused.stderr
    assert refused.stdout == ""
    assert_one_line(refused.stderr, state)
    assert refused.stderr.startswith(f"error: state {state} is read-only, and this command writes to it")
    assert "writable" in refused.stderr
    assert hashlib.sha256(state.read_bytes()).hexdigest() == before


def test_a_state_in_a_read_only_directory_is_one_line(tmp_path, restore_modes):
    directory = tmp_path / "states"
    directory.mkdir()
    existing = locked_by_another_host(directory / "state.db")
    before = snapshot(directory)
    directory.chmod(0o555)
    assert_really_read_only(directory / "probe")

    for state, argv, problem in [
        (directory / "new.db", ["status"], "cannot be created: Permission denied"),
        (directory / "sub" / "new.db", ["unlock", "web"], "cannot be created: Permission denied"),
        (existing, ["status"], "is in a read-only directory: SQLite cannot create state.db-wal and state.db-shm"),
        (existing, ["unlock", "web"], "is in a read-only directory"),
    ]:
        result = run_cli(argv, state)
        assert result.returncode == 5, (state, result.stderr)
        assert_one_line(result.stderr, state)
        assert result.stderr.startswith(f"error: state {state} {problem}"), result.stderr
        assert "writable" in result.stderr
    assert snapshot(directory) == before


# --- rows whose JSON decodes to the wrong type ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("column", "value"),
    [("outputs", "[1]"), ("delete_requests", '{"x": 1}'), ("depends_on", "7"), ("create_requests", '["a"]')],
)
@pytest.mark.parametrize("argv", [["status"], ["status", "web"], ["drift", "web"], ["destroy", "web", "--yes"]])
def test_a_row_whose_json_is_the_wrong_type_is_one_line_for_every_command(
    column, value, argv, tmp_path, monkeypatch, capsys
):
    state = real_state(tmp_path / "state.db", resources=2)
    db = sqlite3.connect(state, isolation_level=None)
    db.execute(f"UPDATE resources SET {column} = ? WHERE name = 'r1'", (value,))
    db.close()
    before = snapshot(tmp_path)
    code, out, err = cli(argv, state, monkeypatch, capsys)
    assert code == 5, err
    assert_one_line(err, state)
    assert "deployment web, resource r1" in err and column in err
    assert snapshot(tmp_path) == before  # nothing was changed or deleted
