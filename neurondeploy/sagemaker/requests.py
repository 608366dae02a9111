"""SageMaker request builders, one pure function per API call: ``<operation>_request(spec, ctx) -> dict``.

Model and endpoint-config names end in a hash of their content: both are immutable, so a changed spec gets
new ones and the endpoint is updated to them, while an unchanged spec re-plans to the same names.
"""

from __future__ import annotations

import json
import math
import re

from neurondeploy import __version__, catalog
from neurondeploy.errors import PlanError
from neurondeploy.infra.compute import capacity
from neurondeploy.infra.refs import ref
from neurondeploy.infra.resources import (
    PlanContext, account, artifact_uri, aws_name, bucket_name, content_suffix, ownership_tags, partition, source_uri,
    tag_list,
)

SERVING_REPOSITORY = "neurondeploy-serving"
NAME_MAX = 63  # model, endpoint config, endpoint and training job names
VARIANT = "AllTraffic"
INFERENCE_AMI = "al2-ami-sagemaker-inference-neuron-2"  # facts §1.3, §4.6
SAGEMAKER_PORT = 8080
VOLUME_MIN_GIB, VOLUME_MAX_GIB = 30, 512  # ProductionVariantVolumeSizeInGB allows 1-512
VOLUME_PER_MODEL_GIB = 3  # archive + unpacked model + compiled artifacts / container cache
TRAINING_VOLUME_GIB = 30  # only for a training type without NVMe (no Neuron type today)
HYPERPARAMETERS_MAX = 100
ENVIRONMENT_MAX = 100
# Read up to optimum-neuron v0.0.22 and removed in PR #610; later TGI images ignore them (facts §4.5).
OBSOLETE_TGI_ENV = {"HF_BATCH_SIZE": "MAX_BATCH_SIZE", "HF_SEQUENCE_LENGTH": "MAX_TOTAL_TOKENS"}
_TGI_CAST = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
_JOB_NAME = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}")


def execution_role_arn(spec) -> str:
    return spec.iam.role_arn or ref("execution-role", "Arn")


def vpc_config(spec) -> dict | None:
    """SageMaker joins the VPC only when existing subnets are named; its own group unless groups are given."""
    net = spec.network
    if not (net.vpc_id and net.instance_subnet_ids):
        return None
    groups = list(net.security_group_ids) or [ref("sg-sagemaker", "GroupId")]
    return {"SecurityGroupIds": groups, "Subnets": list(net.instance_subnet_ids)}


def _tags(spec, **extra: str) -> list[dict]:
    return tag_list(ownership_tags(spec, **extra))


# --- endpoint --------------------------------------------------------------------------------------------


def container_image(spec, ctx: PlanContext) -> str:
    container = spec.deployment.container
    if container.image_uri:
        return container.image_uri
    if container.kind == "neurondeploy":
        return ctx.serving_image_uri or default_serving_image(spec.region, ctx)
    purpose = "vllm" if container.kind == "hf-vllm" else "tgi"
    return catalog.neuron_image(purpose, spec.region, spec.neuron_sdk_version)


def default_serving_image(region: str, ctx: PlanContext) -> str:
    """Our serving container in the account's own ECR (built from infra/ and pushed before the model is created)."""
    domain = "amazonaws.com.cn" if partition(region) == "aws-cn" else "amazonaws.com"
    return f"{account(ctx)}.dkr.ecr.{region}.{domain}/{SERVING_REPOSITORY}:{__version__}"


