"""`compile --remote`: the Neuron compile of an inference spec as a SageMaker training job (pure data).

The job runs the Neuron training DLC (``pytorch-training-neuronx`` for the artifact's SDK, from the catalogue)
through the SageMaker training toolkit's own contract: ``sagemaker_program`` from the archive at
``sagemaker_submit_directory`` (which holds this toolkit, the spec and the model), its other hyperparameters as
``--key value`` arguments. It writes nothing but the S3 compile cache. By default it runs on ml.trn1.2xlarge, a
Neuron host; on a CPU type (ml.c5 / ml.m5 ...) neuronx-cc cross-compiles for the target
(``torch_neuronx.trace(..., cpu_backend=True)``, aws-neuron-sdk .../inference/api-torch-neuronx-trace.rst), signalled to the job by its environment.

Its resources live under their own deployment name, ``<name>-compile``, so its role never clashes with the
endpoint's and ``neurondeploy destroy <name>-compile`` removes it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from neurondeploy import catalog
from neurondeploy.catalog import DlcRelease
from neurondeploy.errors import CatalogError, PlanError
from neurondeploy.resources.iam import (
    ecr_pull_statements,
    s3_statements,
    sagemaker_log_statements,
    secret_read_statements,
)
from neurondeploy.resources.model import PlanContext, Request, Resource, resource, with_lookups
from neurondeploy.resources.naming import bucket_name, parent_uri
from neurondeploy.resources.release import compile_image_for
from neurondeploy.resources.sagemaker import NAME_MAX, execution_role_arn, execution_role_resources, sagemaker_tags
from neurondeploy.resources.sagemaker_endpoint import container_image
from neurondeploy.resources.sagemaker_training import FINISHED_JOB_REFUSAL
from neurondeploy.specs import InferenceSpec

COMPILE_SUFFIX = "-compile"
DEFAULT_COMPILE_INSTANCE = "ml.trn1.2xlarge"
COMPILE_MAX_RUNTIME_S = 4 * 3600
COMPILE_VOLUME_GIB = 100  # the model, the toolkit's environment and neuronx-cc's work directory
ENTRY = "neurondeploy_compile_job.py"
CROSS_COMPILE_ENV = "NEURONDEPLOY_NEURON_CPU_BACKEND"  # read by compiler.backends in the job
JOB_RESOURCE = "compile-job"


# The LLM export job (container hf-vllm / hf-tgi) overrides the image's entrypoint: the wrapper image's resolver
# reads the spec's secrets (the gated model's HF_TOKEN) through the job's role, then runs the export module.
EXPORT_WORK_DIR = "/opt/ml/output/work"
LLM_ENTRYPOINT = ["python3", "-m", "neurondeploy.aws.secrets", "--", "python3", "-m"]


@dataclass(frozen=True)
class CompileJob:
    """What the job compiles to: the artifact's content key, the S3 cache it is stored in, the SDK and the host;
    for an LLM, the export module and its arguments (compiler.llm_export.job_arguments)."""

    artifact_key: str
    cache_uri: str
    sdk: str
    instance_type: str = DEFAULT_COMPILE_INSTANCE
    export_module: str | None = None
    export_arguments: tuple[str, ...] = ()
    export_environment: tuple[tuple[str, str], ...] = ()  # the endpoint's, for a compile that starts it


def compile_deployment(spec: InferenceSpec) -> InferenceSpec:
    """The spec as the compile job's own deployment: the same settings under ``<name>-compile``."""
    return spec.model_copy(update={"name": f"{spec.name}{COMPILE_SUFFIX}"})


def compile_cache_uri(region: str, ctx: PlanContext) -> str:
    """The default S3 compile cache: in the shared bucket, which outlives every deployment."""
    return f"s3://{bucket_name(region, ctx)}/compile-cache"


def compile_source_uri(spec: InferenceSpec, ctx: PlanContext) -> str:
    """The job's source archive, content-addressed (``ctx.source_digest``) like the training source."""
    return f"s3://{bucket_name(spec.region, ctx)}/{spec.name}/compile-source/sourcedir-{ctx.source_digest}.tar.gz"


def compile_output_uri(spec: InferenceSpec, ctx: PlanContext) -> str:
    """OutputDataConfig is required; the job leaves nothing there but what SageMaker writes itself."""
    return f"s3://{bucket_name(spec.region, ctx)}/{spec.name}/output"


