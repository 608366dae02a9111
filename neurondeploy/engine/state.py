"""What neurondeploy owns and where: a local SQLite file by default (``~/.neurondeploy/state.db``).

Per deployment: the spec digest of the last apply, a lock, and per resource its type, outputs (IDs, ARNs),
how many of its create requests completed, the hash of the requests that made it, its delete requests
(resolved, so `destroy` needs no spec) and when it was created. Each write is its own transaction, so an apply
that dies leaves state exactly as far as AWS got. State never holds secrets.

Lineage: every state file gets a random id (uuid4 hex) when it is created, kept in its ``meta`` table and never
changed (:attr:`StateStore.lineage`). Resources are tagged with it, so a state only ever deletes what it made.

Schema: ``PRAGMA user_version`` is the schema version. A fresh file gets the newest schema at once; an older
one is brought up by :data:`MIGRATIONS`, one function per version step, each in its own transaction; a file of a
newer version than this code knows is refused untouched. Adding a column is not a version step: rows are read by
column name and writes leave columns this code does not know as they are, so an older neurondeploy can keep
working on a file a newer one added columns to. Append a migration (and so refuse older code) only for a change
older code would get wrong.

A state file that cannot be used (not SQLite, truncated or damaged, read-only, a directory, a path under a file)
is a :class:`StateError` naming the file, what is wrong and how to recover: never a traceback.

Locking: ``lock(name)`` takes a row with this process's pid, host and start (:func:`process_start`, so a pid that
a later process reuses is not mistaken for the holder) inside ``BEGIN IMMEDIATE``; a second apply of the same
deployment fails fast naming the holder. A lock whose process is gone (same host) is taken over; ``unlock(name)``
releases one left by a dead process or by another host, and one whose process runs here only with ``force``.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from neurondeploy.errors import NeurondeployError
from neurondeploy.paths import default_state_path, file_in_the_way  # noqa: F401 (engine.state's public name too)

SCHEMA_VERSION = 1  # = len(MIGRATIONS): the newest schema this code knows

NEWEST_SCHEMA = (
    """CREATE TABLE deployments (
    name TEXT PRIMARY KEY, region TEXT NOT NULL, kind TEXT NOT NULL, spec_digest TEXT, spec_json TEXT,
    updated REAL NOT NULL, lock_pid INTEGER, lock_host TEXT, lock_since REAL
)""",
    """CREATE TABLE resources (
    deployment TEXT NOT NULL, name TEXT NOT NULL, type TEXT NOT NULL, outputs TEXT NOT NULL,
    completed INTEGER NOT NULL, total INTEGER NOT NULL, create_hash TEXT NOT NULL, delete_requests TEXT NOT NULL,
    depends_on TEXT NOT NULL, taggable INTEGER NOT NULL, created REAL NOT NULL, sequence INTEGER NOT NULL,
    create_requests TEXT NOT NULL DEFAULT '[]',
    PRIMARY KEY (deployment, name)
)""",
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
)

SQLITE_HEADER = b"SQLite format 3\x00"
_TABLES = frozenset({"deployments", "resources", "meta"})
_RESOURCE_COLUMNS = (
    "deployment",
    "name",
    "type",
    "outputs",
    "completed",
    "total",
    "create_hash",
    "delete_requests",
    "depends_on",
    "taggable",
    "created",
    "sequence",
    "create_requests",
)
# Each JSON column's shape: (its type, the type of its items when a list), as the engine reads it.
_JSON_COLUMNS = {
    "outputs": (dict, None),
    "delete_requests": (list, dict),
    "depends_on": (list, str),
    "create_requests": (list, dict),
}
_JSON_NAMES = {dict: "an object", list: "a list", str: "a string"}
_DEPLOYMENT_COLUMNS = ("name", "region", "kind", "spec_digest", "updated", "spec_json")

# What to do about a state file that cannot be read: what `neurondeploy import` is for.
RECOVER_HINT = (
    "restore it from a backup (or from the S3 state backend, if you keep state there), or point "
    "NEURONDEPLOY_STATE (or --state) at a new file and rebuild it from what is tagged in AWS with "
    "`neurondeploy import NAME`; move the bad file aside rather than deleting it"
)
# ... and about one that cannot be written or opened.
WRITABLE_HINT = (
    "make the file and its directory readable and writable (SQLite keeps its -wal and -shm files beside it), "
    "or copy it to a writable place and point NEURONDEPLOY_STATE (or --state) there"
)


class StateError(NeurondeployError):
    exit_code = 5


class DeploymentLocked(StateError):
    pass


class UnknownDeployment(NeurondeployError):
    """A deployment name the state has no record of."""


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


# --- schema migrations: MIGRATIONS[n] takes a file from version n to n + 1, inside one transaction ---------------


def _v0_to_v1(db: sqlite3.Connection) -> None:
    """Version 0 (no ``user_version``): deployments and resources only. Adds the meta table and a lineage."""
    if "create_requests" not in _columns(db, "resources"):  # files from before drift recorded the requests
        db.execute("ALTER TABLE resources ADD COLUMN create_requests TEXT NOT NULL DEFAULT '[]'")
    db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    _new_lineage(db)


MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [_v0_to_v1]
assert len(MIGRATIONS) == SCHEMA_VERSION


def _new_lineage(db: sqlite3.Connection) -> None:
    db.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('lineage', ?)", (uuid.uuid4().hex,))
    db.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('created', ?)", (repr(time.time()),))


def _columns(db: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in db.execute(f"PRAGMA table_info({table})")]


def _tables(db: sqlite3.Connection) -> set[str]:
    return {
        row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
    }


def _user_version(db: sqlite3.Connection) -> int:
    return db.execute("PRAGMA user_version").fetchone()[0]


class StateStore:
    def __init__(self, path: Path | None = None) -> None:
        self.path = Path(path) if path else default_state_path()
        self._held: dict[str, int] = {}  # lock depth per deployment held by this store
        self._check_path()
        with self._connect(wal=False) as db:  # reads only, so a file this code refuses stays as it was
            version = _user_version(db)
            self._refuse_newer(version)
            problems = [row[0] for row in db.execute("PRAGMA quick_check")]
            if problems != ["ok"]:
                raise self._error(f"is damaged ({problems[0]})", RECOVER_HINT)
            if version == 0:
                self._refuse_foreign(_tables(db))
        if version < SCHEMA_VERSION:
            self._migrate()
        with self._connect() as db:
            missing = _TABLES - _tables(db)
            if missing:
                raise self._error(f"lacks its {', '.join(sorted(missing))} table(s)", RECOVER_HINT)
            row = db.execute("SELECT value FROM meta WHERE key = 'lineage'").fetchone()
        if row is None or not row[0]:
            raise self._error("has no lineage id in its meta table", RECOVER_HINT)
        self._lineage: str = row[0]

    @property
    def lineage(self) -> str:
        """This state file's id (uuid4 hex), made when the file was created and never changed: resources are
        tagged with it, and a state deletes only what carries its own lineage."""
        return self._lineage

    # --- opening ------------------------------------------------------------------------------------------------

    def _error(self, problem: str, hint: str | None) -> StateError:
        return StateError(f"state {self.path} {problem}", hint)

    def _check_path(self) -> None:
        """What the file system can tell before SQLite opens anything (SQLite would create or alter files)."""
        path = self.path
        if path.is_dir():
            raise self._error(
                "is a directory, not a file",
                f"point NEURONDEPLOY_STATE (or --state) at a file, e.g. {path / 'state.db'}",
            )
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            blocker = file_in_the_way(path.parent)
            if blocker is not None:
                raise self._error(
                    f"cannot be created: {blocker} is a file, not a directory",
                    "point NEURONDEPLOY_STATE (or --state) at a path in a directory",
                ) from exc
            raise self._error(f"cannot be created: {exc.strerror} ({exc.filename})", WRITABLE_HINT) from exc
        if not path.exists():
            try:  # what SQLite would do, but with the reason when it cannot
                path.touch()
            except OSError as exc:
                raise self._error(f"cannot be created: {exc.strerror}", WRITABLE_HINT) from exc
            return
        if not path.is_file():
            raise self._error("is not a regular file", "point NEURONDEPLOY_STATE (or --state) at a file")
        try:
            with path.open("rb") as file:
                header = file.read(100)
        except OSError as exc:
            raise self._error(f"cannot be read: {exc.strerror}", WRITABLE_HINT) from exc
        if not header:
            return  # an empty file: SQLite makes it a new database
        if len(header) < 100 or not header.startswith(SQLITE_HEADER):
            raise self._error("is not a SQLite database (corrupt, or not a state file)", RECOVER_HINT)
        page_size = int.from_bytes(header[16:18], "big")
        page_size = 65536 if page_size == 1 else page_size
        size = path.stat().st_size
        if page_size < 512 or page_size & (page_size - 1) or size % page_size:
            raise self._error(
                f"is truncated or damaged ({size} bytes, not a whole number of {page_size}-byte pages)", RECOVER_HINT
            )

    def _refuse_newer(self, version: int) -> None:
        if version > SCHEMA_VERSION:
            raise StateError(
                f"state {self.path} was written by a newer neurondeploy (schema {version}, this one knows "
                f"{SCHEMA_VERSION}): upgrade neurondeploy"
            )

    def _refuse_foreign(self, tables: set[str]) -> None:
        """A version 0 file with tables is a state only if they are the old state's."""
        if tables and not {"deployments", "resources"} <= tables:
            raise self._error(
                f"is a SQLite database but not a neurondeploy state (its tables: {', '.join(sorted(tables))})",
                "point NEURONDEPLOY_STATE (or --state) at the neurondeploy state file",
            )

    def _migrate(self) -> None:
        """Up to SCHEMA_VERSION one step per transaction; the version is read again inside each, so two processes
        opening the same old (or new) file migrate it once."""
        while True:
            with self._transaction() as db:
                version = _user_version(db)
                self._refuse_newer(version)
                if version == SCHEMA_VERSION:
                    return
                tables = _tables(db)
                if version == 0 and not tables:  # a fresh file: the newest schema directly
                    for statement in NEWEST_SCHEMA:
                        db.execute(statement)
                    _new_lineage(db)
                    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                    return
                if version == 0:
                    self._refuse_foreign(tables)
                MIGRATIONS[version](db)
                db.execute(f"PRAGMA user_version = {version + 1}")

    def _sqlite_error(self, exc: sqlite3.Error) -> StateError:
        """One line for what SQLite reports, by its primary result code."""
        code = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF
        if code == sqlite3.SQLITE_NOTADB:
            return self._error("is not a SQLite database (corrupt, or not a state file)", RECOVER_HINT)
        if code == sqlite3.SQLITE_CORRUPT:
            return self._error(f"is damaged or truncated ({exc})", RECOVER_HINT)
        if code == sqlite3.SQLITE_READONLY:
            if not self._directory_writable():
                return self._error(
                    f"is in a read-only directory: SQLite cannot create {self.path.name}-wal and "
                    f"{self.path.name}-shm beside it ({exc})",
                    WRITABLE_HINT,
                )
            return self._error(f"is read-only, and this command writes to it ({exc})", WRITABLE_HINT)
        if code in (sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_PERM, sqlite3.SQLITE_AUTH):
            return self._error(f"cannot be opened ({exc})", WRITABLE_HINT)
        if code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
            return self._error(
                f"stayed locked by another process for 30 s ({exc})",
                "run the command again once the other neurondeploy command writing this state is done",
            )
        if code == sqlite3.SQLITE_FULL:
            return self._error(f"cannot be written: the disk is full ({exc})", "free space, then run it again")
        if code == sqlite3.SQLITE_IOERR:
            return self._error(f"cannot be read or written ({exc})", WRITABLE_HINT)
        return self._error(f"cannot be used ({type(exc).__name__}: {exc})", RECOVER_HINT)

    def _directory_writable(self) -> bool:
        """By trying (permission bits do not stop root, and read-only mounts ignore them)."""
        try:
            with tempfile.NamedTemporaryFile(dir=self.path.parent, prefix=f".{self.path.name}.probe-"):
                return True
        except OSError:
            return False

    @contextmanager
    def _connect(self, *, wal: bool = True) -> Iterator[sqlite3.Connection]:
        try:
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None)  # explicit transactions only
        except sqlite3.Error as exc:
            raise self._sqlite_error(exc) from exc
        try:
            if wal:
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=FULL")
            yield db
        except sqlite3.Error as exc:
            raise self._sqlite_error(exc) from exc
        finally:
            db.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                if db.in_transaction:  # SQLite may have rolled back itself (disk full, I/O error)
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
            if "lock_started" not in _columns(db, "deployments"):  # added by the first lock, in any file: additive
                db.execute("ALTER TABLE deployments ADD COLUMN lock_started TEXT")
            row = _lock_row(db, name)
            if row and row[0] is not None and (row[0], row[1]) != (me, host) and _alive(row[0], row[1], host, row[3]):
                raise DeploymentLocked(
                    f"deployment {name} is being changed by pid {row[0]} on {row[1]} since {_clock(row[2])}",
                    f"wait for it to finish; if that process is gone, run `neurondeploy unlock {name}`",
                )
            db.execute(
                "INSERT INTO deployments (name, region, kind, updated, lock_pid, lock_host, lock_since, lock_started) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(name) DO UPDATE SET lock_pid = excluded.lock_pid, "
                "lock_host = excluded.lock_host, lock_since = excluded.lock_since, "
                "lock_started = excluded.lock_started",
                (name, region, kind, time.time(), me, host, time.time(), process_start(me)),
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

    def unlock(self, name: str, *, force: bool = False) -> str:
        """Release ``name``'s lock when its holder is gone from this host or runs on another one, or with ``force``
        whoever holds it; what was done, in one line. Raises :class:`UnknownDeployment` for a name the state does not
        have, and :class:`DeploymentLocked` when the holder is a live process on this host and not ``force`` (the
        lock is then kept)."""
        host = socket.gethostname()
        for _ in range(3):  # again only if the lock changed between reading and releasing it
            with self._connect() as db:
                row = _lock_row(db, name)
            if row is None:
                known = ", ".join(self.names()) or "none"
                raise UnknownDeployment(f"no deployment {name} in state {self.path}", f"known: {known}")
            pid, holder, since, started = row
            if pid is None:
                return f"{name} is not locked"
            running = holder == host and _alive(pid, holder, host, started)
            if running and not force:
                raise DeploymentLocked(
                    f"deployment {name} is locked by pid {pid} on this host ({host}) since {_clock(since)}, "
                    "and that process is still running",
                    "wait for it to finish; releasing it while it runs lets another apply change what it is changing",
                )
            with self._transaction() as db:
                released = db.execute(
                    "UPDATE deployments SET lock_pid = NULL, lock_host = NULL, lock_since = NULL "
                    "WHERE name = ? AND lock_pid = ? AND lock_host IS ? AND lock_since IS ?",
                    (name, pid, holder, since),
                ).rowcount
            if released:
                if running:
                    return (
                        f"unlocked {name} by force: pid {pid} on this host (since {_clock(since)}) still runs; "
                        "stop it before the next apply"
                    )
                if holder == host and _pid_exists(pid):
                    return (
                        f"unlocked {name}: its holder, pid {pid} on this host since {_clock(since)}, is gone "
                        f"(pid {pid} is now another process)"
                    )
                if holder == host:
                    return f"unlocked {name}: its holder, pid {pid} on this host since {_clock(since)}, is gone"
                return (
                    f"unlocked {name}: released the lock of pid {pid} on {holder} (since {_clock(since)}); "
                    "make sure that process is no longer running"
                )
        raise DeploymentLocked(f"deployment {name}: its lock kept changing while unlocking", "run unlock again")

    # --- reads and writes ----------------------------------------------------------------------------------------

    def get(self, name: str) -> DeploymentState | None:
        with self._connect() as db:
            cursor = db.execute("SELECT * FROM deployments WHERE name = ?", (name,))
            row = cursor.fetchone()
            if row is None:
                return None
            values = self._by_name(cursor, row, _DEPLOYMENT_COLUMNS, "deployments")
            deployment = DeploymentState(
                values["name"],
                values["region"],
                values["kind"],
                values["spec_digest"],
                values["updated"],
                spec_json=values["spec_json"],
            )
            cursor = db.execute("SELECT * FROM resources WHERE deployment = ? ORDER BY sequence", (name,))
            for r in cursor.fetchall():
                values = self._by_name(cursor, r, _RESOURCE_COLUMNS, "resources")
                decoded = {column: self._json(values, column, name) for column in _JSON_COLUMNS}
                deployment.resources[values["name"]] = ResourceState(
                    values["name"],
                    values["type"],
                    decoded["outputs"],
                    values["completed"],
                    values["total"],
                    values["create_hash"],
                    decoded["delete_requests"],
                    decoded["depends_on"],
                    bool(values["taggable"]),
                    values["created"],
                    values["sequence"],
                    decoded["create_requests"],
                )
        return deployment

    def _by_name(self, cursor: sqlite3.Cursor, row: tuple, known: tuple[str, ...], table: str) -> dict[str, Any]:
        """A row by column name; columns a newer neurondeploy added are there too and are left alone."""
        values = dict(zip([column[0] for column in cursor.description], row, strict=True))
        missing = [column for column in known if column not in values]
        if missing:
            raise self._error(f"has no {', '.join(missing)} column(s) in its {table} table", RECOVER_HINT)
        return values

    def _json(self, values: dict[str, Any], column: str, deployment: str) -> Any:
        where = f"is damaged: deployment {deployment}, resource {values['name']}: {column}"
        try:
            value = json.loads(values[column])
        except (TypeError, ValueError) as exc:
            raise self._error(f"{where} is not valid JSON ({exc})", RECOVER_HINT) from exc
        shape, items = _JSON_COLUMNS[column]
        if not isinstance(value, shape) or (items and not all(isinstance(item, items) for item in value)):
            expected = _JSON_NAMES[shape] + (f" of {_JSON_NAMES[items]}s" if items else "")
            raise self._error(f"{where} is {type(value).__name__} JSON, not {expected}", RECOVER_HINT)
        return value

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
        """Insert or update by name: an update sets the columns this code knows, so the values of columns a newer
        neurondeploy added stay as they were (a new row gets their defaults)."""
        with self._transaction() as db:
            sequence = resource.sequence
            if sequence < 0:
                (sequence,) = db.execute(
                    "SELECT COALESCE(MAX(sequence), 0) + 1 FROM resources WHERE deployment = ?", (deployment,)
                ).fetchone()
                resource.sequence = sequence
            updates = ", ".join(f"{column} = excluded.{column}" for column in _RESOURCE_COLUMNS[2:])
            db.execute(
                f"INSERT INTO resources ({', '.join(_RESOURCE_COLUMNS)}) "
                f"VALUES ({', '.join('?' * len(_RESOURCE_COLUMNS))}) "
                f"ON CONFLICT(deployment, name) DO UPDATE SET {updates}",
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


def _alive(pid: int, host: str, this_host: str, started: str | None = None) -> bool:
    """Whether the lock holder ``pid`` on ``host`` (which started at ``started``, when recorded) still runs."""
    if host != this_host:
        return True  # cannot tell from here: assume it runs
    if not _pid_exists(pid):
        return False
    now = process_start(pid) if started else None
    return now is None or now == started  # another start: the pid was reused, the holder is gone


def process_start(pid: int) -> str | None:
    """What tells process ``pid`` from a later one given the same pid: this boot's id and the process's start time
    in clock ticks since boot (proc(5): /proc/sys/kernel/random/boot_id; /proc/[pid]/stat field 22, starttime).
    None where /proc does not say (not Linux)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()  # after the command name, which may hold spaces: field 3 onwards
    return f"{boot}:{fields[19]}" if len(fields) > 19 else None


def _lock_row(db: sqlite3.Connection, name: str) -> tuple | None:
    """(pid, host, since, started) of ``name``'s lock; started None in a file from before it was recorded."""
    started = "lock_started" if "lock_started" in _columns(db, "deployments") else "NULL"
    return db.execute(
        f"SELECT lock_pid, lock_host, lock_since, {started} FROM deployments WHERE name = ?", (name,)
    ).fetchone()


def _pid_exists(pid: int) -> bool:
    if not isinstance(pid, int) or pid <= 0:  # 0 and -1 would name a process group or every process
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


def _clock(since: Any) -> str:
    """When a lock was taken, as a time of day; a damaged lock_since (text, a blob, NaN, a year past 9999) is an
    unknown time, not a crash of `unlock` or of the command that met the lock."""
    if not isinstance(since, int | float) or isinstance(since, bool):
        return "an unknown time"
    try:
        return time.strftime("%H:%M:%S", time.localtime(since))
    except (OverflowError, OSError, ValueError):
        return "an unknown time"


def _bytes_as_size(value: Any) -> Any:
    """Request bodies (an artifact upload) are not state: keep their size only."""
    if isinstance(value, (bytes, bytearray)):
        return f"<{len(value)} bytes>"
    return str(value)
