"""The SQLite state's lineage, schema versions and migrations, and rows written by other versions: real files,
opened by the real StateStore (and by real CLI runs where the user would meet the error)."""

from __future__ import annotations

import hashlib
import re
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from neurondeploy.cli.main import main
from neurondeploy.engine.state import SCHEMA_VERSION, ResourceState, StateError, StateStore

REPO = Path(__file__).resolve().parents[2]

# The schema as neurondeploy shipped it before versioning (user_version 0, no meta table), verbatim.
SCHEMA_V0 = """
CREATE TABLE IF NOT EXISTS deployments (
    name TEXT PRIMARY KEY, region TEXT NOT NULL, kind TEXT NOT NULL, spec_digest TEXT, spec_json TEXT,
    updated REAL NOT NULL, lock_pid INTEGER, lock_host TEXT, lock_since REAL
);
CREATE TABLE IF NOT EXISTS resources (
    deployment TEXT NOT NULL, name TEXT NOT NULL, type TEXT NOT NULL, outputs TEXT NOT NULL,
    completed INTEGER NOT NULL, total INTEGER NOT NULL, create_hash TEXT NOT NULL, delete_requests TEXT NOT NULL,
    depends_on TEXT NOT NULL, taggable INTEGER NOT NULL, created REAL NOT NULL, sequence INTEGER NOT NULL,
    create_requests TEXT NOT NULL DEFAULT '[]',
    PRIMARY KEY (deployment, name)
);
"""
DELETE_VPC = '[{"service": "ec2", "operation": "DeleteVpc", "params": {"VpcId": "vpc-1"}, "wait": null}]'


def resource(name: str, **changes) -> ResourceState:
    values = dict(
        name=name,
        type="ec2:vpc",
        outputs={"VpcId": "vpc-1"},
        completed=1,
        total=1,
        create_hash="h",
        delete_requests=[{"service": "ec2", "operation": "DeleteVpc", "params": {"VpcId": "vpc-1"}, "wait": None}],
        depends_on=[],
        taggable=True,
        created=1.0,
        sequence=-1,
    )
    return ResourceState(**{**values, **changes})


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def sql(path: Path, *statements: str) -> list[tuple]:
    """Run statements on the file as another program (or another neurondeploy version) would; rows of the last."""
    db = sqlite3.connect(path, isolation_level=None)
    try:
        rows: list[tuple] = []
        for statement in statements:
            rows = db.execute(statement).fetchall()
        return rows
    finally:
        db.close()


def columns(path: Path, table: str) -> list[tuple]:
    return sql(path, f"PRAGMA table_info({table})")


def write_v0_state(path: Path, *, with_create_requests: bool = True) -> None:
    """A state file as the unversioned code wrote it: its DDL, WAL, and rows inserted the way it inserted them."""
    schema = (
        SCHEMA_V0
        if with_create_requests
        else SCHEMA_V0.replace(",\n    create_requests TEXT NOT NULL DEFAULT '[]'", "")
    )
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.executescript(schema)
    db.execute(
        "INSERT INTO deployments (name, region, kind, spec_digest, spec_json, updated) "
        "VALUES ('web', 'us-east-1', 'inference', 'digest', '{}', 1.0)"
    )
    values = ["web", "vpc", "ec2:vpc", '{"VpcId": "vpc-1"}', 1, 1, "h", DELETE_VPC, "[]", 1, 1.0, 1]
    if with_create_requests:
        values.append('[{"service": "ec2", "operation": "CreateVpc"}]')
    db.execute(f"INSERT OR REPLACE INTO resources VALUES ({', '.join('?' * len(values))})", values)
    db.close()


# --- lineage -----------------------------------------------------------------------------------------------------


def test_a_fresh_state_gets_a_lineage_once_and_keeps_it(tmp_path):
    path = tmp_path / "state.db"
    store = StateStore(path)
    lineage = store.lineage
    assert re.fullmatch(r"[0-9a-f]{32}", lineage) and uuid.UUID(hex=lineage).version == 4
    assert sql(path, "SELECT value FROM meta WHERE key = 'lineage'") == [(lineage,)]
    assert sql(path, "PRAGMA user_version") == [(SCHEMA_VERSION,)]

    with store.lock("web", "us-east-1", "inference"):
        store.put_resource("web", resource("vpc"))
        store.record_spec("web", "digest", "{}")
    store.unlock("web")
    store.forget("web")
    for _ in range(3):
        assert StateStore(path).lineage == lineage  # every later open reads the same id
    assert StateStore(tmp_path / "other.db").lineage != lineage  # another state is another lineage
    with pytest.raises(AttributeError):
        store.lineage = "0" * 32  # not settable


