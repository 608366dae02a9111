"""Refresh: before an apply reconciles, read every recorded resource back from AWS (the drift readers), so the
apply acts on what exists rather than on what state remembers.

- ``missing`` (deleted out of band, or being deleted): planned for re-creation, with what uses its ids;
- ``changed`` (a managed attribute, a rule added or removed out of band): planned to be put back, in place
  where its kind can (:attr:`Kind.converge <neurondeploy.resources.kinds.Kind.converge>`, update requests),
  else replaced;
- ``untagged``: reported; the object is still this state's.

A refresh that cannot read (access denied, throttled past retries) stops the apply: acting on unread state is
what this step exists to prevent.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from neurondeploy.aws.transport import AwsCallError, AwsTransport
from neurondeploy.engine.drift import DriftItem, drift
from neurondeploy.engine.state import StateStore
from neurondeploy.errors import NeurondeployError


class RefreshFailed(NeurondeployError):
    exit_code = 6


@dataclass
class Refresh:
    items: list[DriftItem] = field(default_factory=list)

    @property
    def gone(self) -> frozenset[str]:
        return frozenset(i.resource for i in self.items if i.kind == "missing")

    @property
    def drifted(self) -> frozenset[str]:
        return frozenset(i.resource for i in self.items if i.kind == "changed") - self.gone


def refresh(name: str, transport: AwsTransport, state: StateStore) -> Refresh:
    if state.get(name) is None:
        return Refresh()
    try:
        # Against what state recorded as sent, not the new spec: a spec change is the diff's business, not drift.
        return Refresh(drift(name, transport, state))
    except AwsCallError as exc:
        raise RefreshFailed(
            f"refreshing {name} from AWS failed: {exc.message}; nothing was changed",
            exc.hint or "fix the cause (permissions, connectivity) and apply again",
        ) from exc
