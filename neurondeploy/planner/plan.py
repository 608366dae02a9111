"""The plan: checks, cost per hour, and every AWS request `apply` would send — pure data, built offline.

Every request is checked strictly against the botocore service model before it is shown; IDs that
only exist after apply are ``${resource.Attribute}`` placeholders. A saved plan carries the spec
file's sha256, so a plan made from an older spec is refused instead of applied.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from neurondeploy import catalog
from neurondeploy.errors import PlanError
from neurondeploy.planner.before_apply import Step, before_apply, note
from neurondeploy.planner.checks import Finding, refuse_errors
from neurondeploy.planner.context import plan_context
from neurondeploy.planner.cost import Cost, plan_cost
from neurondeploy.resources.compute import startup_grace_s
from neurondeploy.resources.deployment import deployment_resources
from neurondeploy.resources.model import Resource
from neurondeploy.resources.nxd_training_config import nxd_training_config
from neurondeploy.resources.release import DeploymentRelease, deployment_release
from neurondeploy.resources.s3 import claim_resource, shared_bucket_resource
from neurondeploy.resources.validation import validate_request
from neurondeploy.specs import LoadedSpec, load_spec
from neurondeploy.wheel import constraints_for, toolkit_identity

PLAN_FORMAT = 2  # 2: before_apply became steps with their commands


class PlannedRequest(BaseModel):
    service: str = Field(description="boto3 client name")
    operation: str = Field(description="botocore operation name")
    params: dict[str, Any] = Field(
        description="the request's parameters; ${resource.Attribute} stands for IDs known only at apply"
    )
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


class PlannedPiece(BaseModel):
    role: str = Field(description="serving image, training image, compile job image or instance DLAMI")
    name: str = Field(description="the image tag or the DLAMI's SSM parameter")
    sdk: str = Field(description="the Neuron SDK release it is built for")
    python: str = Field(description="the Python it runs: what is installed there is resolved for it")
    source: str = Field(description="where these facts come from")
    held: list[str] = Field(
        description="packages it has (an image's Dockerfile's pip installs, and torch): what we install leaves them"
    )


class PlannedRelease(BaseModel):
    neuron_sdk: str = Field(
        description="the one Neuron SDK release of the deployment: the artifact's and every piece's"
    )
    pinned: bool = Field(description="set by the spec's neuron_sdk_version (else the newest where every piece exists)")
    pieces: list[PlannedPiece] = Field(description="what runs the deployment, each built for neuron_sdk")
    notes: list[str] = Field(default_factory=list, description="what this release cannot do (compile --remote)")
    host: str | None = Field(
        default=None, description="the SageMaker host image under the serving image: its driver and the runtime's need"
    )


class Plan(BaseModel):
    format: int = PLAN_FORMAT
    name: str
    kind: str
    region: str
    spec_file: str
    spec_sha256: str
    findings: list[dict[str, Any]]
    cost: Cost
    release: PlannedRelease = Field(description="the Neuron SDK release every piece of the deployment comes from")
    resources: list[PlannedResource]
    # What the deployment uses but does not own (the account's shared bucket, and the deployment's claim on its name
    # there): made by apply when missing, not counted in request_count.
    shared: list[PlannedResource] = Field(default_factory=list)
    request_count: int
    validated_count: int
    before_apply: list[Step] = Field(
        default_factory=list,
        description="what must be true for apply to succeed, each with the commands that do it: where the Neuron "
        "artifact comes from and what making it costs, the image to push, secrets, a gated model's licence, training "
        "data, the Service Quotas the account needs, what apply uploads; with `plan --check`, each done or missing",
    )
    check_problems: list[str] | None = Field(
        default=None,
        description="with `plan --check`: what the preflight found missing that no step above names (one line each)",
    )
    after_apply: str | None = Field(
        default=None, description="what apply checks once the deployment is up (the smoke test), or why it cannot"
    )
    engine_config: dict[str, Any] | None = Field(
        default=None,
        description="engine nxd-training: NxD Training's YAML config rendered from the spec (resources.nxd_training_config)",
    )
    # Against a state that records the deployment (`plan` with --state): "<symbol> <name> (<type>): <action> (...)"
    # per resource that would change, the counts, and the $/hour of what state records (None: no state given).
    changes: list[str] | None = None
    changes_summary: str | None = None
    hourly_usd_before: float | None = None

    @property
    def all_validated(self) -> bool:
        return self.validated_count == self.request_count


def _planned(request, region: str) -> PlannedRequest:
    problems = validate_request(request.service, request.operation, request.params, region)
    return PlannedRequest(
        service=request.service,
        operation=request.operation,
        params=request.params,
        validated=not problems,
        problems=problems,
    )


def _planned_resource(resource: Resource, region: str) -> PlannedResource:
    return PlannedResource(
        name=resource.name,
        type=resource.type,
        description=resource.description,
        depends_on=list(resource.depends_on),
        taggable=resource.taggable,
        lookup=resource.is_lookup,
        hourly_usd=resource.hourly_usd,
        requests=[_planned(r, region) for r in resource.create],
        delete_requests=[_planned(r, region) for r in resource.delete],
    )


def shared_resources(spec, ctx, resources: list[Resource]) -> list[Resource]:
    """The shared bucket, when any request of the deployment names it (sources, artifacts, outputs) or apply claims
    the deployment's name there (every endpoint: neurondeploy.engine.claims), and that claim."""
    bucket = shared_bucket_resource(spec.region, ctx)
    if spec.kind == "inference":
        return [bucket, claim_resource(spec.region, ctx, spec.name)]
    name = bucket.create[0].params["Bucket"]
    named = json.dumps([[r.params for r in resource.create] for resource in resources], default=str)
    return [bucket] if name in named else []