def test_processes_opening_one_new_file_at_once_agree_on_its_lineage(tmp_path):
    path = tmp_path / "state.db"
    code = "import sys\nfrom neurondeploy.engine.state import StateStore\nprint(StateStore(sys.argv[1]).lineage)"
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True, cwd=REPO)
        for _ in range(8)
    ]
    lineages = {proc.communicate(timeout=60)[0].strip() for proc in procs}
    assert all(proc.returncode == 0 for proc in procs)
    assert lineages == {StateStore(path).lineage}
    assert sql(path, "SELECT count(*) FROM meta WHERE key = 'lineage'") == [(1,)]


# --- versions and migrations -------------------------------------------------------------------------------------


def test_a_version_0_file_is_migrated_in_place_and_keeps_its_rows(tmp_path):
    path = tmp_path / "state.db"
    write_v0_state(path)
    assert sql(path, "PRAGMA user_version") == [(0,)]
    inode = path.stat().st_ino

    store = StateStore(path)
    assert sql(path, "PRAGMA user_version") == [(SCHEMA_VERSION,)]
    assert path.stat().st_ino == inode and sorted(p.name for p in tmp_path.iterdir()) == ["state.db"]
    assert re.fullmatch(r"[0-9a-f]{32}", store.lineage)
    assert StateStore(path).lineage == store.lineage  # migrated once: the next open finds the same lineage
    deployment = store.get("web")
    assert (deployment.region, deployment.kind, deployment.spec_digest, deployment.spec_json) == (
        "us-east-1",
        "inference",
        "digest",
        "{}",
    )
    vpc = deployment.resources["vpc"]
    assert vpc.outputs == {"VpcId": "vpc-1"} and vpc.delete_requests[0]["operation"] == "DeleteVpc"
    assert vpc.create_requests == [{"service": "ec2", "operation": "CreateVpc"}] and vpc.complete

    # The migrated file has exactly the schema a fresh one gets.
    fresh = tmp_path / "fresh" / "state.db"
    StateStore(fresh)
    for table in ("deployments", "resources", "meta"):
        assert columns(path, table) == columns(fresh, table), table


def test_a_version_0_file_from_before_create_requests_gets_the_column(tmp_path):
    path = tmp_path / "state.db"
    write_v0_state(path, with_create_requests=False)
    store = StateStore(path)
    assert store.get("web").resources["vpc"].create_requests == []
    assert [c[1] for c in columns(path, "resources")][-1] == "create_requests"


def test_a_newer_schema_is_refused_and_left_untouched(tmp_path, monkeypatch, capsys):
    path = tmp_path / "state.db"
    store = StateStore(path)
    with store.lock("web", "us-east-1", "inference"):
        store.put_resource("web", resource("vpc"))
    newer = SCHEMA_VERSION + 3
    sql(path, f"PRAGMA user_version = {newer}")
    before, listing = sha256(path), sorted(p.name for p in tmp_path.iterdir())
    expected = (
        f"state {path} was written by a newer neurondeploy (schema {newer}, this one knows {SCHEMA_VERSION}): "
        "upgrade neurondeploy"
    )

    with pytest.raises(StateError) as raised:
        StateStore(path)
    assert raised.value.one_line() == expected and raised.value.exit_code == 5
    monkeypatch.setenv("NEURONDEPLOY_STATE", str(path))
    for argv in (["status"], ["unlock", "web"]):
        assert main(argv) == 5
        out, err = capsys.readouterr()
        assert out == "" and err == f"error: {expected}\n"
    assert sha256(path) == before and sorted(p.name for p in tmp_path.iterdir()) == listing


def test_a_sqlite_file_of_something_else_is_refused_untouched(tmp_path, monkeypatch, capsys):
    path = tmp_path / "notes.db"
    sql(path, "CREATE TABLE notes (text TEXT)", "INSERT INTO notes VALUES ('hello')")
    before = sha256(path)
    monkeypatch.setenv("NEURONDEPLOY_STATE", str(path))
    assert main(["status"]) == 5
    err = capsys.readouterr().err
    assert err.startswith(f"error: state {path} is a SQLite database but not a neurondeploy state (its tables: notes)")
    assert err.count("\n") == 1 and sha256(path) == before


