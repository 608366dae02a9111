"""Service Quotas pre-flight against a real moto server over HTTP: a quota below the plan's need refuses `apply`
and `train` before anything is created; enough quota lets them through; an unreadable quota only warns.

Emulator gap (moto 5.2.5), worked around here only: its Service Quotas backend knows the ``vpc`` service code
alone — GetServiceQuota answers NoSuchResourceException for ``ec2`` and ``sagemaker``, and
GetAWSDefaultServiceQuota and ListServiceQuotas are not implemented at all (500). :class:`ServiceQuotasSim`
patches moto's in-process classes (the ThreadedMotoServer runs in this process) so that GetServiceQuota,
GetAWSDefaultServiceQuota, ListServiceQuotas and ListAWSDefaultServiceQuotas answer, as AWS does, with the applied
and default quotas a test sets, per region, the lists paged by MaxResults/NextToken; and so that every read can
be refused with one error code (AccessDeniedException) like a principal without ``servicequotas:*``. Without the
sim, the emulator's own gaps are the "Service Quotas not answering" case.
"""

from __future__ import annotations

import json

import pytest
from support.ec2_deployment import AMI_PARAMETER, NAME, apply_once, tagged, transport
from support.sagemaker import MINILM, load
from support.sagemaker import apply as apply_endpoint

from neurondeploy.cli.main import main
from neurondeploy.engine.apply import apply_spec
from neurondeploy.engine.quotas import READ_ATTEMPTS, QuotaTooLow, check_quotas
from neurondeploy.engine.state import StateStore
from neurondeploy.specs import load_spec

from . import test_training_job
from .test_training_job import TEMPLATE as TRAINING_TEMPLATE
from .test_training_job import run as run_cli

# Fixtures shared with the apply, endpoint and training tests.
spec_file = test_training_job.spec_file

pytestmark = [
    pytest.mark.integration,
    pytest.mark.usefixtures("cpu_standin"),
]  # CPU artifacts stand in for NEFFs, on purpose
REGION = "us-east-1"
INF = ("ec2", "L-1945791B", "Running On-Demand Inf instances")
ENDPOINT_QUOTA = ("sagemaker", "L-0A1B2C3D", "ml.inf2.xlarge for endpoint usage")  # a made-up code: found by name
SPOT_TRAINING_QUOTA = ("sagemaker", "L-4E5F6A7B", "ml.trn1.32xlarge for spot training job usage")


def quota(service: str, code: str, name: str, value: float, region: str = REGION) -> dict:
    """A ServiceQuota as Service Quotas returns it."""
    return {
        "ServiceCode": service,
        "ServiceName": {"ec2": "Amazon Elastic Compute Cloud (Amazon EC2)", "sagemaker": "Amazon SageMaker"}[service],
        "QuotaArn": f"arn:aws:servicequotas:{region}:123456789012:{service}/{code}",
        "QuotaCode": code,
        "QuotaName": name,
        "Value": float(value),
        "Unit": "None",
        "Adjustable": True,
        "GlobalQuota": False,
    }


