"""moto 5.2.6 has no ``SimulatePrincipalPolicy`` (its server answers 500, "has not been implemented"). This patches
moto's in-process IAM responses (the ThreadedMotoServer runs in the test process; the CLI reaches it over HTTP)
with one that answers as IAM documents it: each action on each resource, ``allowed``, ``explicitDeny`` or
``implicitDeny``, from the role's inline and attached policies as moto stores them, within its permissions
boundary. The decision is neurondeploy's offline evaluator's (``neurondeploy/aws/policy_evaluation.py``, tested
against IAM's documented evaluation logic on its own): a stand-in for IAM's simulator, not IAM."""

from __future__ import annotations

import json
from urllib.parse import unquote
from xml.sax.saxutils import escape

from neurondeploy.aws.policy_evaluation import Authorization, decision

DECISIONS = {"allow": "allowed", "explicit deny": "explicitDeny", "implicit deny": "implicitDeny"}


def _document(text) -> dict:
    return json.loads(unquote(text)) if isinstance(text, str) else text


def _role_policies(backend, role) -> tuple[dict, dict | None]:
    statements = []
    for text in role.policies.values():
        statements += _listed(_document(text)["Statement"])
    for arn in role.managed_policies:
        policy = backend.get_policy(arn)
        statements += _listed(_document(policy.default_version.document)["Statement"])
    boundary = None
    if role.permissions_boundary_arn:
        policy = backend.get_policy(role.permissions_boundary_arn)
        boundary = _document(policy.default_version.document)
    return {"Statement": statements}, boundary


def _listed(statements) -> list:
    return [statements] if isinstance(statements, dict) else list(statements)


def install(monkeypatch) -> list[dict]:
    """Patch it in; returns the list every simulation's parameters are appended to."""
    from moto.iam.models import iam_backends
    from moto.iam.responses import IamResponse

    asked: list[dict] = []

    def simulate_principal_policy(response) -> str:
        source = response._get_param("PolicySourceArn")
        actions = response._get_param("ActionNames") or []
        resources = response._get_param("ResourceArns") or ["*"]
        asked.append({"PolicySourceArn": source, "ActionNames": actions, "ResourceArns": resources})
        backend = iam_backends[response.current_account]["global"]
        policy, boundary = _role_policies(backend, backend.get_role(source.rsplit("/", 1)[-1]))
        members = []
        for action in actions:
            for resource in resources:
                verdict = DECISIONS[decision(policy, Authorization(action, resource), boundary)]
                members.append(
                    f"<member><EvalActionName>{escape(action)}</EvalActionName><EvalResourceName>{escape(resource)}"
                    f"</EvalResourceName><EvalDecision>{verdict}</EvalDecision><MatchedStatements/>"
                    "<MissingContextValues/></member>"
                )
        return (
            '<SimulatePrincipalPolicyResponse xmlns="https://iam.amazonaws.com/doc/2010-05-08/">'
            f"<SimulatePrincipalPolicyResult><IsTruncated>false</IsTruncated><EvaluationResults>{''.join(members)}"
            "</EvaluationResults></SimulatePrincipalPolicyResult><ResponseMetadata><RequestId>sim</RequestId>"
            "</ResponseMetadata></SimulatePrincipalPolicyResponse>"
        )

    monkeypatch.setattr(IamResponse, "simulate_principal_policy", simulate_principal_policy, raising=False)
    return asked
