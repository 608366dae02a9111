"""SageMaker training jobs on ml.trn1: the CreateTrainingJob request (image, torchrun, EFA, hyperparameters,
checkpoints, spot) and the job as a Resource."""

from __future__ import annotations

import json
import re

from neurondeploy import catalog
from neurondeploy.errors import PlanError
from neurondeploy.resources import nxd_training_config
from neurondeploy.resources.iam import ecr_pull_statements, s3_statements, sagemaker_log_statements
from neurondeploy.resources.kinds import Caller, Kind, done
from neurondeploy.resources.model import PlanContext, Request, Resource, Wait, resource, with_lookups
from neurondeploy.resources.naming import (
    bucket_name,
    parent_uri,
    s3_prefix_arn,
    source_uri,
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
    vpc_config,
)
from neurondeploy.specs.training import TrainingSpec

TRAINING_VOLUME_GIB = 30  # only for a training type without NVMe (no Neuron type today)


HYPERPARAMETERS_MAX = 100


ENVIRONMENT_MAX = 100


_JOB_NAME = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}")


def training_job_name(spec: TrainingSpec, ctx: PlanContext) -> str:
    name = f"{spec.name}-{ctx.run_id}"
    if len(name) > NAME_MAX or not _JOB_NAME.fullmatch(name):
        raise PlanError(
            f"training job name {name!r} must be at most {NAME_MAX} letters, digits and dashes",
            f"use a run id of at most {NAME_MAX - len(spec.name) - 1} letters, digits and dashes",
        )
    return name


def output_uri(spec: TrainingSpec, ctx: PlanContext) -> str:
    return spec.output_s3_uri or f"s3://{bucket_name(spec.region, ctx)}/{spec.name}/output"


def _launch_hyperparameters(spec: TrainingSpec, ctx: PlanContext) -> dict[str, object]:
    """The training toolkit's own keys: which script to run from which archive, under torchrun."""
    return {
        "sagemaker_program": spec.entry_point,
        "sagemaker_submit_directory": source_uri(spec, ctx),
        "sagemaker_torch_distributed_enabled": True,  # torchrun: the only strategy on Trainium (sagemaker-python-sdk legacy/src/sagemaker/pytorch/estimator.py)
        "sagemaker_region": spec.region,
    }


_LAUNCH_KEYS = (
    "sagemaker_program",
    "sagemaker_submit_directory",
    "sagemaker_torch_distributed_enabled",
    "sagemaker_region",
)


def architecture_hyperparameters(spec: TrainingSpec) -> dict[str, object]:
    """The model the plan sized (``architecture``), as the reference script reads it, so the job trains that model:
    its sizes, and the features it may not build (a dense MLP, experts, another head width, tied embeddings) for
    it to refuse rather than train something else. Nothing without an architecture."""
    arch = spec.architecture
    if arch is None:
        return {}
    values: dict[str, object] = {
        "layers": arch.layers,
        "hidden_size": arch.hidden_size,
        "heads": arch.attention_heads,
        "kv_heads": arch.key_value_heads,
        "intermediate_size": arch.dense_intermediate_size,
        "vocab_size": arch.vocab_size,
        "gated_mlp": arch.gated_mlp,
    }
    if arch.experts:
        values["experts"] = arch.experts
    if arch.head_dim:
        values["head_dim"] = arch.head_dim
    if arch.tied_embeddings:
        values["tied_embeddings"] = True
    return values


def script_hyperparameters(spec: TrainingSpec) -> dict[str, object]:
    """What the entry script reads, before encoding: the spec's hyperparameters, then the model's architecture and
    the parallel layout and precision the reference script reads (neurondeploy's, so the spec may not set them)."""
    dist = spec.distribution
    layout = {
        **architecture_hyperparameters(spec),
        "tensor_parallel_size": dist.tensor_parallel,
        "pipeline_parallel_size": dist.pipeline_parallel,
        "zero1": dist.zero1,
        "precision": dist.precision,
        "gradient_checkpointing": dist.gradient_checkpointing,
        "checkpoint_every_steps": spec.checkpoint.every_steps,
    }
    clash = sorted((set(_LAUNCH_KEYS) | set(layout)) & set(spec.hyperparameters))
    if clash:
        raise PlanError(
            f"hyperparameters {', '.join(clash)} are set by neurondeploy from the spec",
            "remove them from hyperparameters; set architecture / distribution / checkpoint / entry_point instead",
        )
    count = len(spec.hyperparameters) + len(_LAUNCH_KEYS) + len(layout)
    if count > HYPERPARAMETERS_MAX:
        raise PlanError(f"{count} hyperparameters; SageMaker allows {HYPERPARAMETERS_MAX}", "remove some")
    return {**spec.hyperparameters, **layout}


