"""SageMaker real-time endpoints on ml.inf2: one pure function per API call (``<operation>_request(spec, ctx)``), and
the model, endpoint config, endpoint and autoscaling as Resources.

Model and endpoint-config names end in a hash of their content: both are immutable, so a changed spec gets
new ones and the endpoint is updated to them, while an unchanged spec re-plans to the same names.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from neurondeploy import catalog
from neurondeploy.errors import NeurondeployError, PlanError
from neurondeploy.resources.iam import (
    ecr_pull_statements,
    s3_statements,
    sagemaker_log_statements,
    secret_read_statements,
)
from neurondeploy.resources.kinds import Attr, Caller, Describe, Expected, Kind, Sends, done, it
from neurondeploy.resources.model import PlanContext, Request, Resource, Wait, resource, with_lookups
from neurondeploy.resources.naming import (
    artifact_uri,
    aws_name,
    content_suffix,
    ownership_tags,
    parent_uri,
)
from neurondeploy.resources.precompiled import (
    load_budget,
    model_data_source,
    precompiled_env,
    uses_precompiled,
    without_hub_token,
)
from neurondeploy.resources.release import deployment_release
from neurondeploy.resources.retag import sagemaker_retag
from neurondeploy.resources.sagemaker import (
    FIND_SAGEMAKER,
    NAME_MAX,
    execution_role_arn,
    execution_role_resources,
    sagemaker_tags,
    security_group_resources,
    tags_by_arn,
    vpc_config,
)
from neurondeploy.specs import InferenceSpec
from neurondeploy.specs.inference import serving_env_value

SERVING_REPOSITORY = "neurondeploy-serving"
VARIANT = "AllTraffic"
SAGEMAKER_PORT = 8080
MODEL_DATA_DIR = "/opt/ml/model"  # where SageMaker unpacks ModelDataUrl in the container
VOLUME_MIN_GIB, VOLUME_MAX_GIB = 30, 512  # ProductionVariantVolumeSizeInGB allows 1-512
VOLUME_PER_MODEL_GIB = 3  # archive + unpacked model + compiled artifacts / container cache
# model.dtype as the LLM containers' weights cast (text-generation-inference backends/neuron/.../tgi_env.py:
# HF_AUTO_CAST_TYPE is fp16, bf16 or fp32).
_WEIGHTS_CAST = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


# --- endpoint --------------------------------------------------------------------------------------------


DLC_PROGRAM = "inference.py"  # code/inference.py in model.tar.gz: the DLC's SAGEMAKER_PROGRAM
DLC_CODE_DIR = "/opt/ml/model/code"


def container_image(spec: InferenceSpec, ctx: PlanContext) -> str:
    """Our encoders run by default on AWS's Neuron inference DLC for the spec's SDK, our server shipped in
    model.tar.gz (no image to build or push); our own serving image (infra/serving/) when its URI is given.
    Another container kind runs its catalogue image (data/containers.yaml, images.yaml)."""
    container, kind = spec.deployment.container, spec.container
    if container.image_uri:
        return container.image_uri
    if kind.ours and ctx.serving_image_uri:
        return ctx.serving_image_uri
    if kind.ours:  # the DLC of the deployment's one release, the artifact's
        return catalog.neuron_image(kind.image_purpose, spec.region, deployment_release(spec).sdk)
    return catalog.neuron_image(kind.image_purpose, spec.region, spec.neuron_sdk_version)


def image_repository(image: str) -> str:
    return image.rsplit("/", 1)[-1].split(":", 1)[0]


def runs_on_dlc(spec: InferenceSpec, ctx: PlanContext) -> bool:
    """Whether our server reaches the container inside model.tar.gz (code/) rather than in the image."""
    return spec.container.ours and image_repository(container_image(spec, ctx)) != SERVING_REPOSITORY


def model_environment(spec: InferenceSpec, ctx: PlanContext) -> dict[str, str]:
    """Container settings from the spec, as its kind's row names them (data/containers.yaml, environment);
    deployment.container.env is added last."""
    return _environment(spec, ctx, precompiled=uses_precompiled(spec, ctx))


def precompiled_model_environment(spec: InferenceSpec, ctx: PlanContext) -> dict[str, str]:
    """The model's environment once compile --remote has built the model: what the compile job starts vLLM with,
    so that what it compiles is what the endpoint loads."""
    return _environment(spec, ctx, precompiled=True)


def _environment(spec: InferenceSpec, ctx: PlanContext, *, precompiled: bool) -> dict[str, str]:
    kind = spec.container
    obsolete = dict(kind.obsolete_env)
    given = sorted(set(spec.deployment.container.env) & set(obsolete))
    env = {name: _environment_value(spec, value) for name, value in kind.environment}
    if given:
        raise PlanError(
            f"{', '.join(given)} are obsolete: {kind.name} images ignore them",
            "remove them; neurondeploy sets "
            + ", ".join(obsolete[k] for k in given)
            + " from compile.batch_sizes / compile.sequence_lengths",
        )
    if runs_on_dlc(spec, ctx):  # the DLC's toolkit imports code/inference.py (sagemaker_handler) from the model
        deployment = spec.deployment
        env.update(
            {
                "SAGEMAKER_PROGRAM": DLC_PROGRAM,
                "SAGEMAKER_SUBMIT_DIRECTORY": DLC_CODE_DIR,
                "SAGEMAKER_CONTAINER_LOG_LEVEL": "20",
                "SAGEMAKER_REGION": spec.region,
                # One TorchServe worker (a process, one replica) per group of tensor_parallel NeuronCores, each
                # reserving its own group: unset, TorchServe starts one worker per vCPU (its ConfigManager's default)
                # and the Neuron runtime gives the first every core, so the rest fail. The toolkit turns this into
                # default_workers_per_model (sagemaker_pytorch_serving_container/torchserve.py); NEURON_RT_NUM_CORES
                # is the cores each process reserves (awsdocs-neuron nrt-env-var-reference).
                "SAGEMAKER_MODEL_SERVER_WORKERS": str(
                    catalog.replicas_per_instance(deployment.instance_type, deployment.tensor_parallel)
                ),
                "NEURON_RT_NUM_CORES": str(deployment.tensor_parallel),
                **torchserve_batching(spec),
            }
        )
    if precompiled:  # loaded from /opt/ml/model: no Hub id, no Hub token
        return {**env, **precompiled_env(spec), **without_hub_token(spec).deployment.container.runtime_env()}
    return {**env, **spec.deployment.container.runtime_env()}  # secrets as references only


def torchserve_batching(spec: InferenceSpec) -> dict[str, str]:
    """TorchServe's batching of the model, which the DLC's toolkit writes into its config when any of these is set
    (sagemaker_pytorch_serving_container/ts_environment.py, torchserve.py): up to the largest compiled batch of
    requests, waiting at most serving.max_batch_delay_ms for them; our handler runs them in the compiled buckets
    (serving/sagemaker_handler.handle). Set, they replace the worker count the toolkit would take from
    SAGEMAKER_MODEL_SERVER_WORKERS, so min and max workers are that same count; the response timeout is 60 s,
    InvokeEndpoint's own limit (the SageMaker developer guide: a container must answer within 60 seconds)."""
    deployment = spec.deployment
    workers = str(catalog.replicas_per_instance(deployment.instance_type, deployment.tensor_parallel))
    return {
        "SAGEMAKER_TS_BATCH_SIZE": str(max(spec.compile.batch_sizes)),
        "SAGEMAKER_TS_MAX_BATCH_DELAY": str(round(spec.serving.max_batch_delay_ms)),
        "SAGEMAKER_TS_MIN_WORKERS": workers,
        "SAGEMAKER_TS_MAX_WORKERS": workers,
        "SAGEMAKER_TS_RESPONSE_TIMEOUT": "60",
    }


