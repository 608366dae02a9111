"""The plan: checks, cost per hour, and every AWS request `apply` would send — pure data, built offline.

Every request is checked strictly against the botocore service model before it is shown; IDs that
only exist after apply are ``${resource.Attribute}`` placeholders. A saved plan carries the spec
file's sha256, so a plan made from an older spec is refused instead of applied.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from neurondeploy import catalog
from neurondeploy.errors import PlanError
from neurondeploy.planner.checks import Finding, errors_of, instance_of, run_checks
from neurondeploy.specs import InferenceSpec, LoadedSpec, TrainingSpec, load_spec

PLAN_FORMAT = 1


class PlannedRequest(BaseModel):
    service: str = Field(description="boto3 client name")
    operation: str = Field(description="botocore operation name")
    params: dict[str, Any] = Field(description="the request's parameters; ${resource.Attribute} stands for IDs known only at apply")
    validated: bool = Field(description="passed the strict offline check against the botocore service model")
    problems: list[str] = Field(default_factory=list, description="why the offline check refused it")


class PlannedResource(BaseModel):
    name: str
    type: str
    description: str = ""
    depends_on: list[str]
    taggable: bool
    lookup: bool = Field(default=False, description="only reads (e.g. the AMI id, the account); creates nothing")
    hourly_usd: float | None = None
    requests: list[PlannedRequest] = Field(description="what apply sends to create it, in order")
    delete_requests: list[PlannedRequest] = Field(description="what destroy sends")


class CostItem(BaseModel):
    what: str
    hourly_usd: float | None
    source: str
    confirmed: bool


class Cost(BaseModel):
    hourly_usd: float | None
    items: list[CostItem]
    notes: list[str]
    run_ceiling_usd: float | None = None  # training: hourly × max_runtime_s, where SageMaker stops the job


class Plan(BaseModel):
    format: int = PLAN_FORMAT
    name: str
    kind: str
    region: str
    spec_file: str
    spec_sha256: str
    findings: list[dict[str, Any]]
    cost: Cost
    resources: list[PlannedResource]
    request_count: int
    validated_count: int

    @property
    def all_validated(self) -> bool:
        return self.validated_count == self.request_count


class PlanRefused(PlanError):
    """A spec with error findings: no plan is made. ``problems`` are the findings, one line each."""

    def __init__(self, problems: list[Finding]) -> None:
        super().__init__(problems[0].one_line())
        self.problems = problems


def _planned(request) -> PlannedRequest:
    from neurondeploy.infra.request_validation import validate_request

    problems = validate_request(request.service, request.operation, request.params)
    return PlannedRequest(service=request.service, operation=request.operation, params=request.params,
                          validated=not problems, problems=problems)


def plan_cost(loaded: LoadedSpec, resources) -> Cost:
    spec = loaded.spec
    instance = instance_of(spec)
    count = spec.instance_count if isinstance(spec, TrainingSpec) else spec.deployment.instance_count
    on_sagemaker = isinstance(spec, TrainingSpec) or spec.deployment.platform == "sagemaker"
    items = [CostItem(what=f"{count} × {instance.name} on-demand (EC2, {instance.price_region})",
                      hourly_usd=catalog.price_per_hour(instance, count), source=instance.price_source,
                      confirmed=instance.price_confirmed)]
    notes = []
    if on_sagemaker:
        notes.append(f"SageMaker bills ml.{instance.name} above the EC2 price and no first-party ml.* price is in the "
                     "catalogue: the total is a lower bound (query the AWS Pricing API for the exact figure)")
    if isinstance(spec, TrainingSpec) and spec.spot.enabled:
        notes.append("managed spot usually costs well below on-demand; the on-demand figure is the ceiling")
    if isinstance(spec, InferenceSpec) and spec.deployment.autoscaling:
        scaling = spec.deployment.autoscaling
        notes.append(f"autoscaling between {scaling.min_instances} and {scaling.max_instances} instances: "
                     f"up to ${(catalog.price_per_hour(instance, scaling.max_instances) or 0):,.2f}/h at max")
    for resource in resources:
        if resource.hourly_usd:
            items.append(CostItem(what=f"{resource.type} {resource.name}", hourly_usd=resource.hourly_usd,
                                  source=resource.description or "list price, us-east-1", confirmed=False))
    known = [item.hourly_usd for item in items if item.hourly_usd is not None]
    hourly = round(sum(known), 4) if known else None
    ceiling = None
    if isinstance(spec, TrainingSpec) and hourly is not None:
        ceiling = round(hourly * spec.max_runtime_s / 3600, 2)
    return Cost(hourly_usd=hourly, items=items, notes=notes, run_ceiling_usd=ceiling)


def build_plan(loaded: LoadedSpec) -> Plan:
    """Checks first (refusing a spec with errors), then resources and their requests, each checked offline."""
    from neurondeploy.infra.deployment import deployment_resources, plan_context

    findings = run_checks(loaded)
    if errors_of(findings):
        raise PlanRefused(errors_of(findings))
    resources = deployment_resources(loaded.spec, plan_context(loaded))
    planned = [
        PlannedResource(name=resource.name, type=resource.type, description=resource.description,
                        depends_on=list(resource.depends_on), taggable=resource.taggable, lookup=resource.is_lookup, hourly_usd=resource.hourly_usd,
                        requests=[_planned(r) for r in resource.create], delete_requests=[_planned(r) for r in resource.delete])
        for resource in resources
    ]
    requests = [r for resource in planned for r in resource.requests + resource.delete_requests]
    spec = loaded.spec
    return Plan(name=spec.name, kind=spec.kind, region=spec.region, spec_file=loaded.source.file, spec_sha256=loaded.digest,
                findings=[{"level": f.level, "field": f.field, "line": f.line, "text": f.one_line()} for f in findings],
                cost=plan_cost(loaded, resources), resources=planned, request_count=len(requests),
                validated_count=sum(r.validated for r in requests))


def build_plan_for_file(path: str | Path) -> Plan:
    return build_plan(load_spec(path))


def save_plan(plan: Plan, location: str | Path, transport=None) -> None:
    """To a file (atomically) or to ``s3://bucket/key`` (for a pipeline that plans in one job and applies in another)."""
    text = json.dumps(plan.model_dump(mode="json"), indent=2)
    if str(location).startswith("s3://"):
        from neurondeploy.infra.resources import split_s3

        bucket, key = split_s3(str(location))
        _plan_transport(transport, plan.region).call("s3", "PutObject", {
            "Bucket": bucket, "Key": key, "Body": text.encode(), "ContentType": "application/json",
            "ServerSideEncryption": "AES256"})
        return
    path = Path(location)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text)
    temporary.replace(path)  # atomic: a reader never sees half a plan