def training_hyperparameters(spec: TrainingSpec, ctx: PlanContext) -> dict[str, str]:
    """JSON-encoded like the SageMaker SDK's framework estimators: the training toolkit json-decodes each
    value before passing ``--key value`` to the script. The launch settings come before the layout. NxD Training
    reads its config alone: its job passes only where that is."""
    if spec.engine == "nxd-training":
        values = {**_launch_hyperparameters(spec, ctx), **nxd_training_config.launch_hyperparameters()}
        return {key: json.dumps(value) for key, value in values.items()}
    script = script_hyperparameters(spec)
    values = {**spec.hyperparameters, **_launch_hyperparameters(spec, ctx), **script}
    return {key: json.dumps(value) for key, value in values.items()}


def to_cmd_args(hyperparameters: dict[str, object]) -> list[str]:
    """What the training toolkit appends to the entry's command for the decoded hyperparameters
    (sagemaker_training.mapping.to_cmd_args): sorted keys, ``--key`` (``-k`` for one letter), ``str(value)``."""
    args: list[str] = []
    for key in sorted(hyperparameters):
        value = hyperparameters[key]
        if isinstance(value, dict):
            value = ",".join(f"{k}={v}" for k, v in sorted(value.items()))
        args += [f"--{key}" if len(key) > 1 else f"-{key}", "" if value is None else str(value)]
    return args


# --auto-cast=none everywhere: autocast happens in torch (bf16-autocast), or the weights are already bf16
# (stochastic rounding), or fp32 was asked for; a compiler down-cast on top would change the numerics (aws-neuron-sdk archive/nxd-training/torch-neuron-envvars.rst).
_CC_FLAGS = {
    "fp32": "--model-type transformer --auto-cast=none",
    "bf16-autocast": "--model-type transformer --auto-cast=none",
    "bf16-stochastic-rounding": "--model-type transformer --auto-cast=none",
}


def job_files(spec: TrainingSpec) -> dict[str, bytes]:
    """What the launch writes beside source_dir in the job's code: NxD Training's config and the model's
    config.json (resources.nxd_training_config); nothing for the reference script."""
    if spec.engine != "nxd-training":
        return {}
    return nxd_training_config.job_files(spec, catalog.get_instance(spec.instance_type).neuron_cores)


def training_environment(spec: TrainingSpec) -> dict[str, str]:
    instance = catalog.get_instance(spec.instance_type)
    env = {}
    if spec.engine == "reference":
        env = {
            "NEURON_CC_FLAGS": _CC_FLAGS[spec.distribution.precision],
            # Read by the reference script (no SageMaker field carries them; hyperparameters are nearly full).
            "NEURONDEPLOY_MICROBATCHES": str(spec.distribution.microbatches),
            "NEURONDEPLOY_CHECKPOINT_DIR": spec.checkpoint.local_path,
            "NEURONDEPLOY_RESUME": "1" if spec.checkpoint.resume else "0",
        }
    # NxD Training's training_orchestrator.py sets the compiler flags, bf16 and stochastic rounding variables from
    # its config's compiler_flags and precision.type; a value here would win over them (it sets only unset ones).
    if spec.compile_cache_uri:
        env["NEURON_COMPILE_CACHE_URL"] = spec.compile_cache_uri
    if spec.parallel_compile:
        env["RUN_NEURON_PARALLEL_COMPILE"] = "1"  # the toolkit prefixes torchrun with neuron_parallel_compile
        if instance.name == "trn1.2xlarge":
            env["NEURON_PARALLEL_COMPILE_MAX_RETRIES"] = (
                "1"  # little host memory (aws-neuron-sdk .../training/pytorch-neuron-parallel-compile.rst)
            )
    if spec.engine == "reference" and spec.distribution.precision == "bf16-stochastic-rounding":
        env["NEURON_RT_STOCHASTIC_ROUNDING_EN"] = "1"
    if spec.instance_count > 1 and instance.multi_node:
        # The container sets these only for types in its lists, which miss ml.trn1n.32xlarge (sagemaker-training-toolkit src/sagemaker_training/torch_distributed.py).
        env.update(
            {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "FI_EFA_FORK_SAFE": "1", "MALLOC_ARENA_MAX": "64"}
        )
    env.update(spec.environment)
    if len(env) > ENVIRONMENT_MAX:
        raise PlanError(
            f"{len(env)} environment variables; SageMaker allows {ENVIRONMENT_MAX}", "remove some from environment"
        )
    return env


def input_data_config(spec: TrainingSpec) -> list[dict]:
    channels = []
    for name, channel in spec.inputs.items():
        if not channel.s3_uri:
            raise PlanError(
                f"input channel {name} has only local_path; SageMaker reads channels from S3",
                f"set inputs.{name}.s3_uri",
            )
        channels.append(
            {
                "ChannelName": name,
                "DataSource": {
                    "S3DataSource": {
                        "S3DataType": "S3Prefix",
                        "S3Uri": channel.s3_uri,
                        "S3DataDistributionType": channel.distribution,
                    }
                },
            }
        )
    return channels


