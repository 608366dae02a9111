"""Saved plans (`plan --out`, `apply --plan`): to and from a file or S3, refused once stale."""

from __future__ import annotations

import json
from pathlib import Path

from neurondeploy.aws.errors import is_s3_missing
from neurondeploy.aws.transport import AwsCallError, AwsTransport
from neurondeploy.errors import PlanError
from neurondeploy.planner.plan import Plan, build_plan
from neurondeploy.resources.naming import split_s3
from neurondeploy.specs import LoadedSpec


def save_plan(plan: Plan, location: str | Path, transport=None) -> None:
    """To a file (atomically) or to ``s3://bucket/key`` (for a pipeline that plans in one job and applies in another)."""
    text = json.dumps(plan.model_dump(mode="json"), indent=2)
    if str(location).startswith("s3://"):
        bucket, key = split_s3(str(location))
        _plan_transport(transport, plan.region).call(
            "s3",
            "PutObject",
            {
                "Bucket": bucket,
                "Key": key,
                "Body": text.encode(),
                "ContentType": "application/json",
                "ServerSideEncryption": "AES256",
            },
        )
        return
    path = Path(location)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text)
    temporary.replace(path)  # atomic: a reader never sees half a plan


def _plan_transport(transport, region: str):
    if transport is not None:
        return transport
    return AwsTransport(region)


def _read_saved(location: str | Path, region: str, transport) -> str:
    missing = PlanError(f"{location}: no such plan", "make one with `neurondeploy plan SPEC --out FILE_OR_S3_URI`")
    if str(location).startswith("s3://"):
        bucket, key = split_s3(str(location))
        try:
            return (
                _plan_transport(transport, region)
                .call("s3", "GetObject", {"Bucket": bucket, "Key": key})["Body"]
                .read()
                .decode()
            )
        except AwsCallError as exc:
            if is_s3_missing(exc):
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
        raise PlanError(
            f"{path}: not a neurondeploy plan ({str(exc).splitlines()[0]})",
            "make a new one with `neurondeploy plan SPEC --out FILE`",
        ) from None
    if plan.name != loaded.spec.name:
        raise PlanError(f"{path} is the plan of {plan.name!r}, not {loaded.spec.name!r}", "plan this spec first")
    if plan.spec_sha256 != loaded.digest:
        raise PlanError(
            f"{path} is stale: {loaded.source.file} changed since it was planned",
            f"run `neurondeploy plan {loaded.source.file} --out {path}` again and review it",
        )
    return plan


def check_saved_plan(path: str | Path, loaded: LoadedSpec, transport=None) -> Plan:
    """What ``apply --plan`` relies on: the reviewed plan is of this very spec (sha256) and still what this
    neurondeploy would send for it (same resources and requests: another version or catalogue could differ)."""
    saved = load_saved_plan(path, loaded, transport)
    now = build_plan(loaded)
    if [r.model_dump(mode="json") for r in saved.resources] != [r.model_dump(mode="json") for r in now.resources]:
        raise PlanError(
            f"{path} no longer matches what apply would send for {loaded.source.file} (another neurondeploy "
            "version or catalogue made it)",
            f"run `neurondeploy plan {loaded.source.file} --out {path}` again and review it",
        )
    return saved
