"""What must be true before `apply` (or `train`) can succeed, said by `plan` as steps, each with the command that
does it: where the Neuron artifact comes from on this machine (and what the job that makes it costs), the image to
build and push into the account's ECR, the secrets the container reads, a gated model's licence, the training data,
the Service Quotas the account needs (0 on new accounts), and what apply uploads. A newcomer otherwise meets each of
them as a failure, one paid apply at a time. `plan --check` (ops/plan_check.py) reads the account for each step
that names a ``check`` and says done or missing."""

from __future__ import annotations

import importlib.util
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from neurondeploy import catalog
from neurondeploy.errors import PlanError
from neurondeploy.planner.artifact_target import artifact_target
from neurondeploy.planner.checks import model_architecture
from neurondeploy.planner.context import plan_context
from neurondeploy.planner.image_push import image_to_push
from neurondeploy.planner.llm_compile import llm_compile_host
from neurondeploy.planner.quotas import QuotaNeed, quota_command, quota_needs, sagemaker_quota_name
from neurondeploy.resources import nxd_training_config
from neurondeploy.resources.iam import BOUNDARY_POLICY_NAME, ROLE_PATH
from neurondeploy.resources.model import PlanContext, Resource
from neurondeploy.resources.sagemaker_compile import DEFAULT_COMPILE_INSTANCE
from neurondeploy.resources.sagemaker_endpoint import container_image
from neurondeploy.resources.sagemaker_training import to_cmd_args
from neurondeploy.specs import InferenceSpec, LoadedSpec

NEW_ACCOUNTS = "new accounts have 0"
Check = Literal["image", "secret", "parameter", "licence", "channel", "role", "boundary", "quota", "compiled"]
Status = Literal["done", "missing", "not checked"]


class Step(BaseModel):
    """One thing to be true before apply: what, the commands that make it so, and what `plan --check` reads."""

    model_config = ConfigDict(extra="forbid")

    what: str = Field(description="what must be true, and why")
    commands: list[str] = Field(default_factory=list, description="the commands that do it, in order")
    check: Check | None = Field(default=None, description="what `plan --check` reads in the account; None: a note")
    field: str | None = Field(default=None, description="the spec field it is about")
    subject: str | None = Field(default=None, description="what is read: an image URI, an ARN, a quota's name")
    status: Status | None = Field(default=None, description="with `plan --check`: done, missing or not checked")
    detail: str | None = Field(default=None, description="with `plan --check`: what was found")
    quota: QuotaNeed | None = Field(default=None, exclude=True)  # a quota step's need, for `plan --check`


def note(what: str) -> Step:
    return Step(what=what)


def before_apply(loaded: LoadedSpec, resources: list[Resource] = (), ctx: PlanContext | None = None) -> list[Step]:
    """``resources``: the plan's (a plan that makes a role needs the permissions boundary); ``ctx``: its context
    (made here when not given)."""
    spec = loaded.spec
    # In the order they can be done: compile --remote's job needs the image and secrets the endpoint does.
    steps = (
        _image(loaded, ctx or plan_context(loaded))
        + _secrets(spec)
        + _licence(spec)
        + _channels(loaded)
        + _role(spec, resources)
    )
    steps += _artifact(loaded) if isinstance(spec, InferenceSpec) else []
    if getattr(spec, "engine", None) == "nxd-training":
        steps.append(note(_nxd_training_launch(spec)))
    command = "apply" if isinstance(spec, InferenceSpec) else "train"
    for need in quota_needs(spec):
        steps.append(
            _quota(
                need,
                spec.region,
                f"Service Quotas {need.describe()} in {spec.region}: this plan needs {need.need} {need.unit} "
                f"({need.counted}); {NEW_ACCOUNTS}: {command} checks it first and refuses below",
            )
        )
    return steps


def _quota(need: QuotaNeed, region: str, what: str) -> Step:
    return Step(what=what, commands=[quota_command(need, region)], check="quota", subject=need.quota_name, quota=need)