def is_neuron_host(instance_type: str) -> bool:
    return instance_type.removeprefix("ml.").split(".")[0] in {"trn1", "trn1n", "trn2", "inf2"}


def compile_job_name(spec: InferenceSpec, ctx: PlanContext) -> str:
    """``spec`` is :func:`compile_deployment`'s: its name already ends in ``-compile``."""
    name = f"{spec.name}-{ctx.run_id}"
    if len(name) > NAME_MAX:
        raise PlanError(
            f"compile job name {name!r} is over SageMaker's {NAME_MAX} characters",
            f"shorten the spec's name to at most {NAME_MAX - len(COMPILE_SUFFIX) - len(ctx.run_id) - 1} characters",
        )
    return name


def compile_job_row(sdk: str) -> DlcRelease:
    row = compile_image_for(sdk)
    if row is None:
        raise CatalogError(
            f"compile --remote needs a Neuron DLC of SDK {sdk} and the catalogue has none",
            "set neuron_sdk_version to a release with a pytorch-training-neuronx or pytorch-inference-neuronx image, "
            "or compile on a Neuron host with `neurondeploy compile`",
        )
    return row


def compile_job_image(spec: InferenceSpec, sdk: str) -> str:
    row = compile_job_row(sdk)
    return catalog.image_uri(row.repository, spec.region, row.tag)


# A release without a training DLC (none is published after 2.30) compiles in its inference DLC: the same neuronx-cc
# and torch-neuronx, but no SageMaker training toolkit, so the job does the toolkit's three steps itself: unpack the
# source (the "code" channel), install its requirements, run the entry. The job's values are its arguments ("$@"),
# never part of the script.
JOB_BOOTSTRAP = (
    'set -euo pipefail; code=/opt/ml/code; mkdir -p "$code"; '
    'tar -xzf /opt/ml/input/data/code/*.tar.gz -C "$code"; cd "$code"; '
    "python3 -m pip install --no-cache-dir -r requirements.txt; "
    f'exec python3 {ENTRY} "$@"'
)


def create_compile_job_request(spec: InferenceSpec, ctx: PlanContext, job: CompileJob) -> dict:
    hyperparameters = {
        "sagemaker_program": ENTRY,
        "sagemaker_submit_directory": compile_source_uri(spec, ctx),
        "sagemaker_region": spec.region,
        "artifact_key": job.artifact_key,
        "cache_s3": job.cache_uri,
    }
    environment = {"HF_HUB_OFFLINE": "1"}  # the model is in the archive: never a hub download
    if not is_neuron_host(job.instance_type):
        environment[CROSS_COMPILE_ENV] = "1"
    algorithm = {"TrainingImage": compile_job_image(spec, job.sdk), "TrainingInputMode": "File"}
    own_steps = compile_job_row(job.sdk).repository != "pytorch-training-neuronx"
    if own_steps:
        arguments = ["--artifact_key", job.artifact_key, "--cache_s3", job.cache_uri]
        algorithm |= {"ContainerEntrypoint": ["/bin/bash", "-c", JOB_BOOTSTRAP, ENTRY], "ContainerArguments": arguments}
    request = {
        "TrainingJobName": compile_job_name(spec, ctx),
        "AlgorithmSpecification": algorithm,
        "RoleArn": execution_role_arn(spec),
        # JSON-encoded, as the SDK's framework estimators send them: the toolkit json-decodes each value.
        "HyperParameters": {key: json.dumps(value) for key, value in hyperparameters.items()},
        "OutputDataConfig": {"S3OutputPath": compile_output_uri(spec, ctx)},
        "ResourceConfig": {"InstanceType": job.instance_type, "InstanceCount": 1}
        | ({} if job.instance_type.startswith("ml.trn") else {"VolumeSizeInGB": COMPILE_VOLUME_GIB}),
        "StoppingCondition": {"MaxRuntimeInSeconds": COMPILE_MAX_RUNTIME_S},
        "Environment": environment,
        "Tags": sagemaker_tags(spec, **{"neurondeploy:run-id": ctx.run_id}),
    }
    if own_steps:  # no toolkit reads hyperparameters: the source comes as a channel, SM_MODEL_DIR is set here
        del request["HyperParameters"]
        source = {
            "S3DataType": "S3Prefix",
            "S3Uri": compile_source_uri(spec, ctx),
            "S3DataDistributionType": "FullyReplicated",
        }
        request["InputDataConfig"] = [{"ChannelName": "code", "DataSource": {"S3DataSource": source}}]
        request["Environment"] |= {"SM_MODEL_DIR": "/opt/ml/model", "AWS_DEFAULT_REGION": spec.region}
    return request