def _plan_transport(transport, region: str):
    if transport is not None:
        return transport
    from neurondeploy.infra.transport import AwsTransport

    return AwsTransport(region)


def _read_saved(location: str | Path, region: str, transport) -> str:
    missing = PlanError(f"{location}: no such plan", "make one with `neurondeploy plan SPEC --out FILE_OR_S3_URI`")
    if str(location).startswith("s3://"):
        from neurondeploy.infra.resources import split_s3
        from neurondeploy.infra.transport import AwsCallError

        bucket, key = split_s3(str(location))
        try:
            return _plan_transport(transport, region).call("s3", "GetObject", {"Bucket": bucket, "Key": key})["Body"].read().decode()
        except AwsCallError as exc:
            if exc.code in ("NoSuchKey", "404", "NoSuchBucket"):
                raise missing from None
            raise
    try:
        return Path(location).read_text()
    except FileNotFoundError:
        raise missing from None


def load_saved_plan(path: str | Path, loaded: LoadedSpec, transport=None) -> Plan:
    """Read a saved plan and refuse it when the spec changed since (or it belongs to another spec)."""
    text = _read_saved(path, loaded.spec.region, transport)
    try:
        plan = Plan.model_validate_json(text)
    except ValueError as exc:
        raise PlanError(f"{path}: not a neurondeploy plan ({str(exc).splitlines()[0]})", "make a new one with `neurondeploy plan SPEC --out FILE`") from None
    if plan.name != loaded.spec.name:
        raise PlanError(f"{path} is the plan of {plan.name!r}, not {loaded.spec.name!r}", "plan this spec first")
    if plan.spec_sha256 != loaded.digest:
        raise PlanError(f"{path} is stale: {loaded.source.file} changed since it was planned",
                        f"run `neurondeploy plan {loaded.source.file} --out {path}` again and review it")
    return plan


def check_saved_plan(path: str | Path, loaded: LoadedSpec, transport=None) -> Plan:
    """What ``apply --plan`` relies on: the reviewed plan is of this very spec (sha256) and still what this
    neurondeploy would send for it (same resources and requests: another version or catalogue could differ)."""
    saved = load_saved_plan(path, loaded, transport)
    now = build_plan(loaded)
    if [r.model_dump(mode="json") for r in saved.resources] != [r.model_dump(mode="json") for r in now.resources]:
        raise PlanError(f"{path} no longer matches what apply would send for {loaded.source.file} (another neurondeploy "
                        "version or catalogue made it)", f"run `neurondeploy plan {loaded.source.file} --out {path}` again and review it")
    return saved
