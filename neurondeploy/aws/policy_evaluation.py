"""Whether an identity policy allows one request, decided offline as IAM documents its evaluation.

An explicit ``Deny`` wins, else any matching ``Allow`` allows, else the request is implicitly denied
(https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_evaluation-logic.html). A statement matches
when its ``Action`` matches (case-insensitive, ``*`` and ``?`` wildcards), its ``Resource`` matches (case-sensitive)
and every condition holds: operators AND, keys within an operator AND, values of one key OR; a key absent from the
request fails a positive operator and satisfies a negated one, ``...IfExists`` is satisfied by an absent key, and
``ForAllValues:``/``ForAnyValue:`` compare multi-valued keys such as ``aws:TagKeys``
(https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_condition_operators.html,
https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_condition-single-vs-multi-valued-context-keys.html).

A permissions boundary caps an identity policy: a request is allowed only when both allow it, and an explicit deny
in either wins (https://docs.aws.amazon.com/IAM/latest/UserGuide/access_policies_boundaries.html), so
``decision(policy, request, boundary)`` is the role's effective permission.

Only what neurondeploy's policies use is implemented: the string, ARN, ``Null`` and ``Bool`` operators; policy
variables (``${aws:PrincipalAccount}``) in resources and condition values, taken from the request's context (one
the request lacks matches nothing); no ``NotAction``/``NotResource``, numeric or date operators (a statement using
one is refused).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

Context = Mapping[str, str | Sequence[str]]


@dataclass(frozen=True)
class Authorization:
    """One thing IAM authorizes for a call: an action on a resource, with the request's context keys."""

    action: str
    resource: str
    context: Mapping[str, str | tuple[str, ...]] = field(default_factory=dict)


def _wildcard(pattern: str, value: str, *, ignore_case: bool) -> bool:
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, re.IGNORECASE | re.DOTALL if ignore_case else re.DOTALL) is not None


def _listed(value) -> list[str]:
    return [value] if isinstance(value, str | bool) else list(value)


def _string_match(operator: str, expected: str, actual: str) -> bool:
    if operator in ("StringEquals", "ArnEquals"):
        return expected == actual
    if operator == "StringEqualsIgnoreCase":
        return expected.lower() == actual.lower()
    if operator in ("StringLike", "ArnLike"):
        return _wildcard(expected, actual, ignore_case=False)
    if operator == "Bool":
        return str(expected).lower() == str(actual).lower()
    raise ValueError(f"condition operator {operator} is not supported by this evaluator")


POSITIVE = {
    "StringEquals": "StringEquals",
    "StringNotEquals": "StringEquals",
    "StringEqualsIgnoreCase": "StringEqualsIgnoreCase",
    "StringNotEqualsIgnoreCase": "StringEqualsIgnoreCase",
    "StringLike": "StringLike",
    "StringNotLike": "StringLike",
    "ArnEquals": "ArnEquals",
    "ArnNotEquals": "ArnEquals",
    "ArnLike": "ArnLike",
    "ArnNotLike": "ArnLike",
    "Bool": "Bool",
}


def _condition_holds(operator: str, key: str, expected, context: Context) -> bool:
    lowered = {k.lower(): v for k, v in context.items()}
    present = key.lower() in lowered
    actual = _listed(lowered[key.lower()]) if present else []
    expected_values = _listed(expected)
    if operator == "Null":
        return all((str(e).lower() == "true") == (not present) for e in expected_values)
    qualifier, _, operator = operator.rpartition(":")
    if_exists = operator.endswith("IfExists")
    operator = operator.removesuffix("IfExists")
    if operator not in POSITIVE:
        raise ValueError(f"condition operator {operator} is not supported by this evaluator")
    negated = POSITIVE[operator] != operator
    base = POSITIVE[operator]
    if not present:
        return if_exists or negated or qualifier == "ForAllValues"

    def matches(value: str) -> bool:
        return any(_string_match(base, str(e), value) for e in expected_values)

    if qualifier == "ForAllValues":
        return all(matches(v) != negated for v in actual)
    if qualifier == "ForAnyValue":
        return any(matches(v) != negated for v in actual)
    if len(actual) != 1:  # a single-valued operator against a multi-valued key: AWS says use a qualifier
        return False
    return matches(actual[0]) != negated


_VARIABLE = re.compile(r"\$\{([^}]+)\}")


def _substituted(value, context: Context):
    """``value`` with each ``${key}`` replaced by the request's value of that key; None where one is absent."""
    if not isinstance(value, str) or "${" not in value:
        return value
    lowered = {k.lower(): v for k, v in context.items()}
    missing = [key for key in _VARIABLE.findall(value) if key.lower() not in lowered]
    if missing:
        return None
    return _VARIABLE.sub(lambda m: str(lowered[m.group(1).lower()]), value)


def _present(values, context: Context) -> list:
    return [v for v in (_substituted(value, context) for value in _listed(values)) if v is not None]


def statement_matches(statement: Mapping, request: Authorization) -> bool:
    for unsupported in ("NotAction", "NotResource", "NotPrincipal"):
        if unsupported in statement:
            raise ValueError(f"statement {statement.get('Sid', '')!r} uses {unsupported}, unsupported here")
    if not any(_wildcard(a, request.action, ignore_case=True) for a in _listed(statement["Action"])):
        return False
    resources = _present(statement["Resource"], request.context)
    if not any(_wildcard(r, request.resource, ignore_case=False) for r in resources):
        return False
    return all(
        _condition_holds(operator, key, _present(expected, request.context), request.context)
        for operator, keys in statement.get("Condition", {}).items()
        for key, expected in keys.items()
    )


def _decision(policy: Mapping, request: Authorization) -> str:
    statements = policy["Statement"]
    statements = [statements] if isinstance(statements, Mapping) else statements
    matching = [s for s in statements if statement_matches(s, request)]
    if any(s["Effect"] == "Deny" for s in matching):
        return "explicit deny"
    return "allow" if matching else "implicit deny"


def decision(policy: Mapping, request: Authorization, boundary: Mapping | None = None) -> str:
    """``"allow"``, ``"explicit deny"`` or ``"implicit deny"``: of ``policy`` alone, or of a principal holding it
    within the permissions ``boundary``."""
    decisions = [_decision(policy, request)] + ([_decision(boundary, request)] if boundary is not None else [])
    if "explicit deny" in decisions:
        return "explicit deny"
    return "allow" if all(d == "allow" for d in decisions) else "implicit deny"


def allows(policy: Mapping, request: Authorization, boundary: Mapping | None = None) -> bool:
    return decision(policy, request, boundary) == "allow"
