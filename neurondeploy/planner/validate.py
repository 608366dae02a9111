"""`validate`: schema errors and semantic findings for one or more spec files, each problem on one line."""

from __future__ import annotations

from dataclasses import dataclass, field

from neurondeploy.errors import SpecError
from neurondeploy.planner.checks import Finding, errors_of, run_checks
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


def validate_loaded(loaded: LoadedSpec) -> ValidationResult:
    return ValidationResult(loaded.source.file, loaded, findings=run_checks(loaded))


def validate_file(path: str) -> ValidationResult:
    try:
        loaded = load_spec(path)
    except SpecError as exc:
        return ValidationResult(str(path), None, schema_errors=getattr(exc, "problems", [exc]))
    return validate_loaded(loaded)


def validate_files(paths: list[str]) -> list[ValidationResult]:
    return [validate_file(path) for path in paths]
