"""SageMaker endpoints and training jobs as Resources, assembled from the builders in requests.py."""

from __future__ import annotations

from neurondeploy.infra.iam import (
    ecr_pull_statements, role_resource, s3_statements, sagemaker_log_statements, vpc_statements,
)
from neurondeploy.infra.refs import ref
from neurondeploy.infra.resources import (
    PlanContext, Request, Resource, Wait, artifact_uri, ec2_tags, parent_uri, resource, s3_prefix_arn, source_uri,
    with_lookups,
)
from neurondeploy.sagemaker import requests as rq

SAGEMAKER_PRINCIPAL = "sagemaker.amazonaws.com"
# StopTrainingJob on a finished job: "The request was rejected because the training job is in status Completed."
FINISHED_JOB_REFUSAL = "training job is in status"


def execution_role_resources(spec, statements: list[dict], what: str) -> list[Resource]:
    if spec.iam.role_arn:
        return []
    if rq.vpc_config(spec):
        statements = statements + vpc_statements()
    return [role_resource(spec, "execution-role", "sagemaker-role", SAGEMAKER_PRINCIPAL, statements,
                          f"SageMaker execution role for {what} {spec.name}: its S3 prefixes, image and logs only")]


def security_group_resources(spec, *, training: bool) -> list[Resource]:
    """A group for SageMaker's ENIs when it joins the VPC without given groups. No ingress for endpoints;
    training hosts talk to each other (torchrun, EFA), so the group admits all traffic from itself."""
    config = rq.vpc_config(spec)
    if not config or spec.network.security_group_ids:
        return []
    group = ref("sg-sagemaker", "GroupId")
    name = f"{spec.name}-sagemaker"
    create = [Request("ec2", "CreateSecurityGroup", {
        "GroupName": name, "VpcId": spec.network.vpc_id, "TagSpecifications": ec2_tags(spec, "security-group", name),
        "Description": "neurondeploy SageMaker " + ("training hosts: all traffic between them" if training else "endpoint: no ingress"),
    }, {"GroupId": "GroupId"})]
    if training:
        create.append(Request("ec2", "AuthorizeSecurityGroupIngress", {"GroupId": group, "IpPermissions": [
            {"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": group, "Description": "training hosts"}]}]}))
    return [resource("sg-sagemaker", "ec2:security-group", create,
                     [Request("ec2", "DeleteSecurityGroup", {"GroupId": group})],
                     description="Security group of SageMaker's network interfaces in the VPC")]


def endpoint_resources(spec, ctx: PlanContext) -> list[Resource]:
    """Execution role (unless given), model, endpoint config, endpoint, and autoscaling when asked."""
    image = rq.container_image(spec, ctx)
    statements = ecr_pull_statements(spec.region, [image]) + sagemaker_log_statements(spec.region, ctx, f"Endpoints/{spec.name}")
    if spec.deployment.container.kind == "neurondeploy":
        statements = s3_statements(spec.region, read=[parent_uri(artifact_uri(spec, ctx))]) + statements
    resources = execution_role_resources(spec, statements, "endpoint") + security_group_resources(spec, training=False)

    model = rq.create_model_request(spec, ctx)
    config = rq.create_endpoint_config_request(spec, ctx)
    endpoint = rq.create_endpoint_request(spec, ctx)
    variant = config["ProductionVariants"][0]
    resources += [
        # Models and configs are immutable and named by their content: a change makes new ones beside the old,
        # which go once the endpoint has moved (blue/green).
        resource("model", "sagemaker:model", [Request("sagemaker", "CreateModel", model, {"ModelArn": "ModelArn"})],
                 [Request("sagemaker", "DeleteModel", {"ModelName": model["ModelName"]})],
                 description=f"Model {model['ModelName']}: {model['PrimaryContainer']['Image']}",
                 identity=[model["ModelName"]], create_before_delete=True),
        resource("endpoint-config", "sagemaker:endpoint-config",
                 [Request("sagemaker", "CreateEndpointConfig", config, {"EndpointConfigArn": "EndpointConfigArn"})],
                 [Request("sagemaker", "DeleteEndpointConfig", {"EndpointConfigName": config["EndpointConfigName"]})],
                 after=["model"], description=f"{variant['InitialInstanceCount']} × {variant['InstanceType']}",
                 identity=[config["EndpointConfigName"]], create_before_delete=True),
        endpoint_resource(spec, ctx, endpoint),
    ]
    if spec.deployment.autoscaling:
        resources.append(endpoint_scaling_resource(spec, variant["InstanceType"]))
    return with_lookups(resources)