class ServiceQuotasSim:
    """Applied and AWS-default quotas, set per test, in moto's in-process Service Quotas (see the module doc)."""

    def __init__(self, monkeypatch) -> None:
        from moto.core.exceptions import JsonRESTError
        from moto.servicequotas.exceptions import NoSuchResource
        from moto.servicequotas.models import ServiceQuotasBackend
        from moto.servicequotas.responses import ServiceQuotasResponse

        self.applied: dict[tuple[str, str], list[dict]] = {}  # (region, service) -> quotas, in listing order
        self.defaults: dict[tuple[str, str], list[dict]] = {}
        self.refuse_with: str | None = None  # an error code every read answers
        self.pages: list[str] = []  # the list operations served, one entry per page
        sim = self
        original_get = ServiceQuotasBackend.get_service_quota
        original_defaults = ServiceQuotasResponse.list_aws_default_service_quotas

        def gate() -> None:
            if sim.refuse_with:
                raise JsonRESTError(sim.refuse_with, "You don't have access to the Service Quotas API (test)")

        def find(table: dict, region: str, service: str, code: str) -> dict:
            for item in table.get((region, service), []):
                if item["QuotaCode"] == code:
                    return item
            raise NoSuchResource

        def page(response, quotas: list[dict], operation: str) -> str:
            params = json.loads(response.body)
            start, size = int(params.get("NextToken") or 0), int(params.get("MaxResults") or 100)
            sim.pages.append(operation)
            body: dict = {"Quotas": quotas[start : start + size]}
            if start + size < len(quotas):
                body["NextToken"] = str(start + size)
            return json.dumps(body)

        def get_service_quota(backend, service_code: str, quota_code: str) -> dict:
            gate()
            if service_code == "vpc":
                return original_get(backend, service_code, quota_code)
            return find(sim.applied, backend.region_name, service_code, quota_code)

        def get_aws_default_service_quota(response) -> str:
            gate()
            params = json.loads(response.body)
            return json.dumps(
                {"Quota": find(sim.defaults, response.region, params["ServiceCode"], params["QuotaCode"])}
            )

        def list_service_quotas(response) -> str:
            gate()
            service = json.loads(response.body)["ServiceCode"]
            if (response.region, service) not in sim.applied:
                raise NoSuchResource
            return page(response, sim.applied[(response.region, service)], "ListServiceQuotas")

        def list_aws_default_service_quotas(response) -> str:
            gate()
            service = json.loads(response.body)["ServiceCode"]
            if service == "vpc":
                return original_defaults(response)
            if (response.region, service) not in sim.defaults:
                raise NoSuchResource
            return page(response, sim.defaults[(response.region, service)], "ListAWSDefaultServiceQuotas")

        monkeypatch.setattr(ServiceQuotasBackend, "get_service_quota", get_service_quota)
        monkeypatch.setattr(
            ServiceQuotasResponse, "get_aws_default_service_quota", get_aws_default_service_quota, raising=False
        )
        monkeypatch.setattr(ServiceQuotasResponse, "list_service_quotas", list_service_quotas, raising=False)
        monkeypatch.setattr(ServiceQuotasResponse, "list_aws_default_service_quotas", list_aws_default_service_quotas)

    def apply(self, service: str, code: str, name: str, value: float, region: str = REGION) -> None:
        """The account's applied value (replacing an earlier one of that code)."""
        self._put(self.applied, quota(service, code, name, value, region), region)

    def default(self, service: str, code: str, name: str, value: float, region: str = REGION) -> None:
        self._put(self.defaults, quota(service, code, name, value, region), region)

    @staticmethod
    def _put(table: dict, item: dict, region: str) -> None:
        items = table.setdefault((region, item["ServiceCode"]), [])
        items[:] = [q for q in items if q["QuotaCode"] != item["QuotaCode"]] + [item]

    def fill(self, service: str, count: int, region: str = REGION) -> None:
        """Other quotas of the service listed before the ones a test sets: the lookup by name has to page."""
        for index in range(count):
            name = f"ml.m5.{index}xlarge for processing job usage"
            self.apply(service, f"L-F{index:07X}", name, 4, region)


@pytest.fixture
def quotas(aws, monkeypatch) -> ServiceQuotasSim:
    return ServiceQuotasSim(monkeypatch)


def quota_reads(t) -> list[str]:
    return [call.operation for call in t.calls if call.service == "service-quotas"]


def nothing_created(aws, t, zone: str | None = None) -> None:
    assert t.mutating_calls() == []
    assert aws.client("s3").list_buckets()["Buckets"] == []
    if zone is not None:
        assert tagged(transport(), zone) == []
    sagemaker = aws.client("sagemaker")
    assert sagemaker.list_models()["Models"] == [] and sagemaker.list_endpoints()["Endpoints"] == []
    assert sagemaker.list_training_jobs()["TrainingJobSummaries"] == []


# --- EC2: the Inf vCPU quota ------------------------------------------------------------------------------------


def test_a_zero_inf_quota_refuses_an_ec2_apply_before_anything_is_created(world, artifact, tmp_path, aws, quotas):
    loaded, zone = world  # inf2.xlarge (4 vCPUs), Auto Scaling group of 2 to 6
    quotas.apply(*INF, 0)  # a new account's value
    state = StateStore(tmp_path / "state.db")
    t = transport()
    with pytest.raises(QuotaTooLow) as refused:
        apply_once(loaded, state, artifact, t)
    line = refused.value.one_line()
    assert '"Running On-Demand Inf instances" (ec2 L-1945791B) in us-east-1 is 0 vCPUs' in line
    assert "this plan needs 24 (6 × inf2.xlarge" in line
    assert "https://console.aws.amazon.com/servicequotas/home/services/ec2/quotas/L-1945791B" in line
    assert (
        "aws service-quotas request-service-quota-increase --service-code ec2 --quota-code L-1945791B "
        "--desired-value 24 --region us-east-1"
    ) in line
    assert quota_reads(t) == ["GetServiceQuota"]  # the applied value exists: no default asked for
    nothing_created(aws, t, zone)
    assert state.get(NAME) is None
    vpcs = aws.client("ec2").describe_vpcs(Filters=[{"Name": "tag:neurondeploy:deployment", "Values": [NAME]}])
    assert vpcs["Vpcs"] == []


