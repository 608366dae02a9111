"""What neurondeploy owns and where: a local SQLite file by default (``~/.neurondeploy/state.db``).

Per deployment: the spec digest of the last apply, a lock, and per resource its type, outputs (IDs, ARNs),
how many of its create requests completed, the hash of the requests that made it, its delete requests
(resolved, so `destroy` needs no spec) and when it was created. Each write is its own transaction, so an apply
that dies leaves state exactly as far as AWS got. State never holds secrets.

Locking: ``lock(name)`` takes a row with this process's pid and host inside ``BEGIN IMMEDIATE``; a second apply
of the same deployment fails fast naming the holder. A lock whose process is gone (same host) is taken over.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from neurondeploy.errors import NeurondeployError

SCHEMA = """
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


class StateError(NeurondeployError):
    exit_code = 5


class DeploymentLocked(StateError):
    pass


def default_state_path() -> Path:
    return Path(os.environ.get("NEURONDEPLOY_STATE", Path.home() / ".neurondeploy" / "state.db"))


@dataclass
class ResourceState:
    name: str
    type: str
    outputs: dict[str, Any]
    completed: int  # create requests that succeeded
    total: int  # create requests it takes
    create_hash: str  # of the resolved create requests: a change means the resource must be replaced
    delete_requests: list[dict]  # [{"service", "operation", "params", "wait"}], resolved
    depends_on: list[str]
    taggable: bool
    created: float
    sequence: int  # creation order, for destroy
    create_requests: list[dict] = field(default_factory=list)  # as sent (refs resolved): drift compares AWS to these

    @property
    def complete(self) -> bool:
        return self.completed >= self.total


@dataclass
class DeploymentState:
    name: str
    region: str
    kind: str
    spec_digest: str | None
    updated: float
    resources: dict[str, ResourceState] = field(default_factory=dict)
    spec_json: str | None = None


class StateStore:
    def __init__(self, path: Path | None = None) -> None:
        self.path = Path(path) if path else default_state_path()
        self._held: dict[str, int] = {}  # lock depth per deployment held by this store
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            db.executescript(SCHEMA)

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)  # explicit transactions only
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        try:
            yield db
        finally:
            db.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    # --- locking ---------------------------------------------------------------------------------------------

    @contextmanager
    def lock(self, name: str, region: str, kind: str) -> Iterator[None]:
        """Re-entrant within this store: apply holds it around orphan clean-up and the executor's own lock."""
        if self._held.get(name):
            self._held[name] += 1
            try:
                yield
            finally:
                self._held[name] -= 1
            return
        me, host = os.getpid(), socket.gethostname()
        with self._transaction() as db:
            row = db.execute(
                "SELECT lock_pid, lock_host, lock_since FROM deployments WHERE name = ?", (name,)
            ).fetchone()
            if row and row[0] is not None and (row[0], row[1]) != (me, host) and _alive(row[0], row[1], host):
                since = time.strftime("%H:%M:%S", time.localtime(row[2]))
                raise DeploymentLocked(
                    f"deployment {name} is being changed by pid {row[0]} on {row[1]} since {since}",
                    "wait for it to finish; if that process is gone from another host, run "
                    f"`neurondeploy unlock {name}`",
                )
            db.execute(
                "INSERT INTO deployments (name, region, kind, updated, lock_pid, lock_host, lock_since) "
                "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(name) DO UPDATE SET lock_pid = excluded.lock_pid, "
                "lock_host = excluded.lock_host, lock_since = excluded.lock_since",
                (name, region, kind, time.time(), me, host, time.time()),
            )
        self._held[name] = 1
        try:
            yield
        finally:
            del self._held[name]
            with self._transaction() as db:
                db.execute(
                    "UPDATE deployments SET lock_pid = NULL, lock_host = NULL, lock_since = NULL "
                    "WHERE name = ? AND lock_pid = ?",
                    (name, me),
                )

    def unlock(self, name: str) -> None:
        with self._transaction() as db:
            db.execute(
                "UPDATE deployments SET lock_pid = NULL, lock_host = NULL, lock_since = NULL WHERE name = ?", (name,)
            )

    # --- reads and writes ----------------------------------------------------------------------------------------

    def get(self, name: str) -> DeploymentState | None:
        with self._connect() as db:
            row = db.execute(
                "SELECT name, region, kind, spec_digest, updated, spec_json FROM deployments WHERE name = ?", (name,)
            ).fetchone()
            if row is None:
                return None
            deployment = DeploymentState(row[0], row[1], row[2], row[3], row[4], spec_json=row[5])
            for r in db.execute(
                "SELECT name, type, outputs, completed, total, create_hash, delete_requests, depends_on, "
                "taggable, created, sequence, create_requests FROM resources WHERE deployment = ? "
                "ORDER BY sequence",
                (name,),
            ):
                deployment.resources[r[0]] = ResourceState(
                    r[0],
                    r[1],
                    json.loads(r[2]),
                    r[3],
                    r[4],
                    r[5],
                    json.loads(r[6]),
                    json.loads(r[7]),
                    bool(r[8]),
                    r[9],
                    r[10],
                    json.loads(r[11]),
                )
        return deployment

    def names(self) -> list[str]:
        with self._connect() as db:
            return [row[0] for row in db.execute("SELECT name FROM deployments ORDER BY name")]

    def record_spec(self, name: str, digest: str, spec_json: str) -> None:
        with self._transaction() as db:
            db.execute(
                "UPDATE deployments SET spec_digest = ?, spec_json = ?, updated = ? WHERE name = ?",
                (digest, spec_json, time.time(), name),
            )

    def put_resource(self, deployment: str, resource: ResourceState) -> None:
        with self._transaction() as db:
            sequence = resource.sequence
            if sequence < 0:
                (sequence,) = db.execute(
                    "SELECT COALESCE(MAX(sequence), 0) + 1 FROM resources WHERE deployment = ?", (deployment,)
                ).fetchone()
                resource.sequence = sequence
            db.execute(
                "INSERT OR REPLACE INTO resources VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    deployment,
                    resource.name,
                    resource.type,
                    json.dumps(resource.outputs, default=str),
                    resource.completed,
                    resource.total,
                    resource.create_hash,
                    json.dumps(resource.delete_requests, default=str),
                    json.dumps(resource.depends_on),
                    int(resource.taggable),
                    resource.created,
                    sequence,
                    json.dumps(resource.create_requests, default=_bytes_as_size),
                ),
            )
            db.execute("UPDATE deployments SET updated = ? WHERE name = ?", (time.time(), deployment))

    def remove_resource(self, deployment: str, name: str) -> None:
        with self._transaction() as db:
            db.execute("DELETE FROM resources WHERE deployment = ? AND name = ?", (deployment, name))

    def forget(self, deployment: str) -> None:
        with self._transaction() as db:
            db.execute("DELETE FROM resources WHERE deployment = ?", (deployment,))
            db.execute("DELETE FROM deployments WHERE name = ?", (deployment,))


def _alive(pid: int, host: str, this_host: str) -> bool:
    if host != this_host:
        return True  # cannot tell from here: assume it runs
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _bytes_as_size(value: Any) -> Any:
    """Request bodies (an artifact upload) are not state: keep their size only."""
    if isinstance(value, (bytes, bytearray)):
        return f"<{len(value)} bytes>"
    return str(value)