def create_training_job_request(spec: TrainingSpec, ctx: PlanContext) -> dict:
    instance = catalog.get_instance(spec.instance_type)
    resources = {"InstanceType": instance.sagemaker_name, "InstanceCount": spec.instance_count}
    if not instance.nvme_instance_storage:  # VolumeSizeInGB is optional in ResourceConfig; NVMe types refuse it
        resources["VolumeSizeInGB"] = TRAINING_VOLUME_GIB
    stopping = {"MaxRuntimeInSeconds": spec.max_runtime_s}
    params = {
        "TrainingJobName": training_job_name(spec, ctx),
        "AlgorithmSpecification": {
            "TrainingImage": spec.image_uri
            or catalog.neuron_image("training", spec.region, deployment_release(spec).sdk),
            "TrainingInputMode": "File",
        },
        "RoleArn": execution_role_arn(spec),
        "HyperParameters": training_hyperparameters(spec, ctx),
        "OutputDataConfig": {"S3OutputPath": output_uri(spec, ctx)},
        "ResourceConfig": resources,
        "StoppingCondition": stopping,
        "Environment": training_environment(spec),
        "Tags": sagemaker_tags(spec, **{"neurondeploy:run-id": ctx.run_id}),
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
    if encrypts_between_hosts(spec):
        params["EnableInterContainerTrafficEncryption"] = True
    return params


def encrypts_between_hosts(spec: TrainingSpec) -> bool:
    """Secure by default: a job of several instances encrypts what they exchange (weights, gradients); one instance
    has no traffic between containers to encrypt (https://docs.aws.amazon.com/sagemaker/latest/dg/train-encrypt.html)."""
    return spec.instance_count > 1 and spec.inter_container_encryption


# StopTrainingJob on a finished job: "The request was rejected because the training job is in status Completed."
FINISHED_JOB_REFUSAL = "training job is in status"


def training_job_resources(spec: TrainingSpec, ctx: PlanContext) -> list[Resource]:
    """Execution role (unless given) and the training job. A job cannot be deleted: destroy stops it."""
    job = create_training_job_request(spec, ctx)
    read = [parent_uri(source_uri(spec, ctx))] + [c.s3_uri for c in spec.inputs.values() if c.s3_uri]
    write = [output_uri(spec, ctx)] + [u for u in (spec.checkpoint.s3_uri, spec.compile_cache_uri) if u]
    statements = (
        s3_statements(spec.region, read=read, write=write)
        + ecr_pull_statements(spec.region, [job["AlgorithmSpecification"]["TrainingImage"]])
        + sagemaker_log_statements(spec.region, ctx, "TrainingJobs")
    )
    if spec.compile_cache_uri:  # the Neuron cache removes its *.lock files when a compile finishes
        statements.append(
            {
                "Sid": "CompileCacheLocks",
                "Effect": "Allow",
                "Action": "s3:DeleteObject",
                "Resource": s3_prefix_arn(spec.compile_cache_uri, spec.region),
            }
        )
    resources = execution_role_resources(spec, ctx, statements, "training") + security_group_resources(
        spec, training=True
    )
    name = job["TrainingJobName"]
    resources.append(
        resource(
            "training-job",
            "sagemaker:training-job",
            [Request("sagemaker", "CreateTrainingJob", job, {"TrainingJobArn": "TrainingJobArn"})],
            # Jobs cannot be deleted; stopping a finished one is refused, which destroy treats as done.
            [
                Request(
                    "sagemaker",
                    "StopTrainingJob",
                    {"TrainingJobName": name},
                    wait=Wait("TrainingJobCompletedOrStopped", {"TrainingJobName": name}),
                    done_if=(FINISHED_JOB_REFUSAL,),
                )
            ],
            description=f"Training job {name}: {spec.instance_count} × ml.{spec.instance_type}"
            + (", managed spot" if spec.spot.enabled else "")
            + (", traffic between hosts encrypted" if encrypts_between_hosts(spec) else "")
            + "; destroy stops it (SageMaker keeps job records, they cannot be deleted)",
        )
    )
    return with_lookups(resources)


# --- kinds: how the sweep finds and stops a leftover job (resources.kinds) --------------------------------------


def _stop_training_job(d: Caller, name: str) -> bool:
    # Refused with ValidationException when it already finished: nothing to stop.
    stopped = done(d.call("sagemaker", "StopTrainingJob", {"TrainingJobName": name}, refused=("ValidationException",)))
    d.wait("sagemaker", "TrainingJobCompletedOrStopped", {"TrainingJobName": name})
    return stopped


# Not checked by drift: a job ends by design (`status` reports it). It cannot be deleted: a running one is stopped.
KINDS = (
    Kind(
        "sagemaker:training-job",
        retag=sagemaker_retag("training-job"),
        find=FIND_SAGEMAKER,
        delete=_stop_training_job,
        uses=("iam:role",),
    ),
)
