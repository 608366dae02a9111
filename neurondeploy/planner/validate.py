"""`validate`: schema errors and semantic findings for one or more spec files, each problem on one line.

It runs every check ``plan`` runs that needs no AWS: after the spec's own checks, the plan's requests are rendered
and each is checked offline as plan checks it (the service model's shapes, then the rules AWS states only in its
documentation, :mod:`neurondeploy.resources.aws_rules`). A refused request becomes a finding on the spec field that
feeds it, so a value AWS would refuse is named at ``validate`` with its line, not at ``apply`` half-way through."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from neurondeploy.errors import NeurondeployError, SpecError
from neurondeploy.planner.checks import Finding, error, errors_of, locate, run_checks
from neurondeploy.planner.plan import build_plan
from neurondeploy.specs.loader import LoadedSpec, load_spec


@dataclass
class ValidationResult:
    file: str
    loaded: LoadedSpec | None
    schema_errors: list[SpecError] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.schema_errors and not errors_of(self.findings)

    def lines(self) -> list[str]:
        lines = [f"error: {problem.one_line()}" for problem in self.schema_errors]
        lines += [f"{finding.level}: {finding.one_line()}" for finding in self.findings]
        if self.ok:
            spec = self.loaded.spec
            lines.append(f"ok: {self.file} ({spec.kind} {spec.name})")
        return lines

    def as_dict(self) -> dict:
        return {
            "file": self.file,
            "ok": self.ok,
            "errors": [problem.one_line() for problem in self.schema_errors]
            + [finding.one_line() for finding in errors_of(self.findings)],
            "warnings": [finding.one_line() for finding in self.findings if finding.level == "warning"],
        }


# (operation, where the problem is in the request, the spec field that feeds it): the first match names a refused
# request's finding; a problem matching none is put on the spec's name.
REQUEST_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("CreateTrainingJob", "HyperParameters", "hyperparameters"),
    ("CreateTrainingJob", "Environment", "environment"),
    ("CreateTrainingJob", "AlgorithmSpecification.TrainingImage", "image_uri"),
    ("CreateTrainingJob", "CheckpointConfig", "checkpoint.s3_uri"),
    ("CreateTrainingJob", "OutputDataConfig", "output_s3_uri"),
    ("CreateTrainingJob", "InputDataConfig", "inputs"),
    ("CreateTrainingJob", "RoleArn", "iam.role_arn"),
    ("CreateModel", "PrimaryContainer.Environment", "deployment.container.env"),
    ("CreateModel", "PrimaryContainer.Image", "deployment.container.image_uri"),
    ("CreateModel", "PrimaryContainer.ModelDataUrl", "model.s3_uri"),
    ("CreateModel", "ExecutionRoleArn", "iam.role_arn"),
    ("AuthorizeSecurityGroupIngress", "IpPermissions", "network.allowed_cidrs"),
)
KEYED = re.compile(r"^\[['\"](?P<key>[^'\"]+)['\"]\]")  # HyperParameters['lr']: the finding goes on that key


def request_field(problem: str) -> str:
    """The spec field behind a refused request's problem ``"<Operation>.<Path>: ..."``."""
    operation, _, rest = problem.partition(".")
    path = rest.split(":", 1)[0]
    for op, prefix, field_name in REQUEST_FIELDS:
        if op == operation and path.startswith(prefix):
            keyed = KEYED.match(path[len(prefix) :])
            return f"{field_name}.{keyed['key']}" if keyed else field_name
    return "name"


def request_findings(loaded: LoadedSpec, findings: list[Finding]) -> list[Finding]:
    """What plan's offline check of every rendered request refuses, as findings (module doc); ``findings``: the
    spec's checks, already run and holding no error, which the plan reuses instead of running them again."""
    try:
        plan = build_plan(loaded, findings)
    except NeurondeployError as exc:
        return [error("name", exc.message, exc.hint)]
    return [
        error(
            request_field(problem),
            f"AWS would refuse {request.service}:{problem}",
            "change this value; `neurondeploy plan` shows the whole request",
        )
        for resource in plan.resources + plan.shared
        for request in resource.requests + resource.delete_requests
        for problem in request.problems
    ]


def validate_loaded(loaded: LoadedSpec) -> ValidationResult:
    findings = run_checks(loaded)
    if not errors_of(findings):
        findings += locate(loaded, request_findings(loaded, findings))
    return ValidationResult(loaded.source.file, loaded, findings=findings)


def validate_file(path: str) -> ValidationResult:
    try:
        loaded = load_spec(path)
    except SpecError as exc:
        return ValidationResult(str(path), None, schema_errors=getattr(exc, "problems", [exc]))
    return validate_loaded(loaded)


def validate_files(paths: list[str]) -> list[ValidationResult]:
    return [validate_file(path) for path in paths]
