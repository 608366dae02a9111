"""The dependency graph of a deployment's resources: structural checks, creation order, and the walk that orders
any names by what they use (resources, recorded resources, kinds)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping

from neurondeploy.errors import PlanError
from neurondeploy.resources.model import Resource
from neurondeploy.resources.tags import EXECUTOR_REFS


def check_resources(resources: Iterable[Resource]) -> list[str]:
    """Structural problems: duplicate or malformed names, unknown dependencies, refs to resources not
    depended on (transitively) or to attributes no request outputs, and dependency cycles."""
    resources = list(resources)
    problems: list[str] = []
    by_name: dict[str, Resource] = {}
    for r in resources:
        if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", r.name):
            problems.append(f"{r.name}: name must match [a-z0-9][a-z0-9-]*")
        if r.name in by_name:
            problems.append(f"{r.name}: defined twice")
        by_name[r.name] = r
    for r in resources:
        for dep in r.depends_on:
            if dep not in by_name:
                problems.append(f"{r.name}: depends on unknown resource {dep}")
    closure = _closures(by_name)
    for r in resources:
        for res, attr in sorted(r.refs()):
            if (res, attr) in EXECUTOR_REFS:
                continue  # provided by the executor from the state it applies with
            if res not in by_name:
                problems.append(f"{r.name}: ${{{res}.{attr}}} names no resource")
                continue
            if res != r.name and res not in closure.get(r.name, set()):
                problems.append(f"{r.name}: uses ${{{res}.{attr}}} but does not depend on {res}")
            if attr not in by_name[res].outputs:
                problems.append(f"{r.name}: ${{{res}.{attr}}}: {res} outputs only {sorted(by_name[res].outputs)}")
    try:
        creation_order(resources)
    except PlanError as exc:
        problems.append(exc.message)
    return problems


def _closures(by_name: Mapping[str, Resource]) -> dict[str, set[str]]:
    result: dict[str, set[str]] = {}
    for name in by_name:
        seen: set[str] = set()
        stack = list(by_name[name].depends_on)
        while stack:
            dep = stack.pop()
            if dep in seen or dep not in by_name:
                continue
            seen.add(dep)
            stack.extend(by_name[dep].depends_on)
        result[name] = seen
    return result


def creation_order(resources: Iterable[Resource]) -> list[Resource]:
    """Dependencies first; ties keep the builders' order. Raises PlanError on a cycle."""
    by_name = {r.name: r for r in resources}
    return [by_name[name] for name in dependencies_first(by_name, lambda name: by_name[name].depends_on)]


def dependencies_first(names: Iterable[str], uses: Callable[[str], Iterable[str]]) -> list[str]:
    """``names``, each after every one of them it uses (transitively); what ``uses`` names outside ``names`` is
    ignored; ties keep the given order. Raises PlanError on a cycle. Reversed, it is a deletion order."""
    names = list(names)
    known = set(names)
    order: list[str] = []
    state: dict[str, int] = {}  # 1 visiting, 2 done

    def visit(name: str, path: tuple[str, ...]) -> None:
        if state.get(name) == 2:
            return
        if state.get(name) == 1:
            cycle = " -> ".join(path[path.index(name) :] + (name,))
            raise PlanError(f"dependency cycle: {cycle}", "this is a bug in a request builder")
        state[name] = 1
        for used in uses(name):
            if used in known:
                visit(used, path + (name,))
        state[name] = 2
        order.append(name)

    for name in names:
        visit(name, ())
    return order
