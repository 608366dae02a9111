"""What a plan needs from the account's Service Quotas, pure: which quota its instances count against, and how
much of it the plan uses at most. :mod:`neurondeploy.engine.quotas` reads the quotas and compares.

- EC2 (the Auto Scaling group): Inf and Trn instances count against one vCPU quota per family class, "Running
  On-Demand Inf instances" / "Running On-Demand Trn instances". The need is vCPUs per instance × the group's
  maximum size (instance_count without autoscaling).
- SageMaker: one quota per ``ml.`` instance type and use, counted in instances: "<type> for endpoint usage" (the
  autoscaling maximum, else instance_count), "<type> for training job usage", "<type> for spot training job usage"
  (instance_count). Their quota codes are not published per type, so they are found by name.

New accounts have 0 for all of these: without an increase nothing starts (EC2 fails the Auto Scaling group's
launches, SageMaker refuses CreateEndpoint / CreateTrainingJob with ResourceLimitExceeded).

Sources (no first-party table of these codes was at hand; several independent third-party ones agree):
- EC2 codes and names: fakecloud's Service Quotas catalogue (``L-1945791B`` "Running On-Demand Inf instances",
  default 0), aws-quota-checker's ``OnDemandInfInstanceCountCheck`` (``L-1945791B``), quota tables and
  ``get-service-quota`` scripts of several Trainium projects (``L-2C3B7624`` "Running On-Demand Trn instances",
  vCPUs, also for trn2). The unit (vCPUs) is that of every "Running On-Demand ... instances" quota since EC2's
  vCPU-based limits (AWS CLI docs: ``get-aws-default-service-quota --service-code ec2 --quota-code L-1216C47A``
  reports the "Class/Resource: vCPU" usage metric).
- SageMaker names: the ``<ml type> for endpoint usage`` / ``for training job usage`` / ``for spot training job
  usage`` pattern as ``aws service-quotas list-service-quotas --service-code sagemaker`` prints it in several
  public READMEs and exporters (e.g. ``ml.g5.xlarge for endpoint usage`` = ``L-1928E07B``); the inf2/trn1 names
  themselves are this pattern, not seen verbatim (unverified).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from neurondeploy import catalog
from neurondeploy.specs import InferenceSpec, Spec, TrainingSpec

EC2_SERVICE_CODE = "ec2"
SAGEMAKER_SERVICE_CODE = "sagemaker"
# Instance family class (the letters of the family: inf1, inf2 -> inf; trn1, trn1n, trn2 -> trn) -> quota.
EC2_ON_DEMAND_QUOTAS = {
    "inf": ("L-1945791B", "Running On-Demand Inf instances"),
    "trn": ("L-2C3B7624", "Running On-Demand Trn instances"),
}
SAGEMAKER_USES = {
    "endpoint": "for endpoint usage",
    "training": "for training job usage",
    "spot-training": "for spot training job usage",
}


@dataclass(frozen=True)
class QuotaNeed:
    service_code: str  # Service Quotas' service code: ec2 | sagemaker
    quota_name: str  # as Service Quotas names it (SageMaker quotas are matched by it)
    quota_code: str | None  # known for EC2; None: look it up by quota_name
    need: int  # the most this plan uses at once, in unit
    unit: str  # "vCPUs" | "instances"
    counted: str  # how need was counted, for the refusal message

    def describe(self, code: str | None = None) -> str:
        """``"<name>" (<service> <code>)``; ``code`` is the one Service Quotas gave when looked up by name."""
        code = code or self.quota_code
        return f'"{self.quota_name}" ({self.service_code}{f" {code}" if code else ""})'


CONSOLE_URL = "https://console.aws.amazon.com/servicequotas/home/services/{service}/quotas/{code}?region={region}"


def increase_url(service: str, code: str, region: str) -> str:
    return CONSOLE_URL.format(service=service, code=code, region=region)


def increase_command(service: str, code: str, desired: int, region: str) -> str:
    return (
        f"aws service-quotas request-service-quota-increase --service-code {service} --quota-code {code} "
        f"--desired-value {desired} --region {region}"
    )


def quota_command(need: QuotaNeed, region: str) -> str:
    """The request for ``need``; a quota known only by name (SageMaker's) has its code looked up in the same line
    (``list-aws-default-service-quotas`` lists every quota of the service, applied or not)."""
    if need.quota_code:
        return increase_command(need.service_code, need.quota_code, need.need, region)
    lookup = (
        f"$(aws service-quotas list-aws-default-service-quotas --service-code {need.service_code} --region {region} "
        f"--query \"Quotas[?QuotaName=='{need.quota_name}'].QuotaCode\" --output text)"
    )
    return increase_command(need.service_code, lookup, need.need, region)


def sagemaker_quota_name(instance: catalog.InstanceType, use: str) -> str:
    return f"{instance.sagemaker_name} {SAGEMAKER_USES[use]}"


def _ec2_need(spec: InferenceSpec, instance: catalog.InstanceType) -> QuotaNeed | None:
    family_class = re.match(r"[a-z]+", instance.family).group()
    if family_class not in EC2_ON_DEMAND_QUOTAS:
        return None
    code, name = EC2_ON_DEMAND_QUOTAS[family_class]
    most = spec.deployment.capacity[1]
    which = "the Auto Scaling group's maximum" if spec.deployment.autoscaling else "instance_count"
    return QuotaNeed(
        EC2_SERVICE_CODE,
        name,
        code,
        instance.vcpus * most,
        "vCPUs",
        f"{most} × {instance.name} at {instance.vcpus} vCPUs, {which}",
    )


def quota_needs(spec: Spec) -> list[QuotaNeed]:
    """The quotas ``spec``'s instances count against and how much of each it needs at most."""
    instance = catalog.get_instance(spec.instance_type)
    if isinstance(spec, TrainingSpec):
        use = "spot-training" if spec.spot.enabled else "training"
        count = spec.instance_count
        return [
            QuotaNeed(
                SAGEMAKER_SERVICE_CODE,
                sagemaker_quota_name(instance, use),
                None,
                count,
                "instances",
                f"instance_count {count}" + (" (managed spot)" if spec.spot.enabled else ""),
            )
        ]
    if spec.platform == "ec2":
        need = _ec2_need(spec, instance)
        return [need] if need else []
    most = spec.deployment.capacity[1]
    which = "the autoscaling maximum" if spec.deployment.autoscaling else "instance_count"
    return [
        QuotaNeed(
            SAGEMAKER_SERVICE_CODE,
            sagemaker_quota_name(instance, "endpoint"),
            None,
            most,
            "instances",
            f"{most} × {instance.sagemaker_name}, {which}",
        )
    ]
