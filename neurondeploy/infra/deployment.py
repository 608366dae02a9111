"""Every resource a deployment needs, by kind and platform; and the plan context made from a loaded spec."""

from __future__ import annotations

import dataclasses

from neurondeploy.infra.archive import artifact_digest
from neurondeploy.infra.certificate import certificate_arn, certificate_resource
from neurondeploy.infra.compute import ami_resource, autoscaling_group_resource, launch_template_resource
from neurondeploy.infra.dns import alias_record_resource, owner_record_resource, validation_record_resource
from neurondeploy.infra.iam import instance_role_resources
from neurondeploy.infra.loadbalancer import alb_resource, listener_resources, target_group_resource
from neurondeploy.infra.network import network_resources, security_group_resources
from neurondeploy.infra.resources import (
    MANAGED_BY, MANAGED_BY_TAG, PlanContext, Request, Resource, artifact_uri, bucket_name, resource, with_lookups,
)

_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "fp8": 1}


def deployment_resources(loaded_or_spec, ctx: PlanContext) -> list[Resource]:
    """The resources for a spec (or LoadedSpec), dependencies before dependents."""
    spec = getattr(loaded_or_spec, "spec", loaded_or_spec)
    if spec.kind == "training":
        from neurondeploy.sagemaker.resources import training_job_resources

        return training_job_resources(spec, ctx)
    if spec.deployment.platform == "ec2":
        return ec2_inference_resources(spec, ctx)
    from neurondeploy.sagemaker.resources import endpoint_resources

    return endpoint_resources(spec, ctx)


def ec2_inference_resources(spec, ctx: PlanContext) -> list[Resource]:
    """VPC (unless given), ALB + target group + listeners, optional certificate and DNS, instance role,
    launch template and Auto Scaling group running ``neurondeploy serve``."""
    deployment = spec.deployment  # the spec refuses the HF LLM containers on ec2
    network = network_resources(spec, ctx, deployment.instance_type)
    certificate = certificate_arn(spec)
    resources = [*network.resources, *security_group_resources(
        spec, network.vpc_id, port=spec.serving.port, listener_ports=[80, 443] if certificate else [80])]
    resources += [alb_resource(spec, list(network.public_subnet_ids), after=list(network.public_ready)),
                  target_group_resource(spec, network.vpc_id)]
    if certificate and not spec.tls.certificate_arn:
        resources += [certificate_resource(spec), validation_record_resource(spec)]
    listeners = listener_resources(spec, certificate)
    resources += listeners
    if spec.dns:
        resources += [owner_record_resource(spec), alias_record_resource(spec)]
    artifact = artifact_uri(spec, ctx)
    resources += instance_role_resources(spec, ctx, artifact)
    resources += [ami_resource(ctx, deployment.volume_gib), launch_template_resource(spec, ctx, artifact)]
    # Instances boot only once their subnets route to the internet (pip, S3) and the ALB listens
    # (the request-count scaling policy needs the target group attached to the ALB).
    resources.append(autoscaling_group_resource(spec, list(network.instance_subnet_ids),
                                                 after=[*network.ready, *(l.name for l in listeners)]))
    return with_lookups(resources)


def plan_context(loaded, **overrides) -> PlanContext:
    """The offline context for ``loaded``: run id from the spec's digest (an unchanged spec re-planned gets the
    same job name; pass ``run_id`` for a new run), model size from its architecture when known."""
    values = {"run_id": loaded.digest[:8], "model_size_gib": _model_size_gib(loaded)}
    if "source_digest" not in overrides:  # hashing a source tree is not free: a caller that has it passes it
        values["source_digest"] = _source_digest(loaded)
    values.update(overrides)
    return dataclasses.replace(PlanContext(), **values)


def _source_digest(loaded) -> str | None:
    """Training source is uploaded content-addressed, so plan shows the object train will send."""
    if loaded.spec.kind != "training":
        return None
    directory = loaded.base_dir / loaded.spec.source_dir
    return artifact_digest(directory)[:16] if directory.is_dir() else None


def _model_size_gib(loaded) -> float | None:
    spec = loaded.spec
    if spec.kind != "inference":
        return None
    try:
        from neurondeploy.planner.checks import model_architecture
        from neurondeploy.planner.sizing import parameter_count

        arch = model_architecture(loaded)
    except Exception:  # an unreadable model directory is reported by the checks, not here
        return None
    return None if arch is None else parameter_count(arch) * _DTYPE_BYTES[spec.model.dtype] / 2**30


def shared_bucket_resource(region: str, ctx: PlanContext) -> Resource:
    """The account's neurondeploy bucket (artifacts, sources, training outputs). Shared by deployments, so it
    is not in any deployment's resources and has no delete: the executor creates it when missing."""
    name = bucket_name(region, ctx)
    create = {"Bucket": name}
    if region != "us-east-1":  # us-east-1 refuses an explicit LocationConstraint
        create["CreateBucketConfiguration"] = {"LocationConstraint": region}
    return resource("artifact-bucket", "s3:bucket", [
        Request("s3", "CreateBucket", create),
        Request("s3", "PutPublicAccessBlock", {"Bucket": name, "PublicAccessBlockConfiguration": {
            "BlockPublicAcls": True, "IgnorePublicAcls": True, "BlockPublicPolicy": True, "RestrictPublicBuckets": True}}),
        Request("s3", "PutBucketTagging", {"Bucket": name, "Tagging": {"TagSet": [
            {"Key": MANAGED_BY_TAG, "Value": MANAGED_BY}, {"Key": "neurondeploy:scope", "Value": "shared"}]}}),
    ], (), description="Shared bucket for artifacts, sources and outputs of every deployment; never destroyed")
