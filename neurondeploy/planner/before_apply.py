"""What must be true before `apply` can succeed, said by `plan` (offline): where the Neuron artifact comes from on
this machine (and what the job that makes it costs), the Service Quotas the account needs (0 on new accounts), and
what apply uploads. A newcomer otherwise meets each of them as a failure, one apply at a time."""

from __future__ import annotations

import importlib.util

from neurondeploy import catalog
from neurondeploy.errors import PlanError
from neurondeploy.planner.artifact_target import artifact_target
from neurondeploy.planner.checks import model_architecture
from neurondeploy.planner.llm_compile import llm_compile_host
from neurondeploy.planner.quotas import quota_needs, sagemaker_quota_name
from neurondeploy.resources import nxd_training_config
from neurondeploy.resources.sagemaker_compile import DEFAULT_COMPILE_INSTANCE
from neurondeploy.resources.sagemaker_training import to_cmd_args
from neurondeploy.specs import InferenceSpec, LoadedSpec

NEW_ACCOUNTS = "new accounts have 0"


def before_apply(loaded: LoadedSpec) -> list[str]:
    spec = loaded.spec
    lines = _artifact(loaded) if isinstance(spec, InferenceSpec) else []
    if getattr(spec, "engine", None) == "nxd-training":
        lines.append(_nxd_training_launch(spec))
    command = "apply" if isinstance(spec, InferenceSpec) else "train"
    for need in quota_needs(spec):
        lines.append(
            f"Service Quotas {need.describe()} in {spec.region}: this plan needs {need.need} {need.unit} "
            f"({need.counted}); {NEW_ACCOUNTS}: {command} checks it first and refuses below"
        )
    return lines


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


def _job_line(what: str, instance_type: str, file: str, region: str) -> list[str]:
    instance = catalog.get_instance(instance_type)
    price = catalog.price_per_hour(instance, platform="sagemaker")
    cost = f"${price:,.2f}/hour while it runs" if price is not None else "no ml.* price catalogued for it"
    return [
        f"{what}: `neurondeploy compile {file} --remote` runs a SageMaker job on {instance_type} ({cost}; it shows "
        "the price and asks first) and stores it in the compile cache, where apply finds it",
        f'Service Quotas "{sagemaker_quota_name(instance, "training")}" (sagemaker) in {region}: that job needs 1 '
        f"instance; {NEW_ACCOUNTS}",
    ]


def _compiled_at_start(loaded: LoadedSpec) -> list[str]:
    """A container that compiles the model when it starts (vllm-neuron): compile --remote builds its artifacts
    first, or the spec lets it compile at start."""
    spec = loaded.spec
    try:
        host = llm_compile_host(spec, model_architecture(loaded))
    except PlanError:
        host = None  # check_sagemaker_endpoint's findings say why
    lines = _job_line("the compiled model", host.instance_type, loaded.source.file, spec.region) if host else []
    if spec.deployment.container.compile_at_start:
        return [
            *lines,
            f"without it, {spec.container.name} compiles the model with NxD Inference when the endpoint starts, "
            f"within the {spec.deployment.health_check_timeout_s} s startup health check (compile_at_start)",
        ]
    return [*lines, "without it apply refuses (or set deployment.container.compile_at_start: true)"]


def _artifact(loaded: LoadedSpec) -> list[str]:
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
        return _job_line("the exported model", host.instance_type, file, spec.region)
    target = artifact_target(spec)
    if target.runtime != "neuron":
        return []
    upload = (
        "apply uploads model.tar.gz (the artifact, and code/ with neurondeploy's wheel for the serving image) to the "
        "shared bucket (below)"
        if spec.deployment.platform == "sagemaker"
        else "apply uploads the artifact and neurondeploy's wheel to the shared bucket (below); the instances "
        "download them at boot"
    )
    if importlib.util.find_spec("torch_neuronx") is not None:
        return [
            f"the Neuron artifact: compiled here (neuronx-cc of SDK {target.neuron_sdk}) or found in the cache",
            upload,
        ]
    what = (
        f"the Neuron artifact (NEFFs for {target.target}, SDK {target.neuron_sdk}): this machine has no Neuron SDK, "
        "so apply deploys only one compile --remote made"
    )
    return [*_job_line(what, DEFAULT_COMPILE_INSTANCE, file, spec.region), upload]