def test_the_inf_quota_must_cover_the_groups_maximum_and_then_apply_goes_through(
    world, artifact, tmp_path, aws, quotas
):
    loaded, _ = world
    quotas.apply(*INF, 23)  # one vCPU short of 6 × 4
    with pytest.raises(QuotaTooLow, match="is 23 vCPUs; this plan needs 24"):
        check_quotas(transport(), loaded.spec)
    quotas.apply(*INF, 24)
    events: list[str] = []
    result, t = apply_once(loaded, StateStore(tmp_path / "state.db"), artifact, on_event=events.append)
    assert "asg" in result.created and quota_reads(t) == ["GetServiceQuota"]
    assert not any("Service Quotas" in event for event in events)  # checked and enough: nothing to say


def test_no_applied_value_falls_back_to_the_aws_default(world, quotas):
    loaded, _ = world
    quotas.default(*INF, 0)  # the account has no applied value: its default (0 for a new account) counts
    t = transport()
    with pytest.raises(QuotaTooLow, match=r"\(ec2 L-1945791B\) in us-east-1 is 0 vCPUs"):
        check_quotas(t, loaded.spec)
    assert quota_reads(t) == ["GetServiceQuota", "GetAWSDefaultServiceQuota"]
    quotas.default(*INF, 64)
    assert check_quotas(transport(), loaded.spec) == []