def model_environment(spec, ctx: PlanContext) -> dict[str, str]:
    """Container settings from the spec; deployment.container.env is added last."""
    kind = spec.deployment.container.kind
    batch, sequence = max(spec.compile.batch_sizes), max(spec.compile.sequence_lengths)
    tp = spec.deployment.tensor_parallel
    if kind == "hf-vllm":  # the entrypoint turns SM_ON_<X> into `optimum-cli neuron serve --<x>` (facts §4.6)
        env = {"SM_ON_MODEL": spec.model.hf_model_id, "SM_ON_TENSOR_PARALLEL_SIZE": str(tp),
               "SM_ON_BATCH_SIZE": str(batch), "SM_ON_SEQUENCE_LENGTH": str(sequence), "SM_ON_PORT": str(SAGEMAKER_PORT)}
    elif kind == "hf-tgi":  # facts §4.5: MAX_TOTAL_TOKENS = compiled sequence length, input < it
        if spec.model.dtype not in _TGI_CAST:
            raise PlanError(f"TGI Neuron serves fp16, bf16 or fp32 weights, not {spec.model.dtype}", "set model.dtype to bfloat16")
        if sequence < 2:
            raise PlanError("TGI needs a sequence length of 2 or more (input tokens must be fewer)", "raise compile.sequence_lengths")
        env = {"HF_MODEL_ID": spec.model.hf_model_id, "HF_NUM_CORES": str(tp),
               "HF_AUTO_CAST_TYPE": _TGI_CAST[spec.model.dtype], "MAX_BATCH_SIZE": str(batch),
               "MAX_TOTAL_TOKENS": str(sequence), "MAX_INPUT_TOKENS": str(sequence // 2)}
        obsolete = sorted(set(spec.deployment.container.env) & set(OBSOLETE_TGI_ENV))
        if obsolete:
            raise PlanError(f"{', '.join(obsolete)} are obsolete: TGI Neuron images ignore them",
                            "remove them; neurondeploy sets " + ", ".join(OBSOLETE_TGI_ENV[k] for k in obsolete)
                            + " from compile.batch_sizes / compile.sequence_lengths")
    else:  # our server reads its behaviour from here; the artifact carries the compiled buckets
        env = {"NEURONDEPLOY_TASK": spec.task,
               "NEURONDEPLOY_SERVING": json.dumps(spec.serving.model_dump(mode="json"), separators=(",", ":"))}
    return {**env, **spec.deployment.container.env}


def create_model_request(spec, ctx: PlanContext) -> dict:
    container = {"Image": container_image(spec, ctx), "Mode": "SingleModel", "Environment": model_environment(spec, ctx)}
    if spec.deployment.container.kind == "neurondeploy":  # HF containers load the model from the Hub themselves
        container["ModelDataUrl"] = artifact_uri(spec, ctx)
    params = {"PrimaryContainer": container, "ExecutionRoleArn": execution_role_arn(spec)}
    if vpc_config(spec):
        params["VpcConfig"] = vpc_config(spec)
    tags = _tags(spec)  # in the hash too: a new name for any change, so blue/green never reuses a name
    return {"ModelName": aws_name(spec, "model-" + content_suffix({**params, "Tags": tags}), NAME_MAX), **params, "Tags": tags}


def endpoint_volume_gib(spec, ctx: PlanContext) -> int | None:
    """EBS per instance; None on NVMe types (SageMaker refuses VolumeSizeInGB for ml.trn1, facts §1.3)."""
    if catalog.get_instance(spec.deployment.instance_type).nvme_instance_storage:
        return None
    given = spec.deployment.volume_gib
    if given is not None:
        if given > VOLUME_MAX_GIB:
            raise PlanError(f"deployment.volume_gib {given} is over SageMaker's {VOLUME_MAX_GIB} GiB", f"set it to {VOLUME_MAX_GIB} or less")
        return given
    if ctx.model_size_gib is None and spec.deployment.container.kind != "neurondeploy":
        # The HF containers download weights from the Hub and compile or fetch cached NEFFs on the volume;
        # with the size unknown, take what HF's own Neuron notebooks use (facts §4.5, §4.6).
        return VOLUME_MAX_GIB
    wanted = math.ceil(VOLUME_PER_MODEL_GIB * (ctx.model_size_gib or 0))
    return min(VOLUME_MAX_GIB, max(VOLUME_MIN_GIB, wanted))


def create_endpoint_config_request(spec, ctx: PlanContext) -> dict:
    deployment = spec.deployment
    variant = {
        "VariantName": VARIANT, "ModelName": create_model_request(spec, ctx)["ModelName"],
        "InstanceType": "ml." + deployment.instance_type, "InitialInstanceCount": capacity(spec)[2],
        "InitialVariantWeight": 1.0,
        "ContainerStartupHealthCheckTimeoutInSeconds": deployment.health_check_timeout_s,
        "ModelDataDownloadTimeoutInSeconds": deployment.model_download_timeout_s,
        "InferenceAmiVersion": INFERENCE_AMI,
    }
    volume = endpoint_volume_gib(spec, ctx)
    if volume is not None:
        variant["VolumeSizeInGB"] = volume
    params = {"ProductionVariants": [variant]}
    tags = _tags(spec)
    return {"EndpointConfigName": aws_name(spec, "config-" + content_suffix({**params, "Tags": tags}), NAME_MAX),
            **params, "Tags": tags}


def create_endpoint_request(spec, ctx: PlanContext) -> dict:
    return {"EndpointName": aws_name(spec, "", NAME_MAX),
            "EndpointConfigName": create_endpoint_config_request(spec, ctx)["EndpointConfigName"], "Tags": _tags(spec)}


def update_endpoint_request(spec, ctx: PlanContext) -> dict:
    """Blue/green: SageMaker starts the new config's instances, shifts traffic once they pass the health check,
    then stops the old ones. Under autoscaling the variant's instance count belongs to the scaling policy, so
    it is kept (RetainAllVariantProperties) rather than reset to InitialInstanceCount."""
    return {"EndpointName": create_endpoint_request(spec, ctx)["EndpointName"],
            "EndpointConfigName": create_endpoint_config_request(spec, ctx)["EndpointConfigName"],
            "RetainAllVariantProperties": bool(spec.deployment.autoscaling)}


def scaling_resource_id(spec) -> str:
    return f"endpoint/{spec.name}/variant/{VARIANT}"


def register_scalable_target_request(spec) -> dict:
    scaling = spec.deployment.autoscaling
    return {"ServiceNamespace": "sagemaker", "ResourceId": scaling_resource_id(spec),
            "ScalableDimension": "sagemaker:variant:DesiredInstanceCount",
            "MinCapacity": scaling.min_instances, "MaxCapacity": scaling.max_instances,
            "Tags": ownership_tags(spec)}


def put_scaling_policy_request(spec) -> dict:
    scaling = spec.deployment.autoscaling
    return {"PolicyName": f"{spec.name}-invocations-per-instance", "ServiceNamespace": "sagemaker",
            "ResourceId": scaling_resource_id(spec), "ScalableDimension": "sagemaker:variant:DesiredInstanceCount",
            "PolicyType": "TargetTrackingScaling",
            "TargetTrackingScalingPolicyConfiguration": {
                # Invocations per instance per minute, the unit of target_invocations_per_instance.
                "TargetValue": float(scaling.target_invocations_per_instance),
                "PredefinedMetricSpecification": {"PredefinedMetricType": "SageMakerVariantInvocationsPerInstance"},
                "ScaleInCooldown": scaling.scale_in_cooldown_s, "ScaleOutCooldown": scaling.scale_out_cooldown_s}}


# --- training ---------------------------------------------------------------------------------------------


def training_job_name(spec, ctx: PlanContext) -> str:
    name = f"{spec.name}-{ctx.run_id}"
    if len(name) > NAME_MAX or not _JOB_NAME.fullmatch(name):
        raise PlanError(f"training job name {name!r} must be at most {NAME_MAX} letters, digits and dashes",
                        f"use a run id of at most {NAME_MAX - len(spec.name) - 1} letters, digits and dashes")
    return name


def output_uri(spec, ctx: PlanContext) -> str:
    return spec.output_s3_uri or f"s3://{bucket_name(spec.region, ctx)}/{spec.name}/output"


def training_hyperparameters(spec, ctx: PlanContext) -> dict[str, str]:
    """JSON-encoded like the SageMaker SDK's framework estimators: the training toolkit json-decodes each
    value before passing ``--key value`` to the script. Ours: the launch settings, and the parallel layout
    and precision the reference script reads."""
    dist = spec.distribution
    ours = {
        "sagemaker_program": spec.entry_point,
        "sagemaker_submit_directory": source_uri(spec, ctx),
        "sagemaker_torch_distributed_enabled": True,  # torchrun: the only strategy on Trainium (facts §4.1)
        "sagemaker_region": spec.region,
        "tensor_parallel_size": dist.tensor_parallel,
        "pipeline_parallel_size": dist.pipeline_parallel,
        "zero1": dist.zero1,
        "precision": dist.precision,
        "gradient_checkpointing": dist.gradient_checkpointing,
        "checkpoint_every_steps": spec.checkpoint.every_steps,
    }
    clash = sorted(set(ours) & set(spec.hyperparameters))
    if clash:
        raise PlanError(f"hyperparameters {', '.join(clash)} are set by neurondeploy from the spec",
                        "remove them from hyperparameters; set distribution / checkpoint / entry_point instead")
    values = {**spec.hyperparameters, **ours}
    if len(values) > HYPERPARAMETERS_MAX:
        raise PlanError(f"{len(values)} hyperparameters; SageMaker allows {HYPERPARAMETERS_MAX}", "remove some")
    return {key: json.dumps(value) for key, value in values.items()}


# --auto-cast=none everywhere: autocast happens in torch (bf16-autocast), or the weights are already bf16
# (stochastic rounding), or fp32 was asked for; a compiler down-cast on top would change the numerics (facts §3.3).
_CC_FLAGS = {"fp32": "--model-type transformer --auto-cast=none",
             "bf16-autocast": "--model-type transformer --auto-cast=none",
             "bf16-stochastic-rounding": "--model-type transformer --auto-cast=none"}


def training_environment(spec) -> dict[str, str]:
    instance = catalog.get_instance(spec.instance_type)
    env = {"NEURON_CC_FLAGS": _CC_FLAGS[spec.distribution.precision],
           # Read by the reference script (no SageMaker field carries them; hyperparameters are nearly full).
           "NEURONDEPLOY_MICROBATCHES": str(spec.distribution.microbatches),
           "NEURONDEPLOY_CHECKPOINT_DIR": spec.checkpoint.local_path,
           "NEURONDEPLOY_RESUME": "1" if spec.checkpoint.resume else "0"}
    if spec.compile_cache_uri:
        env["NEURON_COMPILE_CACHE_URL"] = spec.compile_cache_uri
    if spec.parallel_compile:
        env["RUN_NEURON_PARALLEL_COMPILE"] = "1"  # the toolkit prefixes torchrun with neuron_parallel_compile
        if instance.name == "trn1.2xlarge":
            env["NEURON_PARALLEL_COMPILE_MAX_RETRIES"] = "1"  # little host memory (facts §3.2)
    if spec.distribution.precision == "bf16-stochastic-rounding":
        env["NEURON_RT_STOCHASTIC_ROUNDING_EN"] = "1"
    if spec.instance_count > 1 and instance.multi_node:
        # The container sets these only for types in its lists, which miss ml.trn1n.32xlarge (facts §4.1).
        env.update({"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "FI_EFA_FORK_SAFE": "1",
                    "MALLOC_ARENA_MAX": "64"})
    env.update(spec.environment)
    if len(env) > ENVIRONMENT_MAX:
        raise PlanError(f"{len(env)} environment variables; SageMaker allows {ENVIRONMENT_MAX}", "remove some from environment")
    return env


def input_data_config(spec) -> list[dict]:
    channels = []
    for name, channel in spec.inputs.items():
        if not channel.s3_uri:
            raise PlanError(f"input channel {name} has only local_path; SageMaker reads channels from S3",
                            f"set inputs.{name}.s3_uri")
        channels.append({"ChannelName": name, "DataSource": {"S3DataSource": {
            "S3DataType": "S3Prefix", "S3Uri": channel.s3_uri, "S3DataDistributionType": channel.distribution}}})
    return channels


def create_training_job_request(spec, ctx: PlanContext) -> dict:
    instance = catalog.get_instance(spec.instance_type)
    resources = {"InstanceType": instance.sagemaker_name, "InstanceCount": spec.instance_count}
    if not instance.nvme_instance_storage:  # VolumeSizeInGB is optional in ResourceConfig; NVMe types refuse it
        resources["VolumeSizeInGB"] = TRAINING_VOLUME_GIB
    stopping = {"MaxRuntimeInSeconds": spec.max_runtime_s}
    params = {
        "TrainingJobName": training_job_name(spec, ctx),
        "AlgorithmSpecification": {
            "TrainingImage": spec.image_uri or catalog.neuron_image("training", spec.region, spec.neuron_sdk_version),
            "TrainingInputMode": "File"},
        "RoleArn": execution_role_arn(spec),
        "HyperParameters": training_hyperparameters(spec, ctx),
        "OutputDataConfig": {"S3OutputPath": output_uri(spec, ctx)},
        "ResourceConfig": resources,
        "StoppingCondition": stopping,
        "Environment": training_environment(spec),
        "Tags": _tags(spec, **{"neurondeploy:run-id": ctx.run_id}),
    }
    if spec.inputs:
        params["InputDataConfig"] = input_data_config(spec)
    if spec.checkpoint.s3_uri:
        params["CheckpointConfig"] = {"S3Uri": spec.checkpoint.s3_uri, "LocalPath": spec.checkpoint.local_path}
    if spec.spot.enabled:
        params["EnableManagedSpotTraining"] = True
        stopping["MaxWaitTimeInSeconds"] = spec.spot.max_wait_s
    if vpc_config(spec):
        params["VpcConfig"] = vpc_config(spec)
    return params