def _environment_value(spec: InferenceSpec, value: str) -> str:
    """One spec value a container's environment carries (catalog.containers.ENVIRONMENT_VALUES)."""
    sequence = max(spec.compile.sequence_lengths)
    if value == "model":
        return spec.model.hf_model_id or MODEL_DATA_DIR
    if value == "tensor_parallel":
        return str(spec.deployment.tensor_parallel)
    if value == "max_batch":
        return str(max(spec.compile.batch_sizes))
    if value == "max_sequence":
        return str(sequence)
    if value == "half_sequence":  # input tokens: fewer than the sequence length, half of it by default
        if sequence < 2:
            raise PlanError(
                f"{spec.container.name} needs a sequence length of 2 or more (input tokens must be fewer)",
                "raise compile.sequence_lengths",
            )
        return str(sequence // 2)
    if value == "port":
        return str(SAGEMAKER_PORT)
    if value == "weights_cast":
        if spec.model.dtype not in _WEIGHTS_CAST:
            raise PlanError(
                f"{spec.container.name} serves fp16, bf16 or fp32 weights, not {spec.model.dtype}",
                "set model.dtype to bfloat16",
            )
        return _WEIGHTS_CAST[spec.model.dtype]
    if value == "task":
        return spec.task
    if value == "serving":  # our server reads its behaviour from here; the artifact carries the compiled buckets
        return serving_env_value(spec.serving)
    raise PlanError(f"container kind {spec.container.name}: unknown environment value {value!r}", "fix the catalogue")


def create_model_request(spec: InferenceSpec, ctx: PlanContext) -> dict:
    container = {
        "Image": container_image(spec, ctx),
        "Mode": "SingleModel",
        "Environment": model_environment(spec, ctx),
    }
    if spec.ships_model_data:  # otherwise the HF container fetches hf_model_id from the Hub itself
        container["ModelDataUrl"] = artifact_uri(spec, ctx)
    elif uses_precompiled(spec, ctx):  # ... unless compile --remote exported it: then from S3, uncompressed
        container["ModelDataSource"] = model_data_source(ctx.precompiled_model_uri)
    params = {"PrimaryContainer": container, "ExecutionRoleArn": execution_role_arn(spec)}
    if vpc_config(spec):
        params["VpcConfig"] = vpc_config(spec)
    tags = sagemaker_tags(spec)  # in the hash too: a new name for any change, so blue/green never reuses a name
    return {
        "ModelName": aws_name(spec, "model-" + content_suffix({**params, "Tags": tags}), NAME_MAX),
        **params,
        "Tags": tags,
    }


def endpoint_volume_gib(spec: InferenceSpec, ctx: PlanContext) -> int | None:
    """EBS per instance; None on NVMe types (SageMaker refuses VolumeSizeInGB for ml.trn1: aws/sagemaker-python-sdk PR 4828)."""
    return volume_for(spec, ctx.model_size_gib)


def volume_for(spec: InferenceSpec, model_size_gib: float | None) -> int | None:
    """:func:`endpoint_volume_gib` for a model of ``model_size_gib`` (None: unknown)."""
    if catalog.get_instance(spec.deployment.instance_type).nvme_instance_storage:
        return None
    given = spec.deployment.volume_gib
    if given is not None:
        if given > VOLUME_MAX_GIB:
            raise PlanError(
                f"deployment.volume_gib {given} is over SageMaker's {VOLUME_MAX_GIB} GiB",
                f"set it to {VOLUME_MAX_GIB} or less",
            )
        return given
    if model_size_gib is None and not spec.container.ours:
        # The HF containers download weights from the Hub and compile or fetch cached NEFFs on the volume;
        # with the size unknown, take what HF's own Neuron notebooks use (optimum-neuron notebooks/sagemaker/deploy-llama-3-3-70b.ipynb: volume_size 512).
        return VOLUME_MAX_GIB
    wanted = math.ceil(VOLUME_PER_MODEL_GIB * (model_size_gib or 0))
    return min(VOLUME_MAX_GIB, max(VOLUME_MIN_GIB, wanted))


def startup_budget_s(spec: InferenceSpec, ctx: PlanContext) -> int:
    """The spec's health-check budget, or over a precompiled model what loading it needs (never more)."""
    if uses_precompiled(spec, ctx) and ctx.precompiled_model_bytes is not None:
        budget = load_budget(ctx.precompiled_model_bytes, endpoint_volume_gib(spec, ctx))[0]
        return min(spec.deployment.health_check_timeout_s, budget)
    return spec.deployment.health_check_timeout_s


def create_endpoint_config_request(spec: InferenceSpec, ctx: PlanContext) -> dict:
    deployment = spec.deployment
    variant = {
        "VariantName": VARIANT,
        "ModelName": create_model_request(spec, ctx)["ModelName"],
        "InstanceType": "ml." + deployment.instance_type,
        "InitialInstanceCount": spec.deployment.capacity[2],
        "InitialVariantWeight": 1.0,
        "ContainerStartupHealthCheckTimeoutInSeconds": startup_budget_s(spec, ctx),
        "ModelDataDownloadTimeoutInSeconds": deployment.model_download_timeout_s,
        "InferenceAmiVersion": deployment.host_image,
    }
    volume = endpoint_volume_gib(spec, ctx)
    if volume is not None:
        variant["VolumeSizeInGB"] = volume
    params = {"ProductionVariants": [variant]}
    tags = sagemaker_tags(spec)
    return {
        "EndpointConfigName": aws_name(spec, "config-" + content_suffix({**params, "Tags": tags}), NAME_MAX),
        **params,
        "Tags": tags,
    }


def create_endpoint_request(spec: InferenceSpec, ctx: PlanContext) -> dict:
    return {
        "EndpointName": aws_name(spec, "", NAME_MAX),
        "EndpointConfigName": create_endpoint_config_request(spec, ctx)["EndpointConfigName"],
        "Tags": sagemaker_tags(spec),
    }


def update_endpoint_request(spec: InferenceSpec, ctx: PlanContext) -> dict:
    """Blue/green: SageMaker starts the new config's instances, shifts traffic once they pass the health check,
    then stops the old ones. Under autoscaling the variant's instance count belongs to the scaling policy, so
    it is kept (RetainAllVariantProperties) rather than reset to InitialInstanceCount."""
    return {
        "EndpointName": create_endpoint_request(spec, ctx)["EndpointName"],
        "EndpointConfigName": create_endpoint_config_request(spec, ctx)["EndpointConfigName"],
        "RetainAllVariantProperties": bool(spec.deployment.autoscaling),
    }


def scaling_resource_id(spec: InferenceSpec) -> str:
    return f"endpoint/{spec.name}/variant/{VARIANT}"


def register_scalable_target_request(spec: InferenceSpec) -> dict:
    scaling = spec.deployment.autoscaling
    return {
        "ServiceNamespace": "sagemaker",
        "ResourceId": scaling_resource_id(spec),
        "ScalableDimension": "sagemaker:variant:DesiredInstanceCount",
        "MinCapacity": scaling.min_instances,
        "MaxCapacity": scaling.max_instances,
        "Tags": ownership_tags(spec),
    }


def put_scaling_policy_request(spec: InferenceSpec) -> dict:
    scaling = spec.deployment.autoscaling
    return {
        "PolicyName": f"{spec.name}-invocations-per-instance",
        "ServiceNamespace": "sagemaker",
        "ResourceId": scaling_resource_id(spec),
        "ScalableDimension": "sagemaker:variant:DesiredInstanceCount",
        "PolicyType": "TargetTrackingScaling",
        "TargetTrackingScalingPolicyConfiguration": {
            # Invocations per instance per minute, the unit of target_invocations_per_instance.
            "TargetValue": float(scaling.target_invocations_per_instance),
            "PredefinedMetricSpecification": {"PredefinedMetricType": "SageMakerVariantInvocationsPerInstance"},
            "ScaleInCooldown": scaling.scale_in_cooldown_s,
            "ScaleOutCooldown": scaling.scale_out_cooldown_s,
        },
    }


# --- training ---------------------------------------------------------------------------------------------


def endpoint_resources(spec: InferenceSpec, ctx: PlanContext) -> list[Resource]:
    """Execution role (unless given), model, endpoint config, endpoint, and autoscaling when asked."""
    image = container_image(spec, ctx)
    statements = ecr_pull_statements(spec.region, [image]) + sagemaker_log_statements(
        spec.region, ctx, f"Endpoints/{spec.name}"
    )
    if spec.ships_model_data:
        statements = s3_statements(spec.region, read=[parent_uri(artifact_uri(spec, ctx))]) + statements
    if uses_precompiled(spec, ctx):
        statements = s3_statements(spec.region, read=[ctx.precompiled_model_uri]) + statements
    statements += secret_read_statements(without_hub_token(spec) if uses_precompiled(spec, ctx) else spec)
    resources = execution_role_resources(spec, ctx, statements, "endpoint") + security_group_resources(
        spec, training=False
    )

    model = create_model_request(spec, ctx)
    config = create_endpoint_config_request(spec, ctx)
    endpoint = create_endpoint_request(spec, ctx)
    variant = config["ProductionVariants"][0]
    resources += [
        # Models and configs are immutable and named by their content: a change makes new ones beside the old,
        # which go once the endpoint has moved (blue/green).
        resource(
            "model",
            "sagemaker:model",
            [Request("sagemaker", "CreateModel", model, {"ModelArn": "ModelArn"})],
            delete_model(model["ModelName"]),
            description=f"Model {model['ModelName']}: {model['PrimaryContainer']['Image']}",
            identity=[model["ModelName"]],
            create_before_delete=True,
        ),
        resource(
            "endpoint-config",
            "sagemaker:endpoint-config",
            [Request("sagemaker", "CreateEndpointConfig", config, {"EndpointConfigArn": "EndpointConfigArn"})],
            delete_endpoint_config(config["EndpointConfigName"]),
            after=["model"],
            description=f"{variant['InitialInstanceCount']} × {variant['InstanceType']}",
            identity=[config["EndpointConfigName"]],
            create_before_delete=True,
        ),
        endpoint_resource(spec, ctx, endpoint),
    ]
    if spec.deployment.autoscaling:
        resources.append(endpoint_scaling_resource(spec, variant["InstanceType"]))
    return with_lookups(resources)


def endpoint_resource(spec: InferenceSpec, ctx: PlanContext, endpoint: dict) -> Resource:
    """The endpoint; a changed config is rolled out in place with UpdateEndpoint (same ARN, no downtime), checked
    afterwards: a failed update leaves SageMaker InService on the old config, which must then stay."""
    name = endpoint["EndpointName"]
    update = update_endpoint_request(spec, ctx)
    in_service = Wait("EndpointInService", {"EndpointName": name})
    return resource(
        "endpoint",
        "sagemaker:endpoint",
        [Request("sagemaker", "CreateEndpoint", endpoint, {"EndpointArn": "EndpointArn"}, in_service)],
        delete_endpoint(name),
        after=["endpoint-config"],
        description=f"Real-time endpoint {name}",
        identity=[name],
        update=[
            Request("sagemaker", "UpdateEndpoint", update, {"EndpointArn": "EndpointArn"}, in_service),
            Request(
                "sagemaker",
                "DescribeEndpoint",
                {"EndpointName": name},
                expect={"EndpointConfigName": update["EndpointConfigName"]},
            ),
        ],
    )


def endpoint_scaling_resource(spec: InferenceSpec, instance_type: str) -> Resource:
    """Scalable target + target-tracking policy. RegisterScalableTarget and PutScalingPolicy update what exists,
    so new capacities are sent in place. The variant's instance type is part of its identity: SageMaker refuses an
    UpdateEndpoint that changes the type of a registered variant, so such a change deregisters it first (the
    executor deletes replaced resources before updates) and registers it again after the endpoint moved."""
    target = register_scalable_target_request(spec)
    policy = Request(
        "application-autoscaling", "PutScalingPolicy", put_scaling_policy_request(spec), {"PolicyARN": "PolicyARN"}
    )
    key = {k: target[k] for k in ("ServiceNamespace", "ResourceId", "ScalableDimension")}
    return resource(
        "endpoint-scaling",
        "application-autoscaling:scalable-target",
        [
            Request(
                "application-autoscaling", "RegisterScalableTarget", target, {"ScalableTargetARN": "ScalableTargetARN"}
            ),
            policy,
        ],
        # Deregistering removes the target's policies on AWS (not in moto 5.2.5); SageMaker's guide deletes them
        # first, so do both: an already missing policy counts as deleted.
        [
            Request(
                "application-autoscaling",
                "DeleteScalingPolicy",
                {k: policy.params[k] for k in ("PolicyName", "ServiceNamespace", "ResourceId", "ScalableDimension")},
            ),
            Request("application-autoscaling", "DeregisterScalableTarget", key),
        ],
        after=["endpoint"],  # the variant must exist (InService) to be registered
        description=f"{target['MinCapacity']}-{target['MaxCapacity']} instances, target tracking on "
        "SageMakerVariantInvocationsPerInstance",
        identity=[target["ResourceId"], target["ScalableDimension"], instance_type],
        update=[
            Request(
                "application-autoscaling",
                "RegisterScalableTarget",  # tags stay as created
                {k: v for k, v in target.items() if k != "Tags"},
            ),
            policy,
        ],
    )


# --- kinds: how drift describes them, how the sweep finds and deletes leftovers (resources.kinds) ----------------


def moved_fixed_variants(aws: Caller, endpoint: Mapping[str, Any]) -> dict[str, tuple[int, int]]:
    """``{variant: (desired now, its config's initial count)}`` for each variant whose desired instance count moved
    and that no scalable target scales: the console's "Update weights and capacity"
    (UpdateEndpointWeightsAndCapacities) changes the count without a new config. An autoscaled variant's count is
    its scaling's to move, within the target's min and max (compared on the scalable target)."""
    config = aws.call("sagemaker", "DescribeEndpointConfig", {"EndpointConfigName": endpoint["EndpointConfigName"]})
    initial = {v["VariantName"]: v.get("InitialInstanceCount") for v in (config or {}).get("ProductionVariants", [])}
    moved = {
        variant["VariantName"]: (variant["DesiredInstanceCount"], initial[variant["VariantName"]])
        for variant in endpoint.get("ProductionVariants", [])
        if initial.get(variant["VariantName"]) is not None
        and variant.get("DesiredInstanceCount") not in (None, initial[variant["VariantName"]])
    }
    if not moved:
        return {}
    ids = [f"endpoint/{endpoint['EndpointName']}/variant/{variant}" for variant in moved]
    targets = aws.call(
        "application-autoscaling", "DescribeScalableTargets", {"ServiceNamespace": "sagemaker", "ResourceIds": ids}
    )
    scaled = {target["ResourceId"].rsplit("/", 1)[-1] for target in (targets or {}).get("ScalableTargets", [])}
    return {variant: counts for variant, counts in moved.items() if variant not in scaled}


def _fixed_variant_drift(aws: Caller, endpoint: dict, ids: Mapping[str, Any], expected: Expected) -> list[str]:
    return [
        f"variant {variant}: desired instance count is {have}, expected {want} (its endpoint config's; nothing "
        "scales it: changed outside the tool)"
        for variant, (have, want) in moved_fixed_variants(aws, endpoint).items()
    ]


def converge_endpoint(aws: Caller, ids: Mapping[str, Any], expected: Expected) -> list[str]:
    """The endpoint serving the config its create request names, whatever it serves now: how an update that failed
    its smoke test goes back to the previous config (its objects are still there: blue/green deletes them only
    after). UpdateEndpoint without RetainAllVariantProperties takes that config's own variant settings; SageMaker
    finishes it InService, and the config it then shows is checked, as an update's is. On the right config, a
    fixed-size variant's instance count changed in the console is put back (UpdateEndpointWeightsAndCapacities)."""
    name, config = ids["EndpointName"], expected.value("CreateEndpoint", "EndpointConfigName")
    live = aws.call("sagemaker", "DescribeEndpoint", {"EndpointName": name}) or {}
    if live.get("EndpointConfigName") == config:
        moved = moved_fixed_variants(aws, live)
        if not moved:
            return []
        aws.call(
            "sagemaker",
            "UpdateEndpointWeightsAndCapacities",
            {
                "EndpointName": name,
                "DesiredWeightsAndCapacities": [
                    {"VariantName": variant, "DesiredInstanceCount": want} for variant, (_, want) in moved.items()
                ],
            },
        )
        aws.wait("sagemaker", "EndpointInService", {"EndpointName": name})
        return [
            f"variant {variant}: instance count put back from {have} to {want}"
            for variant, (have, want) in moved.items()
        ]
    aws.call("sagemaker", "UpdateEndpoint", {"EndpointName": name, "EndpointConfigName": config})
    aws.wait("sagemaker", "EndpointInService", {"EndpointName": name})
    now = (aws.call("sagemaker", "DescribeEndpoint", {"EndpointName": name}) or {}).get("EndpointConfigName")
    if now != config:
        raise NeurondeployError(
            f"endpoint {name} shows config {now} after moving back to {config}",
            "look for its FailureReason (`neurondeploy status`), then apply again",
        )
    return [f"moved back to endpoint config {config}"]


def _deregister_scalable_target(d: Caller, ident: str) -> bool:
    namespace, dimension, resource_id = ident.split("|", 2)
    return done(
        d.call(
            "application-autoscaling",
            "DeregisterScalableTarget",
            {"ServiceNamespace": namespace, "ScalableDimension": dimension, "ResourceId": resource_id},
        )
    )


# Each kind's delete requests, recorded by its builder (a literal name) and sent by the sweep (kinds.Sends).


def delete_endpoint(name: str) -> list[Request]:
    return [
        Request(
            "sagemaker", "DeleteEndpoint", {"EndpointName": name}, wait=Wait("EndpointDeleted", {"EndpointName": name})
        )
    ]


def delete_endpoint_config(name: str) -> list[Request]:
    return [Request("sagemaker", "DeleteEndpointConfig", {"EndpointConfigName": name})]


def delete_model(name: str) -> list[Request]:
    return [Request("sagemaker", "DeleteModel", {"ModelName": name})]


# Models and endpoint configs are checked for existence (and tags) only: immutable, a change makes new ones under
# a new name. Scalable targets' tags are not read (moto has no ListTagsForResource for them).
KINDS = (
    Kind(
        "application-autoscaling:scalable-target",
        tagless=True,  # its id: "<namespace>|<dimension>|<resource id>"
        describe=Describe(
            Request(
                "application-autoscaling",
                "DescribeScalableTargets",
                {
                    "ServiceNamespace": it("ServiceNamespace"),
                    "ResourceIds": [it("ResourceId")],
                    "ScalableDimension": it("ScalableDimension"),
                },
            ),
            "ScalableTargets[0]",
            (
                Attr("min capacity", "MinCapacity", "RegisterScalableTarget", "MinCapacity"),
                Attr("max capacity", "MaxCapacity", "RegisterScalableTarget", "MaxCapacity"),
            ),
            tags=None,
        ),
        find=FIND_SAGEMAKER,
        delete=_deregister_scalable_target,
        uses=("sagemaker:endpoint",),
        arn=("application-autoscaling", "scalable-target"),
    ),
    Kind(
        "sagemaker:endpoint",
        retag=sagemaker_retag("endpoint"),
        describe=Describe(
            Request("sagemaker", "DescribeEndpoint", {"EndpointName": it("EndpointName")}),
            "@",
            (Attr("endpoint config", "EndpointConfigName", "CreateEndpoint", "EndpointConfigName"),),
            extra=_fixed_variant_drift,
            gone=("EndpointStatus", ("Deleting",)),
            bad=("EndpointStatus", ("Failed", "OutOfService")),
            tags=tags_by_arn("EndpointArn"),
        ),
        find=FIND_SAGEMAKER,
        delete=Sends(delete_endpoint),
        uses=("sagemaker:endpoint-config",),
        converge=converge_endpoint,
    ),
    Kind(
        "sagemaker:endpoint-config",
        retag=sagemaker_retag("endpoint-config"),
        describe=Describe(
            Request("sagemaker", "DescribeEndpointConfig", {"EndpointConfigName": it("EndpointConfigName")}),
            "@",
            tags=tags_by_arn("EndpointConfigArn"),
        ),
        find=FIND_SAGEMAKER,
        uses=("sagemaker:model",),
        delete=Sends(delete_endpoint_config),
    ),
    Kind(
        "sagemaker:model",
        retag=sagemaker_retag("model"),
        describe=Describe(
            Request("sagemaker", "DescribeModel", {"ModelName": it("ModelName")}), "@", tags=tags_by_arn("ModelArn")
        ),
        find=FIND_SAGEMAKER,
        uses=("iam:role",),
        delete=Sends(delete_model),
    ),
)
