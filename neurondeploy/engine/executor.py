"""Apply and destroy: desired resources (from the plan's builders) against state, through the transport.

Reconcile: a resource recorded complete with the same create requests is left alone (no call at all); one
recorded half-way resumes at its next request; one no longer desired is deleted. One whose requests changed
(:func:`~neurondeploy.resources.model.content_hash`) is, by its ``identity``:

- updated in place when its identity stayed and it has ``update`` requests (a SageMaker endpoint moved to a new
  endpoint config): its dependents stay; progress is kept in its outputs under ``_update``, so a failed update
  resumes at the request that failed;
- made anew beside the old object when its identity changed and it is ``create_before_delete`` (blue/green):
  the old record is *retired* (renamed ``<name>~<hash>`` in state) and deleted only after every create and
  update of the apply succeeded — a failed apply keeps it, and a later apply whose spec wants it back restores it;
- otherwise replaced: deleted first, with everything that depends on it, and created again.

Deletes go first, dependents before what they depend on; creates and updates follow in dependency order,
independent branches in parallel; retired objects go last. State is written after every request, so a failed
apply keeps (and records) what it made and the next apply finishes the job; ``rollback`` instead deletes what
this apply created (unless an in-place update already moved something onto it).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

import jmespath

from neurondeploy.aws.errors import is_already_done, is_gone, is_retryable
from neurondeploy.aws.transport import AwsCallError, AwsTransport, is_mutating
from neurondeploy.engine.adopt import adopt, as_upsert, candidate
from neurondeploy.engine.drift import recorded_ids
from neurondeploy.engine.reconcile import RETIRED, deletion_order, is_retired, reconcile
from neurondeploy.engine.state import DeploymentState, ResourceState, StateStore
from neurondeploy.engine.sweep import AwsCaller, Leftover
from neurondeploy.errors import NeurondeployError
from neurondeploy.resources.graph import creation_order
from neurondeploy.resources.kinds import Expected
from neurondeploy.resources.model import (
    Request,
    Resource,
    content_hash,
    extract_outputs,
)
from neurondeploy.resources.refs import resolve
from neurondeploy.resources.registry import registry
from neurondeploy.resources.tags import STATE
from neurondeploy.resources.validation import idempotency_member

OUTPUT_RETRIES = 10  # ACM fills in DNS validation records a few seconds after RequestCertificate
UPDATE_PROGRESS = "_update"
INTENT = "_intent"  # outputs key of a mutating create request sent and not yet answered: {"index", "operation"}  # outputs key of an in-place update under way: {"hash": new content hash, "done": n}


class ApplyFailed(NeurondeployError):
    exit_code = 6


@dataclass
class ApplyResult:
    created: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)  # in place (same identity)
    seconds: float = 0.0


def _serialise(requests: tuple[Request, ...]) -> list[dict]:
    return [
        {
            "service": r.service,
            "operation": r.operation,
            "params": r.params,
            "wait": None
            if r.wait is None
            else {"waiter": r.wait.waiter, "params": r.wait.params, "service": r.wait.service},
            **({"done_if": list(r.done_if)} if r.done_if else {}),
            **({"undoes": r.undoes} if r.undoes else {}),
        }
        for r in requests
    ]


class Executor:
    def __init__(
        self,
        transport: AwsTransport,
        state: StateStore,
        *,
        parallel: bool = True,
        workers: int = 8,
        on_event: Callable[[str], None] | None = None,
        delete_retry_s: float = 2.0,
        delete_retries: int = 60,
    ) -> None:
        self.transport = transport
        self.state = state
        self.parallel = parallel
        self.workers = workers if parallel else 1
        self.on_event = on_event or (lambda message: None)
        self.delete_retry_s = delete_retry_s
        self.delete_retries = delete_retries
        self.found: list[Leftover] = []  # see apply()

    # --- apply --------------------------------------------------------------------------------------------------

    def apply(
        self,
        name: str,
        region: str,
        kind: str,
        resources: list[Resource],
        *,
        spec_digest: str = "",
        spec_json: str = "",
        rollback: bool = False,
        found: list[Leftover] = (),
        gone: Iterable[str] = (),
        drifted: Iterable[str] = (),
        verify: Callable[[], None] | None = None,
    ) -> ApplyResult:
        """``found``: objects of this state's lineage that state does not record (the ownership scan's), which a
        resumed create may adopt. ``gone``/``drifted``: the refresh's findings (:func:`reconcile`). ``verify``
        (the smoke test) runs once everything is made and updated, before the retired objects are deleted; when it
        raises after a blue/green update, the deployment goes back to them (:meth:`_revert`) and the error
        propagates; after a create, what was made stays recorded (deleted with ``rollback``)."""
        started = time.perf_counter()
        self.found = list(found)
        with self.state.lock(name, region, kind):
            before = self.state.get(name)
            result = ApplyResult()
            ordered = creation_order(resources)
            plan = reconcile(before, ordered, gone=frozenset(gone), drifted=frozenset(drifted))
            self._delete(name, [before.resources[n] for n in plan.doomed], before, result)
            for missing in plan.gone:
                self.on_event(f"{missing} ({before.resources[missing].type}) is gone from AWS: making it again")
                self.state.remove_resource(name, missing)
            self._retire(name, plan.retire)
            self._restore(name, ordered)
            current = self.state.get(name)
            existing = set(current.resources)
            try:
                self._create_all(name, ordered, current, result, set(plan.update))
            except NeurondeployError:
                if rollback:
                    self._rollback(name, result, existing)
                raise
            refused = self._verify(verify, result)
            if refused is not None and (result.updated or rollback):
                if result.updated:
                    self._revert(name, before, ordered, result, existing, plan.doomed)
                else:
                    self._rollback(name, result, existing)
                raise refused
            after = self.state.get(name)
            self._delete(name, [r for n, r in after.resources.items() if is_retired(n)], after, result)
            self.state.record_spec(name, spec_digest, spec_json)
        if refused is not None:
            raise refused
        result.seconds = time.perf_counter() - started
        return result

    @staticmethod
    def _verify(verify: Callable[[], None] | None, result: ApplyResult) -> NeurondeployError | None:
        if verify is None or not (result.created or result.updated):
            return None
        try:
            verify()
        except NeurondeployError as exc:
            return exc
        return None

    def _revert(
        self,
        name: str,
        before: DeploymentState,
        ordered: list[Resource],
        result: ApplyResult,
        existing: set[str],
        doomed: list[str],
    ) -> None:
        """Back to the deployment as it was before this apply, after its check failed: each object updated in
        place converged by its kind to its previous create requests (an endpoint moved back to its old config),
        its record restored, then what this apply made deleted and the retired objects current again. Not when
        this apply deleted something first (a replaced object is gone) or a kind cannot converge: said, and kept."""
        kinds = registry()
        previous = {n: before.resources.get(n) for n in result.updated}
        cannot = [n for n, r in previous.items() if r is None or getattr(kinds.get(r.type), "converge", None) is None]
        if doomed or cannot:
            what = f"deleted {', '.join(doomed)}" if doomed else f"updated {', '.join(cannot)}"
            self.on_event(f"not rolled back: this apply {what} with no way back; apply the previous spec to return")
            return
        outputs = self._outputs(before)
        for resource in reversed([r for r in ordered if r.name in previous]):
            record = previous[resource.name]
            expected = Expected([(r["operation"], r["params"]) for r in record.create_requests])
            done = kinds.get(record.type).converge(AwsCaller(self.transport), recorded_ids(record, outputs), expected)
            for line in done:
                self.on_event(f"{resource.name}: {line}")
            self.state.put_resource(name, record)
        result.updated = []
        self._rollback(name, result, existing)

    def _rollback(self, name: str, result: ApplyResult, existing: set[str]) -> None:
        """Delete what this apply made: the resources it completed, and any it left half-made (its first requests
        sent, a later one failed: an instance profile without its role), which are recorded but not complete."""
        if result.updated:  # something in place already uses what this apply created: deleting it would break it
            self.on_event(
                f"apply failed after updating {', '.join(result.updated)} in place: not rolled back; "
                "run apply again to finish"
            )
            return
        self.on_event("apply failed: rolling back what this apply created")
        after = self.state.get(name)
        made = [n for n in after.resources if n in result.created or (n not in existing and not is_retired(n))]
        self._delete(name, [after.resources[n] for n in made], after, ApplyResult())
        after = self.state.get(name)
        for retired in sorted((r for n, r in after.resources.items() if is_retired(n)), key=lambda r: r.sequence):
            base = retired.name.split(RETIRED, 1)[0]
            if base not in after.resources:  # the previous object is current again
                retired.depends_on = [d.split(RETIRED, 1)[0] for d in retired.depends_on]
                self._rename(name, retired, base, {})
                after.resources[base] = retired

    def _retire(self, name: str, names: list[str]) -> None:
        """Blue/green: move the records of ``names`` aside (``<name>~<hash>``) with their deletes resolved, so
        their new objects can be recorded under the names while the old ones live on until the apply is done."""
        if not names:
            return
        deployment = self.state.get(name)
        outputs = self._outputs(deployment)
        renamed = {n: f"{n}{RETIRED}{deployment.resources[n].create_hash.rsplit(':', 1)[-1][:8]}" for n in names}
        for old in names:
            record = deployment.resources[old]
            self.on_event(f"keeping {old} ({record.type}) until its successor is in use")
            record.delete_requests = [_resolved(request, outputs) for request in record.delete_requests]
            self._rename(name, record, renamed[old], renamed)

    def _restore(self, name: str, ordered: list[Resource]) -> None:
        """A retired object the spec wants again (a failed update followed by going back): current again."""
        deployment = self.state.get(name)
        if deployment is None:
            return
        for resource in ordered:
            if resource.name in deployment.resources or not resource.identity:
                continue
            wanted = content_hash(resource)
            for record in list(deployment.resources.values()):
                if (
                    is_retired(record.name)
                    and record.name.split(RETIRED, 1)[0] == resource.name
                    and record.create_hash == wanted
                    and record.complete
                ):
                    self.on_event(f"restoring {resource.name} ({resource.type}): the spec wants it again")
                    record.depends_on = list(resource.depends_on)
                    self._rename(name, record, resource.name, {})
                    break

    def _rename(self, deployment: str, record: ResourceState, new_name: str, renamed: dict[str, str]) -> None:
        old = record.name
        record.name = new_name
        record.depends_on = [renamed.get(d, d) for d in record.depends_on]
        self.state.put_resource(deployment, record)  # written before the old row goes: a crash leaves both
        self.state.remove_resource(deployment, old)

    def _outputs(self, deployment: DeploymentState) -> dict[tuple[str, str], Any]:
        return {
            (STATE, "Lineage"): self.state.lineage,
            **{(r.name, attr): value for r in deployment.resources.values() for attr, value in r.outputs.items()},
        }

    def _create_all(
        self,
        name: str,
        ordered: list[Resource],
        current: DeploymentState,
        result: ApplyResult,
        updates: set[str] = frozenset(),
    ) -> None:
        outputs = self._outputs(current)
        done = {n for n, r in current.resources.items() if r.complete and n not in updates}
        result.unchanged += [r.name for r in ordered if r.name in done]
        pending = [r for r in ordered if r.name not in done]
        running: dict[Future, Resource] = {}
        failure: BaseException | None = None
        with ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="apply") as pool:
            while (pending or running) and failure is None:
                for resource in [r for r in pending if all(d in done for d in r.depends_on)][
                    : self.workers - len(running)
                ]:
                    pending.remove(resource)
                    recorded = current.resources.get(resource.name)
                    step = self._update if resource.name in updates else self._create
                    running[pool.submit(step, name, resource, recorded, outputs)] = resource
                if not running:
                    raise ApplyFailed(
                        f"cannot order {[r.name for r in pending]}", "this is a bug in the resource builders"
                    )
                finished, _ = wait(running, return_when=FIRST_EXCEPTION)
                for future in finished:
                    resource = running.pop(future)
                    if future.exception() is not None:
                        failure = failure or future.exception()
                        continue
                    done.add(resource.name)
                    (result.updated if resource.name in updates else result.created).append(resource.name)
            for future in list(running):  # let siblings already sent finish and be recorded
                if future.exception() is None:
                    name_done = running[future].name
                    (result.updated if name_done in updates else result.created).append(name_done)
        if failure is not None:
            raise failure

    def _create(
        self, deployment: str, resource: Resource, recorded: ResourceState | None, outputs: dict[tuple[str, str], Any]
    ) -> None:
        start = recorded.completed if recorded else 0
        own = dict(recorded.outputs) if recorded else {}
        record = ResourceState(
            resource.name,
            resource.type,
            own,
            start,
            len(resource.create),
            content_hash(resource),
            _serialise(resource.delete),
            list(resource.depends_on),
            resource.taggable,
            time.time(),
            recorded.sequence if recorded else -1,
            list(recorded.create_requests) if recorded else [],
        )
        verb = "resuming" if start else "creating"
        self.on_event(f"{verb} {resource.name} ({resource.type})")
        for index in range(start, len(resource.create)):
            request = resource.create[index]
            values = {**outputs, **{(resource.name, k): v for k, v in own.items()}}
            try:
                params = resolve(request.params, values)
            except KeyError as exc:
                raise ApplyFailed(f"{resource.name}: {exc}", "this is a bug in the resource builders") from None
            response = self._adopted(resource, request) if is_mutating(request.operation) else None
            if response is None:
                if is_mutating(request.operation):  # the intent first: an answer lost after this can be adopted
                    intent = {"index": index, "operation": request.operation}
                    token = idempotency_member(request.service, request.operation)
                    if token and token not in params:  # the same token on a resend: AWS answers with the first object
                        earlier = own.get(INTENT) or {}
                        resend = earlier.get("index") == index and earlier.get("token")
                        params[token] = intent["token"] = resend or uuid.uuid4().hex  # 32 characters fit every token
                    record.outputs = {**own, INTENT: intent}
                    self.state.put_resource(deployment, record)
                adopted = as_upsert(resource, params, self.found, self.state.lineage) if self.found else None
                if adopted is not None:
                    self.on_event(f"{resource.name}: the record exists and is this state's: adopting it (UPSERT)")
                response = self._call_with_outputs(resource, request, adopted or params)
            own.pop(INTENT, None)
            record.create_requests.append(
                {"service": request.service, "operation": request.operation, "params": params}
            )
            own.update(response)
            record.outputs, record.completed = dict(own), index + 1
            self.state.put_resource(deployment, record)
            for attr, value in response.items():
                outputs[(resource.name, attr)] = value
            if request.wait is not None:
                wait_params = resolve(
                    request.wait.params, {**outputs, **{(resource.name, k): v for k, v in own.items()}}
                )
                self.transport.wait(request.wait.service or request.service, request.wait.waiter, wait_params)

    def _adopted(self, resource: Resource, request: Request) -> dict[str, Any] | None:
        """The object this create request would make, when the ownership scan found it made already by this
        state and unrecorded: a lost answer (the intent recorded before the call says which), or what
        ``neurondeploy import`` retagged (:mod:`neurondeploy.engine.adopt`)."""
        first = next(r for r in resource.create if is_mutating(r.operation))
        if request is not first or not self.found:
            return None  # only the request that makes the object can have made it
        leftover = candidate(resource, self.found, self.state.lineage)
        if leftover is not None and not request.outputs:
            outputs = {}  # it exists (the scan just saw it) and its answer holds nothing state needs
        else:
            outputs = adopt(self.transport, resource, request, leftover) if leftover else None
        if outputs is not None:
            self.found.remove(leftover)
            self.on_event(f"{resource.name}: adopted {leftover.id} ({request.operation} made it; state did not know)")
        return outputs

    def _update(
        self, deployment: str, resource: Resource, recorded: ResourceState, outputs: dict[tuple[str, str], Any]
    ) -> None:
        """Send ``resource.update`` to the recorded object, then record it as made by the new create requests.
        A request with a wait waits before too (an object mid-change refuses another change) and counts as done
        only once its wait passed, so a re-apply after a failure re-sends it. A request whose ``expect`` fails
        (AWS rolled the change back) starts the update over on the next apply."""
        wanted = content_hash(resource)
        own = {k: v for k, v in recorded.outputs.items() if k != UPDATE_PROGRESS}
        progress = recorded.outputs.get(UPDATE_PROGRESS) or {}
        start = progress.get("done", 0) if progress.get("hash") == wanted else 0
        self.on_event(f"{'resuming the update of' if start else 'updating'} {resource.name} ({resource.type}) in place")
        converge = getattr(registry().get(resource.type), "converge", None)
        # Requests unchanged: a drift, put back by the kind's converge where it has one (a fixed variant's count is
        # one UpdateEndpointWeightsAndCapacities; UpdateEndpoint would replace the endpoint's instances).
        repair = converge is not None and recorded.create_hash == wanted
        if converge is not None and (not resource.update or repair):
            self._converge(resource, recorded, converge, _values(outputs, resource.name, own))
        updates = [] if repair else resource.update
        for index in range(start, len(updates)):
            request = updates[index]
            if request.when and not _changed(request.when, recorded, resource, _values(outputs, resource.name, own)):
                continue
            params = self._resolve(resource, request.params, _values(outputs, resource.name, own))
            if request.wait is not None:
                self._wait(request, _values(outputs, resource.name, own))
            try:
                response = self._call_with_outputs(resource, request, params)
            except ApplyFailed:
                if request.expect:
                    recorded.outputs = own
                    self.state.put_resource(deployment, recorded)
                raise
            own.update(response)
            for attr, value in response.items():
                outputs[(resource.name, attr)] = value
            if request.wait is not None:
                self._wait(request, _values(outputs, resource.name, own))
            recorded.outputs = {**own, UPDATE_PROGRESS: {"hash": wanted, "done": index + 1}}
            self.state.put_resource(deployment, recorded)
        values = _values(outputs, resource.name, own)
        recorded.outputs, recorded.create_hash = own, wanted
        recorded.completed = recorded.total = len(resource.create)
        recorded.delete_requests, recorded.depends_on = _serialise(resource.delete), list(resource.depends_on)
        recorded.create_requests = [
            {"service": r.service, "operation": r.operation, "params": _resolved_params(r.params, values)}
            for r in resource.create
        ]
        self.state.put_resource(deployment, recorded)

    def _converge(self, resource: Resource, recorded: ResourceState, converge, values: dict) -> None:
        """An update by the kind's converge: the object made exactly what the new create requests ask."""
        expected = Expected([(r.operation, self._resolve(resource, r.params, values)) for r in resource.create])
        ids = recorded_ids(recorded, values)
        try:
            done = converge(AwsCaller(self.transport), ids, expected)
        except AwsCallError as exc:
            raise ApplyFailed(
                f"{resource.name} ({resource.type}): {exc.message}", exc.hint or "run apply again"
            ) from exc
        for line in done:
            self.on_event(f"{resource.name}: {line}")

    def _resolve(self, resource: Resource, params: dict, values: dict) -> dict:
        try:
            return resolve(params, values)
        except KeyError as exc:
            raise ApplyFailed(f"{resource.name}: {exc}", "this is a bug in the resource builders") from None

    def _wait(self, request: Request, values: dict) -> None:
        self.transport.wait(
            request.wait.service or request.service, request.wait.waiter, resolve(request.wait.params, values)
        )

    def _call_with_outputs(self, resource: Resource, request: Request, params: dict) -> dict[str, Any]:
        attempts = OUTPUT_RETRIES if not is_mutating(request.operation) and request.outputs else 1
        for attempt in range(attempts):
            try:
                response = self.transport.call(request.service, request.operation, params)
            except AwsCallError as exc:
                if is_already_done(request.operation, exc) and not request.outputs:
                    # Resuming after a lost answer: AWS did it the first time (a rule added, a gateway attached).
                    self.on_event(f"{resource.name}: {request.operation} was already done ({exc.code})")
                    return {}
                raise ApplyFailed(
                    f"{resource.name} ({resource.type}): {exc.message}",
                    exc.hint or "fix the cause and run apply again: it resumes where it stopped",
                ) from exc
            _check_expected(resource, request, response)
            values = extract_outputs(request, response)
            if all(value is not None for value in values.values()) or attempt == attempts - 1:
                return {k: v for k, v in values.items() if v is not None}
            time.sleep(min(2**attempt * 0.2, 5))
        return {}

    # --- delete -------------------------------------------------------------------------------------------------

    def _delete(
        self, name: str, doomed: list[ResourceState], deployment: DeploymentState | None, result: ApplyResult
    ) -> None:
        if not doomed or deployment is None:
            return
        outputs = self._outputs(deployment)
        for resource in deletion_order(
            {**deployment.resources, **{r.name: r for r in doomed}}, [r.name for r in doomed]
        ):
            if resource.completed:
                self.on_event(f"deleting {resource.name} ({resource.type})")
                for request in resource.delete_requests:
                    self._send_delete(resource, request, outputs)
            self.state.remove_resource(name, resource.name)
            result.deleted.append(resource.name)

    def _send_delete(self, resource: ResourceState, request: dict, outputs: dict) -> None:
        if resource.completed < request.get("undoes", 0):
            return  # the create step it undoes never happened
        try:
            params = resolve(request["params"], outputs)
        except KeyError:
            return  # it never got the ID this delete needs: nothing to delete by it
        for attempt in range(self.delete_retries):
            try:
                self.transport.call(request["service"], request["operation"], params)
                break
            except AwsCallError as exc:
                if is_gone(exc) or any(fragment in exc.message for fragment in request.get("done_if", ())):
                    return
                if is_retryable(exc) and attempt < self.delete_retries - 1:
                    time.sleep(
                        self.delete_retry_s
                    )  # e.g. network interfaces of a just-deleted ALB still hold the group
                    continue
                raise ApplyFailed(
                    f"deleting {resource.name} ({resource.type}): {exc.message}",
                    "fix the cause and run destroy again: it continues where it stopped",
                ) from exc
        wait_spec = request.get("wait")
        if wait_spec:
            try:
                self.transport.wait(
                    wait_spec.get("service") or request["service"],
                    wait_spec["waiter"],
                    resolve(wait_spec["params"], outputs),
                )
            except (AwsCallError, KeyError):
                pass  # the verification pass reports anything that did not go

    def destroy_recorded(self, name: str) -> ApplyResult:
        """Delete every resource recorded for ``name``, dependents first. The tag sweep and verification are
        in :mod:`neurondeploy.engine.destroy`."""
        result = ApplyResult()
        deployment = self.state.get(name)
        if deployment is None:
            return result
        with self.state.lock(name, deployment.region, deployment.kind):
            deployment = self.state.get(name)
            self._delete(name, list(deployment.resources.values()), deployment, result)
        return result