def test_cli_apply_refuses_in_one_line_with_the_fix_and_exit_code_3(world, artifact, tmp_path, aws, quotas, capsys):
    loaded, zone = world
    quotas.apply(*INF, 0)
    state = tmp_path / "state.db"
    code = main(
        [
            "apply",
            str(loaded.path),
            "--artifact",
            str(artifact),
            "--ami-ssm-parameter",
            AMI_PARAMETER,
            "--state",
            str(state),
            "--wait-delay-s",
            "1",
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code == 3
    assert err.startswith("error: Service Quotas") and "\n" not in err
    assert "--quota-code L-1945791B --desired-value 24 --region us-east-1" in err
    assert aws.client("s3").list_buckets()["Buckets"] == [] and tagged(transport(), zone) == []
    assert StateStore(state).names() == []


# --- SageMaker: quotas per ml. type, found by name --------------------------------------------------------------


def test_sagemaker_endpoint_quota_is_found_by_name_across_pages_and_refuses_below_the_autoscaling_max(
    sagemaker_world, artifact, tmp_path, quotas
):
    loaded = load(tmp_path, MINILM)  # ml.inf2.xlarge, autoscaling 1 to 4
    quotas.fill("sagemaker", 130)  # the endpoint quota is on the second page of 100
    quotas.apply(*ENDPOINT_QUOTA, 1)
    t = transport()
    with pytest.raises(QuotaTooLow) as refused:
        apply_endpoint(loaded, StateStore(tmp_path / "state.db"), artifact, t)
    line = refused.value.one_line()
    assert '"ml.inf2.xlarge for endpoint usage" (sagemaker L-0A1B2C3D) in us-east-1 is 1 instances' in line
    assert "needs 4 (4 × ml.inf2.xlarge, the autoscaling maximum)" in line
    assert "/servicequotas/home/services/sagemaker/quotas/L-0A1B2C3D" in line  # the code the listing gave
    assert "--service-code sagemaker --quota-code L-0A1B2C3D --desired-value 4 --region us-east-1" in line
    assert quota_reads(t) == ["ListServiceQuotas", "ListServiceQuotas"]  # two pages, then found
    nothing_created(sagemaker_world, t)

    quotas.apply(*ENDPOINT_QUOTA, 4)
    result, _ = apply_endpoint(loaded, StateStore(tmp_path / "state.db"), artifact)
    assert "endpoint" in result.created


def test_a_sagemaker_quota_with_no_applied_value_is_read_from_the_defaults(sagemaker_world, tmp_path, quotas):
    loaded = load(tmp_path, MINILM)
    quotas.fill("sagemaker", 3)  # applied values of other quotas only
    quotas.default(*ENDPOINT_QUOTA, 0)
    t = transport()
    with pytest.raises(QuotaTooLow, match="is 0 instances; this plan needs 4"):
        check_quotas(t, loaded.spec)
    assert quota_reads(t) == ["ListServiceQuotas", "ListAWSDefaultServiceQuotas"]
    quotas.default(*ENDPOINT_QUOTA, 10)
    assert check_quotas(transport(), loaded.spec) == []


def test_train_refuses_a_zero_spot_training_quota_before_uploading_and_runs_with_enough(
    spec_file, tmp_path, aws, quotas, capsys
):
    assert load_spec(TRAINING_TEMPLATE).spec.spot.enabled  # 2 × ml.trn1.32xlarge, managed spot
    quotas.apply(*SPOT_TRAINING_QUOTA, 0)
    state = tmp_path / "state.db"
    assert run_cli("train", str(spec_file), "--no-wait", "--yes", state=state) == 3
    err = capsys.readouterr().err.strip()
    assert err.startswith('error: Service Quotas "ml.trn1.32xlarge for spot training job usage"') and "\n" not in err
    assert "is 0 instances; this plan needs 2" in err and "--quota-code L-4E5F6A7B --desired-value 2" in err
    assert test_training_job.shared_buckets(aws) == []
    assert aws.client("sagemaker").list_training_jobs()["TrainingJobSummaries"] == []
    assert StateStore(state).names() == []

    quotas.apply(*SPOT_TRAINING_QUOTA, 2)
    assert run_cli("train", str(spec_file), "--no-wait", "--yes", state=state) == 0
    assert len(aws.client("sagemaker").list_training_jobs()["TrainingJobSummaries"]) == 1
    assert "Service Quotas" not in capsys.readouterr().err


# --- quotas that cannot be read never block ---------------------------------------------------------------------


def test_access_denied_warns_that_the_quota_was_not_checked_and_apply_goes_on(
    sagemaker_world, artifact, tmp_path, quotas
):
    loaded = load(tmp_path, MINILM)
    quotas.apply(*ENDPOINT_QUOTA, 0)  # would refuse, if it could be read
    quotas.refuse_with = "AccessDeniedException"
    events: list[str] = []
    t = transport()
    result = apply_spec(
        loaded, transport=t, state=StateStore(tmp_path / "state.db"), artifact_dir=artifact, on_event=events.append
    )
    assert "endpoint" in result.created
    (warning,) = [event for event in events if "Service Quotas" in event]
    assert warning.startswith('Service Quotas "ml.inf2.xlarge for endpoint usage" (sagemaker) in us-east-1 not checked')
    assert "AccessDeniedException" in warning and "make sure it allows 4 instances" in warning
    assert "\n" not in warning


def test_an_emulator_without_service_quotas_only_warns(world, aws, tmp_path):
    """No sim: moto answers NoSuchResourceException for ec2 and 500 for the default and the lists."""
    loaded, _ = world
    t = transport()
    (warning,) = check_quotas(t, loaded.spec)
    assert "(ec2 L-1945791B) in us-east-1 not checked: 500" in warning and len(warning) < 400
    assert "make sure it allows 24 vCPUs" in warning
    assert quota_reads(t) == ["GetServiceQuota", "GetAWSDefaultServiceQuota"]  # one log entry per call
    (warning,) = check_quotas(transport(), load(tmp_path, MINILM).spec)
    assert '"ml.inf2.xlarge for endpoint usage" (sagemaker) in us-east-1 not checked: 500' in warning
    assert READ_ATTEMPTS <= 2  # an advisory read does not sit through botocore's full backoff


def test_a_quota_without_a_value_warns(world, quotas):
    loaded, _ = world
    quotas.apply(*INF, 0)
    unreadable = quotas.applied[(REGION, "ec2")][0]
    del unreadable["Value"]
    unreadable["ErrorReason"] = {"ErrorCode": "DEPENDENCY_ACCESS_DENIED_ERROR", "ErrorMessage": "no access to EC2"}
    (warning,) = check_quotas(transport(), loaded.spec)
    assert "not checked: no value (DEPENDENCY_ACCESS_DENIED_ERROR: no access to EC2)" in warning
