"""Apply and destroy: desired resources (from the plan's builders) against state, through the transport.

Reconcile: a resource recorded complete with the same create requests is left alone (no call at all); one
recorded half-way resumes at its next request; one whose requests changed is replaced, with everything that
depends on it; one no longer desired is deleted. Deletes go first, dependents before what they depend on;
creates follow in dependency order, independent branches in parallel. State is written after every request,
so a failed apply keeps (and records) what it made and the next apply finishes the job; ``rollback`` instead
deletes what this apply created.
"""

from __future__ import annotations

import hashlib
import json
import time
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Callable

from neurondeploy.errors import NeurondeployError
from neurondeploy.infra.refs import resolve
from neurondeploy.infra.resources import Request, Resource, creation_order, extract_outputs
from neurondeploy.infra.state import DeploymentState, ResourceState, StateStore
from neurondeploy.infra.transport import AwsCallError, AwsTransport, is_mutating

# Codes meaning "it is already gone": destroy treats them as success. ValidationError only with a message that
# says so (autoscaling and SageMaker report a missing name that way).
NOT_FOUND_CODES = ("NotFound", "NoSuchEntity", "NoSuchHostedZone", "ResourceNotFound", "LoadBalancerNotFound",
                   "TargetGroupNotFound", "ListenerNotFound", "ObjectNotFoundException")
NOT_FOUND_MESSAGES = ("not found", "does not exist", "could not find", "cannot find")
RETRY_ON_DELETE = ("DependencyViolation", "ResourceInUse", "InvalidRouteTableID", "ScalingActivityInProgress")
OUTPUT_RETRIES = 10  # ACM fills in DNS validation records a few seconds after RequestCertificate


class ApplyFailed(NeurondeployError):
    exit_code = 6


@dataclass
class ApplyResult:
    created: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    seconds: float = 0.0


