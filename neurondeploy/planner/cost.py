"""TODO docstring."""

from __future__ import annotations

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