# --- rows written by other versions --------------------------------------------------------------------------------


def test_columns_a_newer_version_added_are_read_around_and_kept(tmp_path):
    path = tmp_path / "state.db"
    store = StateStore(path)
    with store.lock("web", "us-east-1", "inference"):
        store.put_resource("web", resource("vpc"))
    # A newer neurondeploy rebuilt resources with its columns in another order and one more, and added one to
    # deployments; neither needs a schema step, so this version keeps working on the file.
    sql(
        path,
        "ALTER TABLE deployments ADD COLUMN owner TEXT NOT NULL DEFAULT 'nobody'",
        "UPDATE deployments SET owner = 'team-a'",
        "ALTER TABLE resources RENAME TO resources_old",
        "CREATE TABLE resources (cost REAL NOT NULL DEFAULT 0, sequence INTEGER NOT NULL, name TEXT NOT NULL, "
        "deployment TEXT NOT NULL, create_requests TEXT NOT NULL DEFAULT '[]', type TEXT NOT NULL, "
        "outputs TEXT NOT NULL, completed INTEGER NOT NULL, total INTEGER NOT NULL, create_hash TEXT NOT NULL, "
        "delete_requests TEXT NOT NULL, depends_on TEXT NOT NULL, taggable INTEGER NOT NULL, created REAL NOT NULL, "
        "PRIMARY KEY (deployment, name))",
        "INSERT INTO resources (cost, sequence, name, deployment, create_requests, type, outputs, completed, total, "
        "create_hash, delete_requests, depends_on, taggable, created) SELECT 12.5, sequence, name, deployment, "
        "create_requests, type, outputs, completed, total, create_hash, delete_requests, depends_on, taggable, "
        "created FROM resources_old",
        "DROP TABLE resources_old",
    )

    store = StateStore(path)
    vpc = store.get("web").resources["vpc"]
    assert (vpc.name, vpc.type, vpc.outputs, vpc.sequence, vpc.taggable) == (
        "vpc",
        "ec2:vpc",
        {"VpcId": "vpc-1"},
        1,
        True,
    )

    with store.lock("web", "us-east-1", "inference"):  # an update, a new row, a spec: the unknown values stay
        store.put_resource("web", resource("vpc", outputs={"VpcId": "vpc-2"}, sequence=vpc.sequence))
        store.put_resource("web", resource("subnet", type="ec2:subnet", depends_on=["vpc"]))
        store.record_spec("web", "digest-2", "{}")
    store.unlock("web")
    assert sql(path, "SELECT name, cost, outputs FROM resources ORDER BY sequence") == [
        ("vpc", 12.5, '{"VpcId": "vpc-2"}'),
        ("subnet", 0.0, '{"VpcId": "vpc-1"}'),  # a new row gets the newer column's default
    ]
    assert sql(path, "SELECT owner, spec_digest FROM deployments") == [("team-a", "digest-2")]
    assert list(store.get("web").resources) == ["vpc", "subnet"]


@pytest.mark.parametrize("column", ["outputs", "delete_requests", "depends_on", "create_requests"])
def test_a_json_field_that_does_not_decode_names_the_deployment_and_resource(tmp_path, monkeypatch, capsys, column):
    path = tmp_path / "state.db"
    store = StateStore(path)
    with store.lock("web", "us-east-1", "inference"):
        store.put_resource("web", resource("vpc"))
        store.put_resource("web", resource("subnet", type="ec2:subnet"))
    sql(path, f"UPDATE resources SET {column} = '{{\"VpcId\": ' WHERE name = 'subnet'")
    before = sha256(path)

    with pytest.raises(StateError) as raised:
        store.get("web")
    assert f"deployment web, resource subnet: {column} is not valid JSON" in raised.value.message
    monkeypatch.setenv("NEURONDEPLOY_STATE", str(path))
    assert main(["status", "web"]) == 5
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith(f"error: state {path} is damaged: deployment web, resource subnet: {column} is not valid")
    assert "backup" in err and "neurondeploy import NAME" in err
    assert sha256(path) == before