def _planned_release(release: DeploymentRelease) -> PlannedRelease:
    notes = list(release.notes)
    serving = release.piece("serving image")
    if serving is not None and serving.name in {row.tag for row in catalog.dlc_releases()}:  # our wheel goes in
        target = constraints_for(toolkit_identity().constraints, serving.python, serving.held)
        if target.unfit:
            notes.append(
                f"the serving image's Python {serving.python} cannot install this machine's "
                f"{', '.join(target.unfit)}: its pip picks versions for it within neurondeploy's ranges"
            )
        if target.held:
            names = ", ".join(line.partition("==")[0] for line in target.held)
            notes.append(f"the serving image has {names}: installing neurondeploy leaves them as they are there")
    return PlannedRelease(
        neuron_sdk=release.sdk,
        pinned=release.pinned,
        pieces=[PlannedPiece(**dataclasses.asdict(piece)) for piece in release.pieces],
        notes=notes,
        host=release.host,
    )


def after_apply(spec) -> str | None:
    """The plan's line on the smoke test that ends apply (neurondeploy.ops.smoke runs it)."""
    if spec.kind != "inference":
        return None
    if spec.deployment.platform != "sagemaker":
        where = spec.dns_url or "the load balancer's DNS name"
        return (
            f"smoke test: apply waits up to {startup_grace_s(spec)} s (the instances' startup grace) for a healthy "
            f"target behind the load balancer, then sends one request through {where}; its answer must be the "
            "model's own, computed at compile time, to compile.numerical_tolerance (--smoke-url URL sends it "
            "elsewhere, such as an internal load balancer through a tunnel; --no-smoke skips it)"
        )
    if spec.container.llm:
        return f"smoke test: a short chat to sagemaker:{spec.name} must complete (apply --no-smoke skips it)"
    return (
        f"smoke test: one request to sagemaker:{spec.name} (InvokeEndpoint); its answer must be the model's own, "
        "computed at compile time, to compile.numerical_tolerance (apply --no-smoke skips it)"
    )


def build_plan(loaded: LoadedSpec, findings: list[Finding] | None = None) -> Plan:
    """Checks first (refusing a spec with errors), then resources and their requests, each checked offline.
    ``findings``: the checks' findings when the caller ran them already and they hold no error (validate)."""
    findings = refuse_errors(loaded) if findings is None else findings
    ctx = plan_context(loaded)
    resources = deployment_resources(loaded.spec, ctx)
    planned = [_planned_resource(resource, loaded.spec.region) for resource in resources]
    requests = [r for resource in planned for r in resource.requests + resource.delete_requests]
    spec = loaded.spec
    notes = before_apply(loaded, resources, ctx)
    engine_config = None
    if getattr(spec, "engine", None) == "nxd-training":
        try:
            engine_config = nxd_training_config(spec, catalog.get_instance(spec.instance_type).neuron_cores)
        except PlanError as exc:
            notes.append(note(f"NxD Training config not rendered: {exc.message} ({exc.hint})"))
    return Plan(
        name=spec.name,
        kind=spec.kind,
        region=spec.region,
        spec_file=loaded.source.file,
        spec_sha256=loaded.digest,
        findings=[{"level": f.level, "field": f.field, "line": f.line, "text": f.one_line()} for f in findings],
        cost=plan_cost(loaded, resources),
        release=_planned_release(deployment_release(spec, ctx.ami_ssm_parameter)),
        resources=planned,
        shared=[_planned_resource(resource, spec.region) for resource in shared_resources(spec, ctx, resources)],
        request_count=len(requests),
        validated_count=sum(r.validated for r in requests),
        before_apply=notes,
        after_apply=after_apply(spec),
        engine_config=engine_config,
    )


def build_plan_for_file(path: str | Path) -> Plan:
    return build_plan(load_spec(path))
