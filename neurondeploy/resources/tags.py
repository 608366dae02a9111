"""Ownership tags: which deployment an AWS object belongs to, which state (lineage) owns it, and which of the
deployment's resources it is.

The lineage is the id of the state that applied it (:attr:`neurondeploy.engine.state.StateStore.lineage`): a
``${state.Lineage}`` ref the executor resolves, so plans stay offline and a resource's content hash does not
depend on which state applies it. A state deletes only what carries its own lineage (Terraform keeps the same
rule with its lineage field): a second state, a lost state file or a second laptop can never delete a live
deployment. The resource tag lets an apply that lost a create call's answer find the object it made and adopt it
instead of making a second one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from neurondeploy.resources.refs import ref

DEPLOYMENT_TAG = "neurondeploy:deployment"
MANAGED_BY_TAG = "neurondeploy:managed-by"
MANAGED_BY = "neurondeploy"
LINEAGE_TAG = "neurondeploy:lineage"
RESOURCE_TAG = "neurondeploy:resource"
STATE = "state"  # the pseudo-resource whose attributes the executor provides: ${state.Lineage}
LINEAGE = ref(STATE, "Lineage")
EXECUTOR_REFS = frozenset({(STATE, "Lineage")})  # refs no resource outputs: the executor provides them


def with_resource_tag(params: Any, resource_name: str) -> Any:
    """``params`` with ``neurondeploy:resource=<resource_name>`` beside every deployment tag in it, in the same
    shape (a ``Key``/``Value`` list entry, with its other fields such as ``PropagateAtLaunch``, or a tag dict)."""
    if isinstance(params, Mapping):
        out = {key: with_resource_tag(value, resource_name) for key, value in params.items()}
        if DEPLOYMENT_TAG in params and RESOURCE_TAG not in params and isinstance(params[DEPLOYMENT_TAG], str):
            out[RESOURCE_TAG] = resource_name
        return out
    if isinstance(params, list | tuple):
        items = [with_resource_tag(value, resource_name) for value in params]
        ours = next((i for i in items if isinstance(i, Mapping) and i.get("Key") == DEPLOYMENT_TAG), None)
        if ours is not None and not any(isinstance(i, Mapping) and i.get("Key") == RESOURCE_TAG for i in items):
            items.append({**ours, "Key": RESOURCE_TAG, "Value": resource_name})
        return type(params)(items)
    return params


def tag_value(tags: Any, key: str) -> str | None:
    """The value of ``key`` in tags given as a ``Key``/``Value`` list or a dict; None when absent."""
    if isinstance(tags, Mapping):
        value = tags.get(key)
        return value if isinstance(value, str) else None
    for tag in tags or []:
        if isinstance(tag, Mapping) and tag.get("Key") == key:
            return tag.get("Value")
    return None


def tag_dict(tags: Any) -> dict[str, str]:
    """Tags given as a ``Key``/``Value`` list or a dict, as a dict (an entry without a key is skipped)."""
    if isinstance(tags, Mapping):
        return {str(k): str(v) for k, v in tags.items()}
    return {t["Key"]: str(t.get("Value", "")) for t in tags or [] if isinstance(t, Mapping) and "Key" in t}
