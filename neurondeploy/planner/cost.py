"""What a plan costs per hour (and a training run at most), from the catalogue's prices."""

from __future__ import annotations

from pydantic import BaseModel

from neurondeploy import catalog
from neurondeploy.planner.checks import instance_of
from neurondeploy.specs import InferenceSpec, LoadedSpec, TrainingSpec


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


def plan_cost(loaded: LoadedSpec, resources) -> Cost:
    spec = loaded.spec
    instance = instance_of(spec)
    items = [_instance_item(spec, instance)]
    notes = []
    if spec.platform == "sagemaker" and instance.sagemaker_price_usd_per_hour is None:
        notes.append(
            f"no ml.{instance.name} price is catalogued (none published that we found): the EC2 price is shown and "
            "the total is a lower bound (query the AWS Pricing API for the exact figure)"
        )
    elif spec.platform == "sagemaker" and instance.sagemaker_price_derived:
        notes.append(
            f"the ml.{instance.name} price is derived from its EC2 price, not published: {instance.sagemaker_price_source}"
        )
    if spec.region != catalog.PRICE_REGION:
        notes.append(f"prices are {catalog.PRICE_REGION} figures; {spec.region} may differ")
    notes += _KIND_NOTES[spec.kind](spec, instance)
    for resource in resources:
        if resource.hourly_usd:
            items.append(
                CostItem(
                    what=f"{resource.type} {resource.name}",
                    hourly_usd=resource.hourly_usd,
                    source=resource.description or "list price, us-east-1",
                    confirmed=False,
                )
            )
    known = [item.hourly_usd for item in items if item.hourly_usd is not None]
    hourly = round(sum(known), 4) if known else None
    ceiling = None
    if spec.kind == "training" and hourly is not None:  # SageMaker stops a job at max_runtime_s
        ceiling = round(hourly * spec.max_runtime_s / 3600, 2)
    return Cost(hourly_usd=hourly, items=items, notes=notes, run_ceiling_usd=ceiling)


def instance_hourly_usd(spec, instance: catalog.InstanceType, count: int) -> float | None:
    """What ``count`` instances of the spec's platform cost per hour: the ml.* price on SageMaker when catalogued."""
    if spec.platform == "sagemaker" and instance.sagemaker_price_usd_per_hour is not None:
        return catalog.price_per_hour(instance, count, platform="sagemaker")
    return catalog.price_per_hour(instance, count)


def _instance_item(spec, instance: catalog.InstanceType) -> CostItem:
    if spec.platform == "sagemaker" and instance.sagemaker_price_usd_per_hour is not None:
        return CostItem(
            what=f"{spec.instance_count} × ml.{instance.name} on-demand (SageMaker, {catalog.PRICE_REGION})",
            hourly_usd=instance_hourly_usd(spec, instance, spec.instance_count),
            source=instance.sagemaker_price_source,
            confirmed=instance.sagemaker_price_confirmed,
        )
    return CostItem(
        what=f"{spec.instance_count} × {instance.name} on-demand (EC2, {instance.price_region})",
        hourly_usd=catalog.price_per_hour(instance, spec.instance_count),
        source=instance.price_source,
        confirmed=instance.price_confirmed,
    )


def _training_notes(spec: TrainingSpec, instance: catalog.InstanceType) -> list[str]:
    if spec.spot.enabled:
        return ["managed spot usually costs well below on-demand; the on-demand figure is the ceiling"]
    return []


def _inference_notes(spec: InferenceSpec, instance: catalog.InstanceType) -> list[str]:
    scaling = spec.deployment.autoscaling
    if not scaling:
        return []
    return [
        f"autoscaling between {scaling.min_instances} and {scaling.max_instances} instances: "
        f"up to ${(instance_hourly_usd(spec, instance, scaling.max_instances) or 0):,.2f}/h at max"
    ]


_KIND_NOTES = {"training": _training_notes, "inference": _inference_notes}