def _changed(path: str, recorded: ResourceState, resource: Resource, values: dict) -> bool:
    """Whether ``path`` (JMESPath into the first create request) has another value than when it was recorded."""
    before = recorded.create_requests[0].get("params", {}) if recorded.create_requests else {}
    now = _resolved_params(resource.create[0].params, values)
    return jmespath.search(path, before) != jmespath.search(path, now)


def _values(outputs: dict, name: str, own: dict) -> dict:
    return {**outputs, **{(name, k): v for k, v in own.items()}}


def _resolved(request: dict, outputs: dict) -> dict:
    """A recorded delete request with its refs resolved where state knows them (kept as is where not)."""
    resolved = dict(request)
    resolved["params"] = _resolved_params(request.get("params", {}), outputs)
    if request.get("wait"):
        resolved["wait"] = {**request["wait"], "params": _resolved_params(request["wait"].get("params", {}), outputs)}
    return resolved


def _resolved_params(params: Any, outputs: dict) -> Any:
    try:
        return resolve(params, outputs)
    except KeyError:
        return params


def _check_expected(resource: Resource, request: Request, response: dict) -> None:
    import jmespath

    for path, value in request.expect.items():
        found = jmespath.search(path, response)
        if found != value:
            raise ApplyFailed(
                f"{resource.name} ({resource.type}): {request.operation} shows {path} = {found!r}, expected {value!r}",
                "AWS did not take the change (look for a failure reason on the "
                "resource); fix the cause and run apply again",
            )