def endpoint_resource(spec, ctx: PlanContext, endpoint: dict) -> Resource:
    """The endpoint; a changed config is rolled out in place with UpdateEndpoint (same ARN, no downtime), checked
    afterwards: a failed update leaves SageMaker InService on the old config, which must then stay."""
    name = endpoint["EndpointName"]
    update = rq.update_endpoint_request(spec, ctx)
    in_service = Wait("EndpointInService", {"EndpointName": name})
    return resource("endpoint", "sagemaker:endpoint", [
        Request("sagemaker", "CreateEndpoint", endpoint, {"EndpointArn": "EndpointArn"}, in_service)],
        [Request("sagemaker", "DeleteEndpoint", {"EndpointName": name}, wait=Wait("EndpointDeleted", {"EndpointName": name}))],
        after=["endpoint-config"], description=f"Real-time endpoint {name}", identity=[name], update=[
            Request("sagemaker", "UpdateEndpoint", update, {"EndpointArn": "EndpointArn"}, in_service),
            Request("sagemaker", "DescribeEndpoint", {"EndpointName": name},
                    expect={"EndpointConfigName": update["EndpointConfigName"]})])


def endpoint_scaling_resource(spec, instance_type: str) -> Resource:
    """Scalable target + target-tracking policy. RegisterScalableTarget and PutScalingPolicy update what exists,
    so new capacities are sent in place. The variant's instance type is part of its identity: SageMaker refuses an
    UpdateEndpoint that changes the type of a registered variant, so such a change deregisters it first (the
    executor deletes replaced resources before updates) and registers it again after the endpoint moved."""
    target = rq.register_scalable_target_request(spec)
    policy = Request("application-autoscaling", "PutScalingPolicy", rq.put_scaling_policy_request(spec), {"PolicyARN": "PolicyARN"})
    key = {k: target[k] for k in ("ServiceNamespace", "ResourceId", "ScalableDimension")}
    return resource("endpoint-scaling", "application-autoscaling:scalable-target", [
        Request("application-autoscaling", "RegisterScalableTarget", target, {"ScalableTargetARN": "ScalableTargetARN"}), policy],
        # Deregistering removes the target's policies on AWS (not in moto 5.2.5); SageMaker's guide deletes them
        # first, so do both: an already missing policy counts as deleted.
        [Request("application-autoscaling", "DeleteScalingPolicy",
                 {k: policy.params[k] for k in ("PolicyName", "ServiceNamespace", "ResourceId", "ScalableDimension")}),
         Request("application-autoscaling", "DeregisterScalableTarget", key)],
        after=["endpoint"],  # the variant must exist (InService) to be registered
        description=f"{target['MinCapacity']}-{target['MaxCapacity']} instances, target tracking on "
                    "SageMakerVariantInvocationsPerInstance",
        identity=[target["ResourceId"], target["ScalableDimension"], instance_type],
        update=[Request("application-autoscaling", "RegisterScalableTarget",  # tags stay as created
                        {k: v for k, v in target.items() if k != "Tags"}), policy])


def training_job_resources(spec, ctx: PlanContext) -> list[Resource]:
    """Execution role (unless given) and the training job. A job cannot be deleted: destroy stops it."""
    job = rq.create_training_job_request(spec, ctx)
    read = [parent_uri(source_uri(spec, ctx))] + [c.s3_uri for c in spec.inputs.values() if c.s3_uri]
    write = [rq.output_uri(spec, ctx)] + [u for u in (spec.checkpoint.s3_uri, spec.compile_cache_uri) if u]
    statements = (s3_statements(spec.region, read=read, write=write)
                  + ecr_pull_statements(spec.region, [job["AlgorithmSpecification"]["TrainingImage"]])
                  + sagemaker_log_statements(spec.region, ctx, "TrainingJobs"))
    if spec.compile_cache_uri:  # the Neuron cache removes its *.lock files when a compile finishes
        statements.append({"Sid": "CompileCacheLocks", "Effect": "Allow", "Action": "s3:DeleteObject",
                           "Resource": s3_prefix_arn(spec.compile_cache_uri, spec.region)})
    resources = execution_role_resources(spec, statements, "training") + security_group_resources(spec, training=True)
    name = job["TrainingJobName"]
    resources.append(resource("training-job", "sagemaker:training-job", [
        Request("sagemaker", "CreateTrainingJob", job, {"TrainingJobArn": "TrainingJobArn"})],
        # Jobs cannot be deleted; stopping a finished one is refused, which destroy treats as done.
        [Request("sagemaker", "StopTrainingJob", {"TrainingJobName": name},
                 wait=Wait("TrainingJobCompletedOrStopped", {"TrainingJobName": name}),
                 done_if=(FINISHED_JOB_REFUSAL,))],
        description=f"Training job {name}: {spec.instance_count} × ml.{spec.instance_type}"
                    + (", managed spot" if spec.spot.enabled else "")
                    + "; destroy stops it (SageMaker keeps job records, they cannot be deleted)"))
    return with_lookups(resources)
