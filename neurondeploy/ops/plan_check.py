"""`plan --check`: the offline plan, then read-only calls that mark each "before apply" step done, missing or not
checked, and name what else the preflight of `apply` / `train` / `compile --remote` would refuse.

The same reads as the preflight (engine/preflight.py: channels, roles, the permissions boundary, images, secrets,
parameters, zones), the quota reads of engine/quotas.py, and the compile cache's record of what `compile --remote`
built: nothing is created, and no secret's value is read. A step is "done" only when a read found its subject; a
step nothing here can read (a gated model's licence lives in the user's Hugging Face account) is "not checked".
"""

from __future__ import annotations

import dataclasses

from neurondeploy.aws.transport import AwsCallError, AwsTransport
from neurondeploy.compiler.cache import CompileCache
from neurondeploy.compiler.llm_export import find_precompiled
from neurondeploy.compiler.remote import remote_artifact_key
from neurondeploy.engine.preflight import Finding, findings, needs_of
from neurondeploy.engine.quotas import QuotaTooLow, check_quota, quota_reader
from neurondeploy.errors import NeurondeployError
from neurondeploy.ops.compile_remote import llm_export
from neurondeploy.planner.before_apply import Step
from neurondeploy.planner.context import plan_context
from neurondeploy.planner.image_push import ecr_image
from neurondeploy.planner.plan import Plan
from neurondeploy.planner.quotas import increase_command
from neurondeploy.resources.deployment import deployment_resources
from neurondeploy.resources.naming import bucket_name
from neurondeploy.resources.sagemaker_compile import compile_cache_uri
from neurondeploy.specs import LoadedSpec

# What each kind of step is read as: the preflight's findings carry the spec field they are about.
PREFLIGHT_CHECKS = ("image", "secret", "parameter", "channel", "role", "boundary")


def check_plan(loaded: LoadedSpec, plan: Plan, transport: AwsTransport) -> int:
    """Mark ``plan``'s steps from the account ``transport`` reaches; returns how many are missing (steps and the
    preflight's other problems)."""
    spec = loaded.spec
    account = transport.call("sts", "GetCallerIdentity", {})["Account"]
    ctx = plan_context(loaded, account_id=account)
    needs = needs_of(spec, deployment_resources(spec, ctx), account, shared_bucket=bucket_name(spec.region, ctx))
    images = [(s.field, s.subject) for s in plan.before_apply if s.check == "image" and s.field and s.subject]
    needs = dataclasses.replace(needs, images=tuple(dict.fromkeys(needs.images + tuple(images))))
    found = findings(transport, needs)
    read = {
        field
        for group in (needs.channels, needs.roles, needs.images, needs.secrets, needs.parameters)
        for field, *_ in group
    }
    if needs.makes_roles:
        read.add("iam")
    for step in plan.before_apply:
        if step.check in PREFLIGHT_CHECKS:
            _mark_from_preflight(step, found, read, account)
        elif step.check == "quota" and step.quota is not None:
            _mark_quota(step, transport, spec.region)
        elif step.check == "compiled":
            _mark_compiled(step, loaded, compile_cache_uri(spec.region, ctx))
        elif step.check == "licence":
            step.status = "not checked"
            step.detail = "neurondeploy cannot see your Hugging Face account; the container's download says"
    named = {step.field for step in plan.before_apply if step.check in PREFLIGHT_CHECKS}
    plan.check_problems = [f.error().one_line() for f in found if f.checked and f.field not in named]
    missing = sum(step.status == "missing" for step in plan.before_apply)
    return missing + len(plan.check_problems)


def _mark_from_preflight(step: Step, found: list[Finding], read: set[str], account: str) -> None:
    about = [finding for finding in found if finding.field == step.field]
    if any(finding.checked for finding in about):
        step.status = "missing"
        step.detail = "; ".join(finding.message for finding in about if finding.checked)
    elif about:
        step.status, step.detail = "not checked", about[0].message
    elif step.check == "image" and step.subject and getattr(ecr_image(step.subject), "account", None) != account:
        step.status, step.detail = "not checked", f"the image is in another account than this identity's ({account})"
    elif step.field in read:
        step.status = "done"
    else:
        step.status, step.detail = "not checked", "the plan's requests do not name it"


def _mark_quota(step: Step, transport: AwsTransport, region: str) -> None:
    reader = quota_reader(transport)
    try:
        warning = check_quota(reader, step.quota, region)
    except QuotaTooLow as exc:
        step.status, step.detail = "missing", exc.message
        if exc.code:  # the code Service Quotas gave: the request without a lookup
            step.commands = [increase_command(exc.need.service_code, exc.code, exc.need.need, region)]
        return
    finally:
        transport.calls.extend(reader.calls)
    step.status, step.detail = ("not checked", warning) if warning else ("done", None)


def _mark_compiled(step: Step, loaded: LoadedSpec, cache_uri: str) -> None:
    """Whether the S3 compile cache holds what `compile --remote` would build for this spec (its record only)."""
    try:
        if loaded.spec.container.llm:
            built = find_precompiled(cache_uri, llm_export(loaded, cache_uri).key) is not None
        else:
            cache = CompileCache(s3_uri=cache_uri)
            built = cache.s3_record(remote_artifact_key(loaded, cache.root)) is not None
    except (AwsCallError, NeurondeployError, OSError) as exc:
        step.status, step.detail = "not checked", f"the compile cache could not be read: {exc}"
        return
    step.status = "done" if built else "missing"
    step.detail = None if built else f"nothing built for this spec in {cache_uri}"