def _image(loaded: LoadedSpec, ctx: PlanContext) -> list[Step]:
    spec = loaded.spec
    if isinstance(spec, InferenceSpec):
        if spec.deployment.platform != "sagemaker":
            return []
        uri = container_image(spec, ctx)
    else:
        uri = spec.image_uri
    push = image_to_push(spec, uri) if uri else None
    if push is None:
        return []
    return [
        Step(
            what=f"{push.what} {uri} in ECR: SageMaker pulls it from there (run the build in a checkout of "
            "neurondeploy)",
            commands=list(push.commands),
            check="image",
            field=push.field,
            subject=uri,
        )
    ]


def _secrets(spec) -> list[Step]:
    container = getattr(getattr(spec, "deployment", None), "container", None)
    steps = []
    for key, ref in sorted(getattr(container, "secrets", {}).items()):
        region = ref.arn.split(":")[3]
        if ref.secret:
            name = ref.secret.split(":secret:", 1)[-1]
            check, what = "secret", f"secret {name}"
            command = f"aws secretsmanager create-secret --name {name} --secret-string file://VALUE --region {region}"
        else:
            name = "/" + ref.ssm.split(":parameter/", 1)[-1]
            check, what = "parameter", f"SSM parameter {name}"
            command = f"aws ssm put-parameter --name {name} --type SecureString --value file://VALUE --region {region}"
        steps.append(
            Step(
                what=f"{what} ({key}): the container reads it at start",
                commands=[command],
                check=check,
                field=f"deployment.container.env.{key}",
                subject=ref.arn,
            )
        )
    return steps


def _licence(spec) -> list[Step]:
    """A Hub model read with a token is a gated one (meta-llama, ...): the token's account must have accepted its
    licence, or the container's download fails with 403 after the endpoint was made."""
    model_id = getattr(getattr(spec, "model", None), "hf_model_id", None)
    container = getattr(getattr(spec, "deployment", None), "container", None)
    names = set(getattr(container, "secrets", {})) | set(getattr(container, "env", {}) or {})
    if not model_id or "HF_TOKEN" not in names:
        return []
    return [
        Step(
            what=f"the licence of {model_id}, accepted on the Hugging Face account whose token HF_TOKEN holds: a "
            "gated model's download fails without it",
            commands=[f"open https://huggingface.co/{model_id} and accept its licence"],
            check="licence",
            field="model.hf_model_id",
            subject=model_id,
        )
    ]


def _channels(loaded: LoadedSpec) -> list[Step]:
    spec = loaded.spec
    steps = []
    for name, channel in sorted(getattr(spec, "inputs", {}).items()):
        if not channel.s3_uri:
            continue
        if channel.format == "tokenized":
            command = f"neurondeploy data {loaded.source.file} --channel {name} --corpus FILE --tokenizer DIR"
        else:
            command = f"aws s3 sync DIR {channel.s3_uri}"
        steps.append(
            Step(
                what=f"the {name} channel's data in {channel.s3_uri}: the job starts on what it holds",
                commands=[command],
                check="channel",
                field=f"inputs.{name}.s3_uri",
                subject=channel.s3_uri,
            )
        )
    return steps


def _role(spec, resources) -> list[Step]:
    given = getattr(getattr(spec, "iam", None), "role_arn", None)
    if given:
        service = "ec2" if spec.kind == "inference" and spec.deployment.platform == "ec2" else "sagemaker"
        return [
            Step(
                what=f"role {given} exists and trusts {service}.amazonaws.com, which assumes it",
                commands=[
                    f"aws iam create-role --role-name {given.rsplit('/', 1)[-1]} --assume-role-policy-document "
                    "file://TRUST_POLICY"
                ],
                check="role",
                field="iam.role_arn",
                subject=given,
            )
        ]
    if not any(request.operation == "CreateRole" for resource in resources for request in resource.create):
        return []
    return [
        Step(
            what=f"the permissions boundary {BOUNDARY_POLICY_NAME}, which every role neurondeploy makes carries "
            "(an administrator creates it once per account)",
            commands=[
                f"aws iam create-policy --path {ROLE_PATH} --policy-name {BOUNDARY_POLICY_NAME} --policy-document "
                "file://infra/iam-boundary.json"
            ],
            check="boundary",
            field="iam",
        )
    ]


