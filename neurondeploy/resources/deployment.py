"""Every resource a deployment needs, chosen by the spec's kind and platform."""

from __future__ import annotations

from collections.abc import Callable

from neurondeploy.resources.acm import certificate_arn, certificate_resource
from neurondeploy.resources.compute import (
    ami_resource,
    autoscaling_group_resource,
    boot_digest,
    launch_template_resource,
)
from neurondeploy.resources.elb import alb_resource, listener_resources, target_group_resource
from neurondeploy.resources.iam import instance_role_resources
from neurondeploy.resources.model import PlanContext, Resource, with_lookups
from neurondeploy.resources.naming import artifact_uri
from neurondeploy.resources.network import network_resources, security_group_resources
from neurondeploy.resources.route53 import alias_record_resource, owner_record_resource, validation_record_resource
from neurondeploy.resources.sagemaker_endpoint import endpoint_resources
from neurondeploy.resources.sagemaker_training import training_job_resources
from neurondeploy.specs import InferenceSpec, LoadedSpec, Spec


def ec2_inference_resources(spec: InferenceSpec, ctx: PlanContext) -> list[Resource]:
    """VPC (unless given), ALB + target group + listeners, optional certificate and DNS, instance role,
    launch template and Auto Scaling group running ``neurondeploy serve`` or an LLM container kind's server."""
    deployment = spec.deployment  # the spec refuses the kinds whose platforms lack ec2
    network = network_resources(spec, ctx, deployment.instance_type)
    certificate = certificate_arn(spec)
    resources = [
        *network.resources,
        *security_group_resources(
            spec, network.vpc_id, port=spec.serving.port, listener_ports=[80, 443] if certificate else [80]
        ),
    ]
    resources += [
        alb_resource(spec, list(network.public_subnet_ids), after=list(network.public_ready)),
        target_group_resource(spec, network.vpc_id),
    ]
    if certificate and not spec.tls.certificate_arn:
        resources += [certificate_resource(spec), validation_record_resource(spec)]
    listeners = listener_resources(spec, certificate)
    resources += listeners
    if spec.dns:
        resources += [owner_record_resource(spec), alias_record_resource(spec)]
    artifact = artifact_uri(spec, ctx)
    resources += instance_role_resources(spec, ctx, artifact)
    template = launch_template_resource(spec, ctx, artifact)
    resources += [ami_resource(ctx, deployment.volume_gib), template]
    # Instances boot only once their subnets route to the internet (pip, S3) and the ALB listens
    # (the request-count scaling policy needs the target group attached to the ALB).
    resources.append(
        autoscaling_group_resource(
            spec,
            list(network.instance_subnet_ids),
            after=[*network.ready, *(item.name for item in listeners)],
            boot=boot_digest(template),
        )
    )
    return with_lookups(resources)


# (kind, platform) -> the builder of that deployment's resources.
BUILDERS: dict[tuple[str, str], Callable[..., list[Resource]]] = {
    ("inference", "sagemaker"): endpoint_resources,
    ("inference", "ec2"): ec2_inference_resources,
    ("training", "sagemaker"): training_job_resources,
}


def deployment_resources(spec: Spec | LoadedSpec, ctx: PlanContext) -> list[Resource]:
    """The resources for a spec (or a loaded spec file), dependencies before dependents."""
    if isinstance(spec, LoadedSpec):
        spec = spec.spec
    return BUILDERS[spec.kind, spec.platform](spec, ctx)
