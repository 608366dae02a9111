"""Pre-flight, read-only: the account's Service Quotas against what the plan needs, before anything is created.

:func:`check_quotas` reads each quota :func:`neurondeploy.planner.quotas.quota_needs` names — EC2's by code
(GetServiceQuota, then GetAWSDefaultServiceQuota when the account has no applied value), SageMaker's by name
(ListServiceQuotas, then ListAWSDefaultServiceQuotas, page by page until found) — and refuses with
:class:`QuotaTooLow` when one is below the need: the quota, its value, the need, and how to raise it (console and
CLI). New accounts have 0 for Inf/Trn instances and for every ``ml.inf2`` / ``ml.trn1`` use.

What is compared: the quota with **this plan's own need** (all of its instances at their maximum), not with the
current usage. Other deployments' instances count against the same quotas, and a blue/green endpoint update runs
the old and the new fleet side by side for a while: a check that passes here can still meet ResourceLimitExceeded
(SageMaker) or failed launches (EC2 Auto Scaling) later. Usage would need a scan of every instance, endpoint and
job of the region (or CloudWatch's AWS/Usage metrics), which is not cheap; this check only catches the common
case, a quota that could never fit the plan (0 on a new account).

A quota that cannot be read (access denied, Service Quotas not answering, an emulator without it, a name that is
not listed) never blocks: the check returns a warning line per quota it could not check, for the caller to print.
The reads are advisory, so they are sent with one retry only (:data:`READ_ATTEMPTS`), on a transport of their own
whose calls are added to the caller's log.
"""

from __future__ import annotations

from neurondeploy.aws.errors import is_quota_missing
from neurondeploy.aws.paging import Paged
from neurondeploy.aws.transport import AwsCallError, AwsTransport
from neurondeploy.errors import PlanError
from neurondeploy.planner.quotas import QuotaNeed, increase_command, increase_url, quota_needs
from neurondeploy.specs import Spec

READ_ATTEMPTS = 2  # botocore attempts per read: a Service Quotas that does not answer must not hold up apply
REASON_CHARS = 160  # an error page in a warning is cut to this


class QuotaTooLow(PlanError):
    """A Service Quotas value below what the plan needs: nothing was created."""

    def __init__(self, need: QuotaNeed, value: float, code: str, region: str) -> None:
        self.need, self.value, self.code, self.region = need, value, code, region
        super().__init__(
            f"Service Quotas {need.describe(code)} in {region} is {_number(value)} {need.unit}; this plan needs "
            f"{need.need} ({need.counted}), so nothing was created",
            f"request {need.need} at {increase_url(need.service_code, code, region)} or run `"
            f"{increase_command(need.service_code, code, need.need, region)}` (new accounts have 0; an increase "
            "can take from minutes to days), then run this again",
        )


def _number(value: float) -> str:
    return f"{value:g}"


def _reason(exc: AwsCallError) -> str:
    detail = " ".join(str(exc.detail).split()) or "no answer"
    if "<html" in detail.lower():  # an error page from a proxy or an emulator, not an AWS error
        detail = "the service answered with an error page"
    text = f"{exc.code}: {detail}" if exc.code else detail
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 1] + "…"


def _by_code(reader: AwsTransport, need: QuotaNeed) -> dict | None:
    """The applied quota, else AWS's default for the account; None when Service Quotas knows neither."""
    params = {"ServiceCode": need.service_code, "QuotaCode": need.quota_code}
    try:
        return reader.call("service-quotas", "GetServiceQuota", params)["Quota"]
    except AwsCallError as exc:
        if not is_quota_missing(exc):
            raise
    try:
        return reader.call("service-quotas", "GetAWSDefaultServiceQuota", params)["Quota"]
    except AwsCallError as exc:
        if is_quota_missing(exc):
            return None
        raise


def _named(pages, name: str) -> dict | None:
    for page in pages:
        for quota in page.get("Quotas", []):
            if quota.get("QuotaName") == name:
                return quota
    return None


def _by_name(reader: AwsTransport, need: QuotaNeed) -> dict | None:
    """The quota named ``need.quota_name`` among the applied ones, else among AWS's defaults; None if unlisted."""
    params = {"ServiceCode": need.service_code, "MaxResults": 100}
    try:
        found = _named(Paged(reader).call("service-quotas", "ListServiceQuotas", params), need.quota_name)
    except AwsCallError as exc:
        if not is_quota_missing(exc):
            raise
        found = None
    if found is not None:
        return found
    try:
        return _named(Paged(reader).call("service-quotas", "ListAWSDefaultServiceQuotas", params), need.quota_name)
    except AwsCallError as exc:
        if is_quota_missing(exc):
            return None
        raise


def check_quota(reader: AwsTransport, need: QuotaNeed, region: str) -> str | None:
    """None when the quota allows the need; a warning line when it could not be checked; raises when too low."""
    not_checked = f"Service Quotas {need.describe()} in {region} not checked"
    make_sure = f"make sure it allows {need.need} {need.unit} ({need.counted})"
    try:
        quota = _by_code(reader, need) if need.quota_code else _by_name(reader, need)
    except AwsCallError as exc:
        return f"{not_checked}: {_reason(exc)}; {make_sure}"
    if quota is None:
        return f"{not_checked}: Service Quotas does not list it; {make_sure}"
    if quota.get("Value") is None:
        problem = quota.get("ErrorReason") or {}
        why = ": ".join(str(problem[key]) for key in ("ErrorCode", "ErrorMessage") if problem.get(key))
        return f"{not_checked}: no value ({why or 'none given'}); {make_sure}"
    if quota["Value"] < need.need:
        raise QuotaTooLow(need, float(quota["Value"]), quota.get("QuotaCode") or need.quota_code or "", region)
    return None


def quota_reader(transport: AwsTransport) -> AwsTransport:
    """The advisory reads' own transport (one retry); the caller adds its calls to its own log."""
    return AwsTransport(transport.region, max_attempts=READ_ATTEMPTS)


def check_quotas(transport: AwsTransport, spec: Spec) -> list[str]:
    """Refuse (:class:`QuotaTooLow`) a plan that a quota of the account cannot run; read-only. Returns a warning
    line for each quota that could not be read (apply goes on)."""
    needs = quota_needs(spec)
    if not needs:
        return []
    reader = quota_reader(transport)
    try:
        return [line for need in needs if (line := check_quota(reader, need, transport.region))]
    finally:
        transport.calls.extend(reader.calls)  # the caller's log counts every call sent for it