def job_environment(region: str) -> dict[str, str]:
    """The region for the cache's S3 client (the resolver takes it from the secret's ARN), and the Hub download,
    the compiler's work and the cache's staging on the job's ML storage volume under /opt/ml rather than the
    container's root filesystem (a 16 GB checkpoint and its export do not fit there). /opt/ml/output/data is what
    SageMaker uploads; output/work is not."""
    return {
        "AWS_DEFAULT_REGION": region,
        "HF_HOME": f"{EXPORT_WORK_DIR}/hf",
        "NEURONDEPLOY_CACHE_DIR": f"{EXPORT_WORK_DIR}/cache",
        "NEURON_COMPILE_CACHE_URL": f"{EXPORT_WORK_DIR}/neuron-cache",
    }


def create_llm_export_job_request(spec: InferenceSpec, ctx: PlanContext, job: CompileJob) -> dict:
    """The container's own export on the spec's image (the wrapper of the catalogue's Hugging Face image: the SDK
    and optimum-neuron it pins). No source archive: the image carries the job's code. The Hub token, if any, is
    a Secrets Manager reference in the environment, read in the job, never a value here."""
    if not spec.deployment.container.image_uri:
        raise PlanError(
            f"{spec.name}: compile --remote of an LLM runs in the wrapper image of infra/hf-secrets, which carries "
            "the export job's code; the catalogue's Hugging Face image alone does not",
            "build infra/hf-secrets over the catalogue image, push it and set deployment.container.image_uri",
        )
    return {
        "TrainingJobName": compile_job_name(spec, ctx),
        "AlgorithmSpecification": {
            "TrainingImage": container_image(spec, ctx),
            "TrainingInputMode": "File",
            "ContainerEntrypoint": [*LLM_ENTRYPOINT, job.export_module],
            "ContainerArguments": list(job.export_arguments),
        },
        "RoleArn": execution_role_arn(spec),
        "OutputDataConfig": {"S3OutputPath": compile_output_uri(spec, ctx)},
        "ResourceConfig": {"InstanceType": job.instance_type, "InstanceCount": 1}
        | ({} if job.instance_type.startswith("ml.trn") else {"VolumeSizeInGB": COMPILE_VOLUME_GIB}),
        "StoppingCondition": {"MaxRuntimeInSeconds": COMPILE_MAX_RUNTIME_S},
        "Environment": {
            **job_environment(spec.region),
            **dict(job.export_environment),
            **spec.deployment.container.runtime_env(),  # its secrets too: the job downloads a gated model
        },
        "Tags": sagemaker_tags(spec, **{"neurondeploy:run-id": ctx.run_id}),
    }


def compile_job_resources(spec: InferenceSpec, ctx: PlanContext, job: CompileJob) -> list[Resource]:
    """Execution role (unless ``iam.role_arn``): read the source, read and write the compile cache, pull the image,
    write its logs (and, for an LLM export, read the spec's secrets); and the job. ``spec`` is
    :func:`compile_deployment`'s."""
    if job.export_module:
        request = create_llm_export_job_request(spec, ctx, job)
        storage = s3_statements(spec.region, write=[job.cache_uri, compile_output_uri(spec, ctx)])
        storage += secret_read_statements(spec)
    else:
        request = create_compile_job_request(spec, ctx, job)
        storage = s3_statements(
            spec.region,
            read=[parent_uri(compile_source_uri(spec, ctx))],
            write=[job.cache_uri, compile_output_uri(spec, ctx)],
        )
    statements = (
        storage
        + ecr_pull_statements(spec.region, [request["AlgorithmSpecification"]["TrainingImage"]])
        + sagemaker_log_statements(spec.region, ctx, "TrainingJobs")
    )
    name = request["TrainingJobName"]
    return with_lookups(
        execution_role_resources(spec, ctx, statements, "the compile of")
        + [
            resource(
                JOB_RESOURCE,
                "sagemaker:training-job",
                [Request("sagemaker", "CreateTrainingJob", request, {"TrainingJobArn": "TrainingJobArn"})],
                [Request("sagemaker", "StopTrainingJob", {"TrainingJobName": name}, done_if=(FINISHED_JOB_REFUSAL,))],
                description=f"Compile job {name}: {job.instance_type}, writes the S3 compile cache only",
            )
        ]
    )