def _nxd_training_launch(spec) -> str:
    """How the job starts: the training toolkit's torchrun over NxD Training's entry, with the config beside it."""
    cores = catalog.get_instance(spec.instance_type).neuron_cores
    args = " ".join(to_cmd_args(nxd_training_config.launch_hyperparameters()))
    return (
        f"engine nxd-training: on each of the {spec.instance_count} hosts the training toolkit runs `torchrun "
        f"--nnodes {spec.instance_count} --nproc_per_node {cores} {nxd_training_config.ENTRY_POINT} {args}` in "
        f"/opt/ml/code: NxD Training's examples from source_dir, with {nxd_training_config.CONFIG_FILE} (the "
        f"rendered config: engine_config in plan --json) and the model's {nxd_training_config.MODEL_CONFIG_FILE} beside them"
    )


def compile_job_quota(instance_type: str) -> QuotaNeed:
    """The quota a `compile --remote` job on ``instance_type`` counts against: one instance of training job usage."""
    instance = catalog.get_instance(instance_type)
    name = sagemaker_quota_name(instance, "training")
    return QuotaNeed("sagemaker", name, None, 1, "instances", f"the compile job's 1 × {instance_type}")


def _job_steps(what: str, instance_type: str, file: str, region: str) -> list[Step]:
    instance = catalog.get_instance(instance_type)
    price = catalog.price_per_hour(instance, platform="sagemaker")
    cost = f"${price:,.2f}/hour while it runs" if price is not None else "no ml.* price catalogued for it"
    need = compile_job_quota(instance_type)
    return [
        Step(
            what=f"{what}: `neurondeploy compile {file} --remote` runs a SageMaker job on {instance_type} ({cost}; "
            "it shows the price and asks first) and stores it in the compile cache, where apply finds it",
            commands=[f"neurondeploy compile {file} --remote"],
            check="compiled",
        ),
        _quota(
            need,
            region,
            f"Service Quotas {need.describe()} in {region}: that job needs 1 instance; {NEW_ACCOUNTS}",
        ),
    ]


def _compiled_at_start(loaded: LoadedSpec) -> list[Step]:
    """A container that compiles the model when it starts (vllm-neuron): compile --remote builds its artifacts
    first, or the spec lets it compile at start."""
    spec = loaded.spec
    try:
        host = llm_compile_host(spec, model_architecture(loaded))
    except PlanError:
        host = None  # check_sagemaker_endpoint's findings say why
    steps = _job_steps("the compiled model", host.instance_type, loaded.source.file, spec.region) if host else []
    if spec.deployment.container.compile_at_start:
        return [
            *steps,
            note(
                f"without it, {spec.container.name} compiles the model with NxD Inference when the endpoint starts, "
                f"within the {spec.deployment.health_check_timeout_s} s startup health check (compile_at_start)"
            ),
        ]
    return [*steps, note("without it apply refuses (or set deployment.container.compile_at_start: true)")]


def _artifact(loaded: LoadedSpec) -> list[Step]:
    spec, file = loaded.spec, loaded.source.file
    if not spec.container.ours and spec.container.compiles_at_start:
        return _compiled_at_start(loaded) if spec.deployment.platform == "sagemaker" else []
    if not spec.container.ours:
        if spec.deployment.platform != "sagemaker" or spec.deployment.container.start_from_neuron_cache:
            return []
        try:
            host = llm_compile_host(spec, model_architecture(loaded))
        except PlanError:
            return []  # check_sagemaker_endpoint's findings say why
        return _job_steps("the exported model", host.instance_type, file, spec.region)
    target = artifact_target(spec)
    if target.runtime != "neuron":
        return []
    upload = note(
        "apply uploads model.tar.gz (the artifact, and code/ with neurondeploy's wheel for the serving image) to the "
        "shared bucket (below)"
        if spec.deployment.platform == "sagemaker"
        else "apply uploads the artifact and neurondeploy's wheel to the shared bucket (below); the instances "
        "download them at boot"
    )
    if importlib.util.find_spec("torch_neuronx") is not None:
        return [
            note(f"the Neuron artifact: compiled here (neuronx-cc of SDK {target.neuron_sdk}) or found in the cache"),
            upload,
        ]
    what = (
        f"the Neuron artifact (NEFFs for {target.target}, SDK {target.neuron_sdk}): this machine has no Neuron SDK, "
        "so apply deploys only one compile --remote made"
    )
    return [*_job_steps(what, DEFAULT_COMPILE_INSTANCE, file, spec.region), upload]
