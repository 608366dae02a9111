"""State in S3, for teams: ``--state s3://bucket/prefix`` (or ``NEURONDEPLOY_STATE=s3://...``).

The same interface and guarantees as the SQLite store, one object per deployment:

* ``<prefix>/deployments/<name>.json``: the deployment and its resources, rewritten whole after every request
  (S3 reads are strongly consistent, so the next reader sees the last write);
* ``<prefix>/locks/<name>.json``: the lock, created with a conditional ``PutObject`` (``If-None-Match: *``), so of
  two applies anywhere exactly one gets it; the other is refused naming the holder (host, pid, since). A lock
  left by a dead process on the same host is taken over; from another host, ``neurondeploy unlock NAME``.

Writes happen only under the lock, by one process; its threads (parallel branches of an apply) are serialised
here. The bucket should have versioning on: every state write is then a recoverable version.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

from neurondeploy.aws.errors import is_s3_condition_failed, is_s3_missing_bucket, is_s3_missing_object
from neurondeploy.aws.paging import Paged
from neurondeploy.aws.transport import AwsCallError, AwsTransport, default_region
from neurondeploy.engine.state import (
    DeploymentLocked,
    DeploymentState,
    ResourceState,
    StateError,
    StateStore,
    _alive,
    _bytes_as_size,
    process_start,
)
from neurondeploy.resources.naming import split_s3


class S3StateStore:
    def __init__(self, uri: str, transport=None) -> None:
        self.uri = uri.rstrip("/")
        self.bucket, prefix = split_s3(self.uri)
        self.prefix = f"{prefix.strip('/')}/" if prefix.strip("/") else ""
        # Its own transport: state traffic is not the deployment's (apply counts its own calls).
        self.transport = transport or AwsTransport(default_region())
        self.token = uuid.uuid4().hex  # this store instance: two stores in one process are two holders
        self._held: dict[str, int] = {}  # lock depth per deployment (the executor re-enters a caller's lock)
        self._guard = threading.RLock()
        self.path = self.uri  # what the CLI prints as the state's location
        self._lineage: str | None = None

    @property
    def lineage(self) -> str:
        """This state's id, as :attr:`StateStore.lineage`: ``<prefix>/meta.json``, made on first use with a
        conditional ``PutObject`` (of two first applies anywhere, one makes it and both read it back), never
        changed."""
        with self._guard:
            if self._lineage is None:
                key = f"{self.prefix}meta.json"
                meta = self._read(key)
                if meta is None:
                    try:
                        self._write(key, {"lineage": uuid.uuid4().hex, "created": time.time()}, only_if_absent=True)
                    except AwsCallError as exc:
                        if not is_s3_condition_failed(exc):
                            raise
                    meta = self._read(key)
                if not isinstance(meta, dict) or not meta.get("lineage"):
                    raise StateError(
                        f"state {self.uri}: {key} has no lineage id",
                        "restore it from an earlier version of the object (the bucket should keep versions)",
                    )
                self._lineage = meta["lineage"]
            return self._lineage

    # --- objects -------------------------------------------------------------------------------------------------

    def _key(self, kind: str, name: str) -> str:
        return f"{self.prefix}{kind}/{name}.json"

    def _read(self, key: str) -> dict | None:
        try:
            body = self.transport.call("s3", "GetObject", {"Bucket": self.bucket, "Key": key})["Body"].read()
        except AwsCallError as exc:
            if is_s3_missing_object(exc):
                return None
            if is_s3_missing_bucket(exc) or exc.code == "AccessDenied":  # 404 / NotFound: an object, above
                raise StateError(
                    f"state bucket {self.bucket}: {exc.message}",
                    f"create it (versioning on) or check access to {self.uri}",
                ) from None
            raise
        return json.loads(body)

    def _write(self, key: str, data: dict, *, only_if_absent: bool = False) -> None:
        params = {
            "Bucket": self.bucket,
            "Key": key,
            "ContentType": "application/json",
            "ServerSideEncryption": "AES256",
            "Body": json.dumps(data, default=_bytes_as_size).encode(),
        }
        if only_if_absent:
            params["IfNoneMatch"] = "*"
        self.transport.call("s3", "PutObject", params)

    def _delete(self, key: str) -> None:
        self.transport.call("s3", "DeleteObject", {"Bucket": self.bucket, "Key": key})

    # --- locking ---------------------------------------------------------------------------------------------------

    @contextmanager
    def lock(self, name: str, region: str, kind: str) -> Iterator[None]:
        with self._guard:
            if not self._held.get(name):
                self._acquire(name)
                if self._read(self._key("deployments", name)) is None:
                    self._write(
                        self._key("deployments", name),
                        {
                            "name": name,
                            "region": region,
                            "kind": kind,
                            "spec_digest": None,
                            "updated": time.time(),
                            "spec_json": None,
                            "resources": {},
                        },
                    )
            self._held[name] = self._held.get(name, 0) + 1
        try:
            yield
        finally:
            with self._guard:
                self._held[name] -= 1
                if not self._held[name]:
                    del self._held[name]
                    self._delete(self._key("locks", name))

    def _acquire(self, name: str) -> None:
        me = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": time.time(),
            "token": self.token,
            "started": process_start(os.getpid()),
        }
        for _ in range(2):  # a second time only after taking over a dead holder's lock
            try:
                self._write(self._key("locks", name), me, only_if_absent=True)
                return
            except AwsCallError as exc:
                if not is_s3_condition_failed(exc):
                    raise
            holder = self._read(self._key("locks", name)) or {}
            if holder and not _alive(holder.get("pid", -1), holder.get("host", ""), me["host"], holder.get("started")):
                self._delete(self._key("locks", name))  # its process is gone from this host
                continue
            since = time.strftime("%H:%M:%S", time.localtime(holder.get("since", time.time())))
            raise DeploymentLocked(
                f"deployment {name} is being changed by pid {holder.get('pid')} on {holder.get('host')} "
                f"since {since} (lock in {self.uri})",
                "wait for it to finish; if that process is gone from another host, run "
                f"`neurondeploy unlock {name} --state {self.uri}`",
            )
        raise DeploymentLocked(
            f"deployment {name}: another process took the lock while a dead holder's was cleared",
            "run the command again",
        )

    def unlock(self, name: str, *, force: bool = False) -> None:
        """Always releases: whether a holder on another machine still runs cannot be told from here."""
        self._delete(self._key("locks", name))

    # --- reads and writes --------------------------------------------------------------------------------------------

    def get(self, name: str) -> DeploymentState | None:
        data = self._read(self._key("deployments", name))
        if data is None:
            return None
        resources = {
            n: ResourceState(**r) for n, r in sorted(data["resources"].items(), key=lambda item: item[1]["sequence"])
        }
        return DeploymentState(
            data["name"],
            data["region"],
            data["kind"],
            data["spec_digest"],
            data["updated"],
            resources,
            data.get("spec_json"),
        )

    def names(self) -> list[str]:
        pages = Paged(self.transport).call(
            "s3", "ListObjectsV2", {"Bucket": self.bucket, "Prefix": f"{self.prefix}deployments/"}
        )
        return sorted(
            item["Key"].rsplit("/", 1)[1].removesuffix(".json") for page in pages for item in page.get("Contents", [])
        )

    def _update(self, name: str, change) -> None:
        with self._guard:  # read-modify-write of one object: the executor's threads take turns
            data = self._read(self._key("deployments", name))
            if data is None:
                raise StateError(
                    f"no state for deployment {name} in {self.uri}", "this is a bug: writes happen under lock()"
                )
            change(data)
            data["updated"] = time.time()
            self._write(self._key("deployments", name), data)

    def record_spec(self, name: str, digest: str, spec_json: str) -> None:
        self._update(name, lambda data: data.update(spec_digest=digest, spec_json=spec_json))

    def put_resource(self, deployment: str, resource: ResourceState) -> None:
        def change(data: dict) -> None:
            if resource.sequence < 0:
                resource.sequence = max((r["sequence"] for r in data["resources"].values()), default=0) + 1
            data["resources"][resource.name] = asdict(resource)

        self._update(deployment, change)

    def remove_resource(self, deployment: str, name: str) -> None:
        self._update(deployment, lambda data: data["resources"].pop(name, None))

    def forget(self, deployment: str) -> None:
        self._delete(self._key("deployments", deployment))


def open_state(location=None):
    """The state store at ``location`` (a path or ``s3://bucket/prefix``), else ``$NEURONDEPLOY_STATE``, else the
    local default."""
    location = str(location) if location else os.environ.get("NEURONDEPLOY_STATE")
    if location and location.startswith("s3://"):
        return S3StateStore(location)
    return StateStore(Path(location) if location else None)