def requests_hash(requests: tuple[Request, ...]) -> str:
    text = json.dumps([[r.service, r.operation, r.params] for r in requests], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _serialise(requests: tuple[Request, ...]) -> list[dict]:
    return [{"service": r.service, "operation": r.operation, "params": r.params,
             "wait": None if r.wait is None else {"waiter": r.wait.waiter, "params": r.wait.params, "service": r.wait.service}}
            for r in requests]


def _not_found(error: AwsCallError) -> bool:
    if error.code and any(marker in error.code for marker in NOT_FOUND_CODES):
        return True
    return error.code in ("ValidationError", "ValidationException", "InvalidParameterValue") and \
        any(marker in error.message.lower() for marker in NOT_FOUND_MESSAGES)


class Executor:
    def __init__(self, transport: AwsTransport, state: StateStore, *, parallel: bool = True, workers: int = 8,
                 on_event: Callable[[str], None] | None = None, delete_retry_s: float = 2.0, delete_retries: int = 60) -> None:
        self.transport = transport
        self.state = state
        self.parallel = parallel
        self.workers = workers if parallel else 1
        self.on_event = on_event or (lambda message: None)
        self.delete_retry_s = delete_retry_s
        self.delete_retries = delete_retries

    # --- apply --------------------------------------------------------------------------------------------------

    def apply(self, name: str, region: str, kind: str, resources: list[Resource], *, spec_digest: str = "",
              spec_json: str = "", rollback: bool = False) -> ApplyResult:
        started = time.perf_counter()
        with self.state.lock(name, region, kind):
            before = self.state.get(name)
            result = ApplyResult()
            ordered = creation_order(resources)
            doomed = self._doomed(before, ordered)
            self._delete(name, [before.resources[n] for n in doomed], before, result)
            current = self.state.get(name)
            try:
                self._create_all(name, ordered, current, result)
            except NeurondeployError:
                if rollback:
                    self.on_event("apply failed: rolling back what this apply created")
                    after = self.state.get(name)
                    mine = [after.resources[n] for n in result.created if n in after.resources]
                    self._delete(name, mine, after, ApplyResult())
                raise
            self.state.record_spec(name, spec_digest, spec_json)
        result.seconds = time.perf_counter() - started
        return result

    def _doomed(self, before: DeploymentState | None, ordered: list[Resource]) -> list[str]:
        """Recorded resources to delete first: no longer desired, or replaced (and their dependents)."""
        if before is None:
            return []
        desired = {r.name: r for r in ordered}
        doomed = {n for n in before.resources if n not in desired}
        changed = {r.name for r in ordered if r.name in before.resources
                   and before.resources[r.name].create_hash != requests_hash(r.create)}
        for resource in ordered:  # dependency order: a dependent of anything replaced is replaced too
            if resource.name in changed or any(dep in changed for dep in resource.depends_on):
                changed.add(resource.name)
        doomed |= {n for n in changed if n in before.resources}
        return sorted(doomed, key=lambda n: -before.resources[n].sequence)

    def _outputs(self, deployment: DeploymentState) -> dict[tuple[str, str], Any]:
        return {(r.name, attr): value for r in deployment.resources.values() for attr, value in r.outputs.items()}

    def _create_all(self, name: str, ordered: list[Resource], current: DeploymentState, result: ApplyResult) -> None:
        outputs = self._outputs(current)
        done = {n for n, r in current.resources.items() if r.complete}
        result.unchanged += [r.name for r in ordered if r.name in done]
        pending = [r for r in ordered if r.name not in done]
        running: dict[Future, Resource] = {}
        failure: BaseException | None = None
        with ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="apply") as pool:
            while (pending or running) and failure is None:
                for resource in [r for r in pending if all(d in done for d in r.depends_on)][: self.workers - len(running)]:
                    pending.remove(resource)
                    recorded = current.resources.get(resource.name)
                    running[pool.submit(self._create, name, resource, recorded, outputs)] = resource
                if not running:
                    raise ApplyFailed(f"cannot order {[r.name for r in pending]}", "this is a bug in the resource builders")
                finished, _ = wait(running, return_when=FIRST_EXCEPTION)
                for future in finished:
                    resource = running.pop(future)
                    if future.exception() is not None:
                        failure = failure or future.exception()
                        continue
                    done.add(resource.name)
                    result.created.append(resource.name)
            for future in list(running):  # let siblings already sent finish and be recorded
                if future.exception() is None:
                    result.created.append(running[future].name)
        if failure is not None:
            raise failure

    def _create(self, deployment: str, resource: Resource, recorded: ResourceState | None,
                outputs: dict[tuple[str, str], Any]) -> None:
        start = recorded.completed if recorded else 0
        own = dict(recorded.outputs) if recorded else {}
        record = ResourceState(resource.name, resource.type, own, start, len(resource.create), requests_hash(resource.create),
                               _serialise(resource.delete), list(resource.depends_on), resource.taggable, time.time(),
                               recorded.sequence if recorded else -1, list(recorded.create_requests) if recorded else [])
        verb = "resuming" if start else "creating"
        self.on_event(f"{verb} {resource.name} ({resource.type})")
        for index in range(start, len(resource.create)):
            request = resource.create[index]
            values = {**outputs, **{(resource.name, k): v for k, v in own.items()}}
            try:
                params = resolve(request.params, values)
            except KeyError as exc:
                raise ApplyFailed(f"{resource.name}: {exc}", "this is a bug in the resource builders") from None
            response = self._call_with_outputs(resource, request, params)
            record.create_requests.append({"service": request.service, "operation": request.operation, "params": params})
            own.update(response)
            record.outputs, record.completed = dict(own), index + 1
            self.state.put_resource(deployment, record)
            for attr, value in response.items():
                outputs[(resource.name, attr)] = value
            if request.wait is not None:
                wait_params = resolve(request.wait.params, {**outputs, **{(resource.name, k): v for k, v in own.items()}})
                self.transport.wait(request.wait.service or request.service, request.wait.waiter, wait_params)

    def _call_with_outputs(self, resource: Resource, request: Request, params: dict) -> dict[str, Any]:
        attempts = OUTPUT_RETRIES if not is_mutating(request.operation) and request.outputs else 1
        for attempt in range(attempts):
            try:
                response = self.transport.call(request.service, request.operation, params)
            except AwsCallError as exc:
                raise ApplyFailed(f"{resource.name} ({resource.type}): {exc.message}",
                                  exc.hint or "fix the cause and run apply again: it resumes where it stopped") from exc
            values = extract_outputs(request, response)
            if all(value is not None for value in values.values()) or attempt == attempts - 1:
                return {k: v for k, v in values.items() if v is not None}
            time.sleep(min(2 ** attempt * 0.2, 5))
        return {}

    # --- delete -------------------------------------------------------------------------------------------------

    def _delete(self, name: str, doomed: list[ResourceState], deployment: DeploymentState | None, result: ApplyResult) -> None:
        if not doomed or deployment is None:
            return
        outputs = self._outputs(deployment)
        for resource in sorted(doomed, key=lambda r: -r.sequence):  # dependents were created after what they use
            if resource.completed:
                self.on_event(f"deleting {resource.name} ({resource.type})")
                for request in resource.delete_requests:
                    self._send_delete(resource, request, outputs)
            self.state.remove_resource(name, resource.name)
            result.deleted.append(resource.name)

    def _send_delete(self, resource: ResourceState, request: dict, outputs: dict) -> None:
        try:
            params = resolve(request["params"], outputs)
        except KeyError:
            return  # it never got the ID this delete needs: nothing to delete by it
        for attempt in range(self.delete_retries):
            try:
                self.transport.call(request["service"], request["operation"], params)
                break
            except AwsCallError as exc:
                if _not_found(exc):
                    return
                if exc.code in RETRY_ON_DELETE and attempt < self.delete_retries - 1:
                    time.sleep(self.delete_retry_s)  # e.g. network interfaces of a just-deleted ALB still hold the group
                    continue
                raise ApplyFailed(f"deleting {resource.name} ({resource.type}): {exc.message}",
                                  "fix the cause and run destroy again: it continues where it stopped") from exc
        wait_spec = request.get("wait")
        if wait_spec:
            try:
                self.transport.wait(wait_spec.get("service") or request["service"], wait_spec["waiter"],
                                    resolve(wait_spec["params"], outputs))
            except (AwsCallError, KeyError):
                pass  # the verification pass reports anything that did not go

    def destroy_recorded(self, name: str) -> ApplyResult:
        """Delete every resource recorded for ``name``, dependents first. The tag sweep and verification are
        in :mod:`neurondeploy.infra.destroy`."""
        result = ApplyResult()
        deployment = self.state.get(name)
        if deployment is None:
            return result
        with self.state.lock(name, deployment.region, deployment.kind):
            deployment = self.state.get(name)
            self._delete(name, list(deployment.resources.values()), deployment, result)
        return result
