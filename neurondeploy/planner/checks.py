"""Semantic checks that need the catalogue: instance, region, SDK lifecycle, parallel layout, memory fit.

Each check takes the loaded spec and returns findings; each finding names the field it is about, so the
CLI prints ``file:line: field: message (fix: ...)`` exactly like a schema error.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from neurondeploy import catalog
from neurondeploy.errors import CatalogError, NeurondeployError, PlanError, SpecError
from neurondeploy.planner import sizing, training_memory
from neurondeploy.resources import nxd_training_config
from neurondeploy.resources.precompiled import load_budget
from neurondeploy.resources.release import (
    TRAINING_DLC,
    WRAPPER_BUILD,
    deployment_release,
    release_runtime,
    wrapper_base,
)
from neurondeploy.resources.sagemaker_endpoint import volume_for
from neurondeploy.specs import InferenceSpec, LoadedSpec, Spec, TrainingSpec
from neurondeploy.specs.inference import (
    MAX_STARTUP_S,
    PACKAGE_PREFIX,
    ModelArchitecture,
    PackageNotInstalled,
    local_path,
)
from neurondeploy.user_files import read_user_file


@dataclass
class Finding:
    level: str  # "error" | "warning"
    field: str  # dotted path into the spec
    message: str
    hint: str | None = None
    line: int | None = None
    file: str | None = None

    def one_line(self) -> str:
        where = (f"{self.file}:{self.line}: " if self.line else f"{self.file}: ") if self.file else ""
        text = f"{where}{self.field}: {self.message}" + (f" (fix: {self.hint})" if self.hint else "")
        return " ".join(text.split())


# The first line of the reference training script (neurondeploy/training/reference/train.py).
REFERENCE_SCRIPT_MARKER = "neurondeploy reference training script"


def error(field: str, message: str, hint: str | None = None) -> Finding:
    return Finding("error", field, message, hint)


def warning(field: str, message: str, hint: str | None = None) -> Finding:
    return Finding("warning", field, message, hint)


def instance_of(spec: Spec) -> catalog.InstanceType:
    return catalog.get_instance(spec.instance_type)


def serving_backend(spec: InferenceSpec) -> str:
    """Which runtime shards the model: our server runs torch_neuronx.trace artifacts (one replica per core);
    the Hugging Face LLM containers run NxD Inference."""
    return spec.container.runtime


def model_architecture(loaded: LoadedSpec) -> ModelArchitecture | None:
    spec = loaded.spec
    if spec.kind == "training":
        return spec.architecture
    if spec.model.architecture:
        return spec.model.architecture
    if spec.model.source_kind == "hf-directory":
        directory = _readable_model_path(loaded)
        if directory is not None and (directory / "config.json").is_file():
            return sizing.architecture_from_config(directory)
    return None


def resolve_model_path(loaded: LoadedSpec) -> Path:
    return loaded.spec.model.resolved_path(loaded.base_dir)


def _readable_model_path(loaded: LoadedSpec) -> Path | None:
    """The model path where there is one to read; None for a pkg:// naming no package directory, which
    check_model_path reports."""
    try:
        return resolve_model_path(loaded)
    except SpecError:
        return None


# --- the checks ------------------------------------------------------------------------------------------


def check_instance(loaded: LoadedSpec) -> Iterable[Finding]:
    spec = loaded.spec
    field = spec.instance_type_field
    try:
        instance = instance_of(spec)
    except CatalogError as exc:
        yield error(field, exc.message, exc.hint)
        return
    if instance.compile_target is None:
        yield error(
            field,
            f"{instance.name} is Inferentia 1 (NeuronCore-v1, Neuron SDK 1.x / torch-neuron), which neurondeploy does not target",
            "use an inf2 type, e.g. inf2.xlarge",
        )
        return
    yield from _INSTANCE_USE[spec.kind, spec.platform](spec, instance, field)
    if spec.region not in instance.regions:
        yield error(
            field,
            f"{instance.name} is not offered in {spec.region}",
            f"use a region where it is, e.g. {', '.join(instance.regions[:4])}",
        )


def _training_instance(spec: TrainingSpec, instance: catalog.InstanceType, field: str) -> Iterable[Finding]:
    if instance.family.startswith("inf"):
        yield error(
            field,
            f"{instance.name} is an inference chip; SageMaker has no ml.{instance.name} training type",
            "train on trn1.2xlarge, trn1.32xlarge or trn1n.32xlarge",
        )
    elif not instance.sagemaker_training:
        yield error(
            field, f"ml.{instance.name} is not a SageMaker training instance type", "use trn1.2xlarge or trn1.32xlarge"
        )
    if spec.instance_count > 1 and instance.efa_devices == 0:
        yield error(
            "instance_count",
            f"multi-node training needs EFA, which {instance.name} does not have",
            "use trn1.32xlarge or trn1n.32xlarge for more than one instance",
        )


def _endpoint_instance(spec: InferenceSpec, instance: catalog.InstanceType, field: str) -> Iterable[Finding]:
    if not instance.sagemaker_endpoint:
        yield error(
            field, f"ml.{instance.name} is not a SageMaker endpoint instance type", "use an inf2 type or platform ec2"
        )


def _ec2_instance(spec: InferenceSpec, instance: catalog.InstanceType, field: str) -> Iterable[Finding]:
    return ()


# What an instance must offer for each (kind, platform).
_INSTANCE_USE = {
    ("training", "sagemaker"): _training_instance,
    ("inference", "sagemaker"): _endpoint_instance,
    ("inference", "ec2"): _ec2_instance,
}


def check_sdk(loaded: LoadedSpec) -> Iterable[Finding]:
    """One Neuron SDK release runs the whole deployment (resources.release): a pin lacking a piece, or a platform
    whose pieces no release has together, is refused here."""
    try:
        deployment_release(loaded.spec)
    except CatalogError as exc:
        yield error("neuron_sdk_version", exc.message, exc.hint)


def check_image(loaded: LoadedSpec) -> Iterable[Finding]:
    """The catalogue image of the deployment's release (or of the pin, for an image whose SDK the sources do not
    give) is published in the spec's region."""
    spec = loaded.spec
    purpose, field, override = _IMAGE_CHOICE[spec.kind](spec)
    if override or (spec.kind == "inference" and spec.container.ours and spec.deployment.platform == "ec2"):
        return  # the operator's image; the instances' DLAMI
    try:
        release = deployment_release(spec)
    except CatalogError:
        return  # check_sdk says why
    try:
        catalog.neuron_image(purpose, spec.region, release.sdk if release.pieces else spec.neuron_sdk_version)
    except CatalogError as exc:
        yield error(field, exc.message, exc.hint)


def _training_image(spec: TrainingSpec) -> tuple[str, str, str | None]:
    return "training", "image_uri", spec.image_uri


def _inference_image(spec: InferenceSpec) -> tuple[str, str, str | None]:
    return spec.container.image_purpose, "deployment.container.image_uri", spec.deployment.container.image_uri


# (catalogue image purpose, spec field, the spec's own image) for each kind.
_IMAGE_CHOICE = {"training": _training_image, "inference": _inference_image}


def check_compile_target(loaded: LoadedSpec) -> Iterable[Finding]:
    spec = loaded.spec
    if spec.compile.target is None:
        return
    try:
        instance = instance_of(spec)
    except CatalogError:
        return
    # inf2, trn1 and trn1n share NeuronCore-v2 and NEFFs (optimum-neuron normalises them to trn1); trn2 does not.
    generation = {"inf2": "v2", "trn1": "v2", "trn1n": "v2", "trn2": "v3"}
    if instance.compile_target and generation[spec.compile.target] != generation.get(instance.compile_target):
        yield error(
            "compile.target",
            f"target {spec.compile.target} builds NEFFs that do not load on {instance.name}",
            f"remove compile.target or set it to {instance.compile_target}",
        )


def check_parallel_layout(loaded: LoadedSpec) -> Iterable[Finding]:
    spec = loaded.spec
    try:
        instance = instance_of(spec)
    except CatalogError:
        return
    if instance.compile_target is None:
        return
    if spec.kind == "inference":
        backend, tp, field = serving_backend(spec), spec.deployment.tensor_parallel, "deployment.tensor_parallel"
    else:
        backend, tp, field = "training", spec.distribution.tensor_parallel, "distribution.tensor_parallel"
    legal = catalog.legal_tp_degrees(instance, backend)
    offer = list(legal)  # the one list every TP refusal gives: for training, what the model also splits into
    if spec.kind == "training" and spec.architecture is not None:
        offer = training_tp_choices(spec.architecture, legal, replicates_kv=spec.engine == "nxd-training") or offer
    if tp > instance.neuron_cores:
        yield error(
            field,
            f"TP={tp} is more than the {instance.neuron_cores} NeuronCores of {instance.name}",
            f"use one of {offer} or a larger instance",
        )
    elif tp not in legal:
        why = (
            "our server runs one traced replica per NeuronCore"
            if backend == "trace"
            else f"{backend} supports these degrees on {instance.family}"
        )
        yield error(field, f"TP={tp} is not legal on {instance.name} ({why})", f"use one of {offer}")
    if spec.kind == "training":
        yield from _training_layout(spec, instance)


def _training_layout(spec: TrainingSpec, instance: catalog.InstanceType) -> Iterable[Finding]:
    d = spec.distribution
    total = instance.neuron_cores * spec.instance_count
    model_parallel = d.tensor_parallel * d.pipeline_parallel
    if d.data_parallel is None:
        if total % model_parallel:
            yield error(
                "distribution.pipeline_parallel",
                f"TP×PP = {model_parallel} does not divide the {total} NeuronCores",
                "pick TP and PP whose product divides the total cores",
            )
    elif model_parallel * d.data_parallel != total:
        yield error(
            "distribution.data_parallel",
            f"TP×PP×DP = {d.tensor_parallel}×{d.pipeline_parallel}×{d.data_parallel} = {model_parallel * d.data_parallel}, "
            f"but {spec.instance_count}× {instance.name} has {total} NeuronCores",
            f"set data_parallel to {total // model_parallel}"
            if total % model_parallel == 0
            else "remove data_parallel",
        )
    # NxD Training cuts each step into global_batch_size / (micro_batch_size × DP) micro-batches itself.
    if spec.engine == "reference" and d.pipeline_parallel > 1 and d.microbatches < d.pipeline_parallel:
        yield warning(
            "distribution.microbatches",
            f"{d.microbatches} micro-batches for {d.pipeline_parallel} stages leaves stages idle",
            f"use at least {d.pipeline_parallel}",
        )


def _with_instance_and_architecture(fit: Callable[..., Iterable[Finding]]) -> Callable[[LoadedSpec], Iterable[Finding]]:
    """A fit check of (spec, instance, architecture), run only when both are known (when not, check_instance and
    the model checks report why)."""

    def check(loaded: LoadedSpec) -> Iterable[Finding]:
        try:
            instance = instance_of(loaded.spec)
            arch = model_architecture(loaded)
        except (CatalogError, PlanError):
            return ()
        if arch is None or instance.compile_target is None:
            return ()
        return fit(loaded.spec, instance, arch)

    check.__name__ = fit.__name__
    return check


@_with_instance_and_architecture
def check_inference_fit(
    spec: InferenceSpec, instance: catalog.InstanceType, arch: ModelArchitecture
) -> Iterable[Finding]:
    tp, backend = spec.deployment.tensor_parallel, serving_backend(spec)
    quantization = spec.model.quantization
    supported = catalog.sharding_rules(backend).weight_quantization
    if quantization != "none" and quantization not in supported:
        yield error(
            "model.quantization",
            f"{backend} does not load {quantization} weights (it loads: {', '.join(supported) or 'none'})",
            "remove model.quantization",
        )
        return
    batch, sequence = max(spec.compile.batch_sizes), max(spec.compile.sequence_lengths)
    dtype = spec.model.dtype
    estimate = sizing.inference_memory(
        arch, instance.hbm_per_core_gib, tp, batch, sequence, dtype, backend=backend, quantization=quantization
    )
    for index, note in enumerate(estimate.notes):
        padded_first = index == 0 and estimate.padded_heads != arch.attention_heads
        yield warning(
            "deployment.tensor_parallel",
            f"{note} (counted in the memory estimate)",
            _unpadded_tp_hint(arch, instance, backend) if padded_first else None,
        )
    if not estimate.fits:
        platform = spec.deployment.platform
        options = sizing.size_options(
            arch, batch, sequence, dtype, backend, spec.region, quantization, platform, not spec.container.ours
        )
        best = sizing.recommended(options) or next(iter(options), None)
        fix = (  # what `size` recommends: not a fit that validate would then warn about
            f"try {best.instance} with TP={best.tensor_parallel}"
            if best
            else "reduce batch size, sequence length or dtype; no instance fits this"
        )
        yield error(
            "deployment.instance_type",
            f"does not fit: needs {estimate.per_core_gib:.1f} GiB per NeuronCore (weights {estimate.weights_gib:.1f} GiB + "
            f"KV cache {estimate.kv_cache_gib:.1f} GiB over TP={tp}, + {estimate.headroom_gib:.1f} GiB headroom), "
            f"{instance.name} has {estimate.available_per_core_gib:g} GiB",
            fix,
        )
    if sizing.host_too_small(instance, arch):
        yield warning(
            "deployment.instance_type",
            f"{instance.name} has {instance.host_memory_gib} GiB host RAM; loading a 7B-class model there often fails",
            "deploy a precompiled model or use inf2.8xlarge or larger",
        )
    idle = 0 if spec.container.ours else sizing.idle_cores(instance, tp, backend)
    if idle:
        full = max(catalog.legal_tp_degrees(instance, backend))
        yield warning(
            "deployment.tensor_parallel",
            f"{spec.container.name} runs one server per instance, on TP={tp} of {instance.name}'s "
            f"{instance.neuron_cores} NeuronCores: {idle} are paid for and idle",
            f"set tensor_parallel: {full} to use them (more HBM for the KV cache), or pick a smaller instance",
        )


def _unpadded_tp_hint(arch: ModelArchitecture, instance: catalog.InstanceType, backend: str) -> str | None:
    exact = [d for d in catalog.legal_tp_degrees(instance, backend) if arch.attention_heads % d == 0]
    return f"TP in {exact} needs no padding" if exact else None


@_with_instance_and_architecture
def check_training_fit(
    spec: TrainingSpec, instance: catalog.InstanceType, arch: ModelArchitecture
) -> Iterable[Finding]:
    d = spec.distribution
    replicates_kv = spec.engine == "nxd-training"  # its kv_replicator copies KV heads up to TP
    legal = catalog.legal_tp_degrees(instance, "training")
    layout_errors = list(
        _model_split(arch, d.tensor_parallel, d.pipeline_parallel, replicates_kv=replicates_kv, legal=legal)
    )
    yield from layout_errors
    if any(finding.level == "error" for finding in layout_errors):
        return  # the memory of a split that cannot happen says nothing
    figures = spec.hyperparameters
    if any(n in figures and training_memory.positive_int(figures[n]) is None for n in training_memory.LOAD_FIGURES):
        return  # sized with a figure that is no number, it would say nothing; check_training_figures reports it
    total = instance.neuron_cores * spec.instance_count
    dp = d.data_parallel or max(1, total // (d.tensor_parallel * d.pipeline_parallel))
    stages = d.pipeline_parallel if spec.engine == "nxd-training" else None  # NxD Training's 1F1B schedule
    load = training_memory.training_load(spec.hyperparameters, dp, d.microbatches, one_f_one_b_stages=stages)
    selective = d.selective_checkpointing
    layout = training_memory.TrainingLayout(
        d.tensor_parallel,
        d.pipeline_parallel,
        dp,
        d.zero1,
        d.precision,
        d.gradient_checkpointing and not selective,
        d.sequence_parallel,
        frozenset(d.recompute) if selective else frozenset(),
    )
    estimate = training_memory.training_memory(arch, instance.hbm_per_core_gib, layout, load)
    for note in estimate.notes:
        yield warning("hyperparameters", note)
    if estimate.fits:
        yield Finding(
            "info",
            "distribution",
            f"fits: {estimate.per_core_gib:.1f} GiB per NeuronCore of {estimate.available_per_core_gib:g} GiB "
            f"({estimate.activations_gib:.1f} GiB activations, {estimate.headroom_gib:.1f} GiB headroom; TP="
            f"{d.tensor_parallel}, PP={d.pipeline_parallel}, DP={dp})",
        )
        return
    state = estimate.per_core_gib - estimate.activations_gib - estimate.headroom_gib
    where = (
        f"{estimate.activations_gib:.1f} GiB activations ({load.micro_batch} × {load.sequence_length} tokens per "
        f"micro-batch, gradient checkpointing {'on' if d.gradient_checkpointing else 'off'})"
        if load
        else "no activations counted"
    )
    yield error(
        "distribution.tensor_parallel",
        f"does not fit: needs {estimate.per_core_gib:.1f} GiB per NeuronCore: {state:.1f} GiB weights, gradients and "
        f"optimizer state (TP={d.tensor_parallel}, PP={d.pipeline_parallel}, ZeRO-1 {'on' if d.zero1 else 'off'}) + "
        f"{where} + {estimate.headroom_gib:.1f} GiB headroom; {instance.name} has {estimate.available_per_core_gib:g} GiB",
        training_memory.first_fix(arch, instance.hbm_per_core_gib, layout, load),
    )


def check_training_engine(loaded: LoadedSpec) -> Iterable[Finding]:
    """What only NxD Training does is refused for the reference script, which would run without it; for NxD
    Training, what its launch and config need (resources.nxd_training_config)."""
    spec, d = loaded.spec, loaded.spec.distribution
    if spec.engine == "nxd-training":
        yield from _nxd_training_launch(spec)
        yield from _nxd_training_examples_version(loaded)
        return
    fix = "remove it, or set engine: nxd-training"
    if d.precision.startswith("bf16-mixed"):
        yield error(
            "distribution.precision",
            f"{d.precision} is NxD Training's mixed precision; the reference training script trains fp32, "
            "bf16-autocast or bf16-stochastic-rounding",
            "choose one of those, or set engine: nxd-training",
        )
    if d.sequence_parallel:
        yield error("distribution.sequence_parallel", "the reference training script does not split sequences", fix)
    if d.selective_checkpointing:
        yield error(
            "distribution.checkpoint_granularity",
            "the reference training script checkpoints whole layers (full)",
            fix.replace("remove it", "set it to full"),
        )


NXDT_VERSION_FILE = "src/neuronx_distributed_training/_version.py"  # the clone's version (its setup.py reads it)
VERSION_LINE = re.compile(r"__version__\s*=\s*[\"']([^\"']+)[\"']")


def _nxd_training_examples_version(loaded: LoadedSpec) -> Iterable[Finding]:
    """The examples source_dir holds run against the NxD Training library the training image ships: a clone of
    another version is said, with the release whose image matches it. GitHub's newest examples are 1.6.0
    (aws-neuron/neuronx-distributed-training 9169aa03, "Neuron SDK Release 2.26.0 changes") while the images from
    SDK 2.27.0 on ship 1.7.0 (data/dlc_releases.yaml, from their Dockerfiles)."""
    spec = loaded.spec
    version_file = spec.resolved_source_dir(loaded.base_dir).parent / NXDT_VERSION_FILE
    try:
        text = read_user_file(version_file, max_bytes=4096, what="a version file", fix="check source_dir").decode(
            errors="replace"
        )
        found = VERSION_LINE.search(text)
        image = deployment_release(spec).piece("training image")
    except (OSError, NeurondeployError):
        return  # no clone here yet (check_entry_script says so), an odd file, or check_sdk says why no release
    row = next(
        (r for r in catalog.dlc_releases() if image and (r.repository, r.tag) == (TRAINING_DLC, image.name)), None
    )
    shipped = row.neuronx_distributed_training if row else None
    if not found or not shipped or found[1] == shipped:
        return
    matching = [
        r.sdk
        for r in catalog.dlc_releases()
        if r.repository == row.repository
        and r.neuronx_distributed_training == found[1]
        and catalog.sagemaker_pull_problem(r.repository, r.tag) is None
    ]
    pin = f"pin neuron_sdk_version: {matching[-1]} (its image ships {found[1]})" if matching else ""
    yield warning(
        "source_dir",
        f"the NxD Training examples in source_dir are {found[1]} ({version_file}) and the training image of SDK "
        f"{row.sdk} ships NxD Training {shipped}: the orchestrator and configs of one version run on the library of "
        "the other",
        f"{pin + ', or ' if pin else ''}check out the examples of NxD Training {shipped}",
    )


def _nxd_training_launch(spec) -> Iterable[Finding]:
    if spec.entry_point != nxd_training_config.ENTRY_POINT:
        yield error(
            "entry_point",
            f"engine nxd-training runs NxD Training's {nxd_training_config.ENTRY_POINT}, not {spec.entry_point}",
            f"set entry_point: {nxd_training_config.ENTRY_POINT} and source_dir to NxD Training's examples directory",
        )
    reported = {  # check_training_figures' own lines: one line per problem
        f"hyperparameters.{name}"
        for name in training_memory.LOAD_FIGURES
        if name in spec.hyperparameters and training_memory.positive_int(spec.hyperparameters[name]) is None
    }
    for field, message, fix in nxd_training_config.config_problems(spec):
        if field not in reported:
            yield error(field, message, fix)


def check_training_figures(loaded: LoadedSpec) -> Iterable[Finding]:
    """The hyperparameters the fit check reads are positive whole numbers when given: a 0 or a negative one would be
    read as absent, and the memory estimate would pass a job that the script then runs with it."""
    for name in training_memory.LOAD_FIGURES:
        value = loaded.spec.hyperparameters.get(name)
        if value is not None and training_memory.positive_int(value) is None:
            yield error(
                f"hyperparameters.{name}",
                f"is {value!r}; it must be a positive whole number (the fit check sizes activations with it, and the "
                "training script trains with it)",
                f"set {name} to the value the script should train with, or remove it",
            )


def _splits(arch: ModelArchitecture, tp: int, replicates_kv: bool) -> bool:
    kv = arch.key_value_heads
    whole = arch.attention_heads % tp == 0 and arch.dense_intermediate_size % tp == 0
    return whole and (kv % tp == 0 or (replicates_kv and tp % kv == 0))


def training_tp_choices(arch: ModelArchitecture, legal: Iterable[int], *, replicates_kv: bool) -> list[int]:
    """The TP degrees both the instance's Neuron stack takes (``legal``) and the model splits into: the one list a
    TP refusal offers, whichever check refuses it."""
    return [tp for tp in legal if _splits(arch, tp, replicates_kv)]


def _model_split(
    arch: ModelArchitecture, tp: int, pp: int, *, replicates_kv: bool = False, legal: Iterable[int] = ()
) -> Iterable[Finding]:
    """Whether the model splits as the layout asks, before a job finds out on every rank: Megatron tensor
    parallelism gives each rank whole query heads and an equal share of the MLP's columns, each pipeline stage at
    least one layer (the reference script's own check, neurondeploy/training/reference/tiny_lm.py layout_problems,
    says the same at the job's start). KV heads split whole too, or, above their count, are replicated by NxD's GQA
    layers, which the reference script does not do."""
    kv, intermediate = arch.key_value_heads, arch.dense_intermediate_size
    candidates = list(legal) or range(1, arch.attention_heads + 1)
    choices = training_tp_choices(arch, candidates, replicates_kv=replicates_kv)
    uneven = [
        f"{name} {value}"
        for name, value in (("attention_heads", arch.attention_heads), ("intermediate_size", intermediate))
        if value % tp
    ]
    if uneven:
        yield error(
            "distribution.tensor_parallel",
            f"TP={tp} cannot split the model: architecture {' and '.join(uneven)} must divide by it (each rank "
            "holds whole heads and an equal share of the MLP)",
            f"use one of {choices}",
        )
    elif kv % tp and tp % kv:
        yield error(
            "distribution.tensor_parallel",
            f"TP={tp} cannot split architecture kv_heads {kv}: neither divides the other",
            f"use one of {choices}",
        )
    elif kv % tp and not replicates_kv:
        yield warning(
            "distribution.tensor_parallel",
            f"TP={tp} is above kv_heads {kv}: each rank needs KV heads replicated (NxD's GQA layers do it); the "
            "reference training script splits whole KV heads and refuses this layout",
            f"with the reference script, use TP ≤ {kv}",
        )
    if arch.layers < pp:
        yield error(
            "distribution.pipeline_parallel",
            f"PP={pp} stages for {arch.layers} layers: each stage needs at least one",
            f"use PP ≤ {arch.layers}",
        )


def check_sagemaker_host(loaded: LoadedSpec) -> Iterable[Finding]:
    """The container's Neuron runtime against SageMaker's host driver: a runtime newer than any AWS itself runs on
    that host is said (catalog.untested_pairing), with the ways to a pairing that is known to work."""
    spec = loaded.spec
    if spec.deployment.platform != "sagemaker":
        return
    try:
        release = deployment_release(spec)
    except CatalogError:
        return  # check_sdk says why
    runtime = release_runtime(release.sdk)
    host = catalog.inference_ami(spec.deployment.host_image)
    untested = catalog.untested_pairing(runtime, host) if runtime else None
    if untested is None:
        return
    proven = catalog.newest_proven_sdk(host)
    older = (
        f"pin neuron_sdk_version: {proven} (runtime ≤ {host.proven_runtime}) where this container has it, "
        if proven
        else ""
    )
    llm = ", or the image AWS runs there (container kind hf-vllm)" if spec.container.llm else ""
    yield warning(
        "deployment.host_image",
        f"{untested} (Neuron SDK {release.sdk})",
        f"{older}or deploy on EC2 (deployment.platform: ec2), whose Neuron DLAMI carries the driver of its own "
        f"SDK{llm}",
    )


def check_sagemaker_endpoint(loaded: LoadedSpec) -> Iterable[Finding]:
    spec = loaded.spec
    dep = spec.deployment
    try:
        instance = instance_of(spec)
    except CatalogError:
        return
    if dep.volume_gib is not None and instance.nvme_instance_storage:
        yield error(
            "deployment.volume_gib",
            f"{instance.name} has NVMe instance storage; SageMaker refuses VolumeSizeInGB for it",
            "remove deployment.volume_gib",
        )
    if dep.platform == "sagemaker" and dep.volume_gib is not None and dep.volume_gib > 512:
        yield error(
            "deployment.volume_gib",
            f"{dep.volume_gib} GiB is above SageMaker's 512 GiB endpoint volume limit",
            "use at most 512",
        )
    if dep.autoscaling and not dep.autoscaling.min_instances <= dep.instance_count <= dep.autoscaling.max_instances:
        yield error(
            "deployment.instance_count",
            f"instance_count {dep.instance_count} is outside autoscaling "
            f"{dep.autoscaling.min_instances}-{dep.autoscaling.max_instances}",
            "make instance_count lie within min and max",
        )
    if spec.container.buckets == "one" and len(spec.compile.buckets) > 1:
        yield error(
            "compile",
            "the Hugging Face LLM containers serve one static (batch size, sequence length); "
            f"{len(spec.compile.buckets)} buckets were given",
            "list one batch size and one sequence length",
        )
    frozen = None if spec.container.ours else catalog.frozen_at(spec.container.image_purpose)
    if frozen is not None:
        maintained = [
            k for k in catalog.llm_container_kinds() if not catalog.frozen_at(catalog.container_kind(k).image_purpose)
        ]
        yield warning(
            "deployment.container.kind",
            f"container {spec.container.name}'s images stop at Neuron SDK {frozen[0]}: no image for a later release "
            f"is coming ({frozen[1]})",
            f"container kind {' or '.join(maintained)} runs AWS's own, maintained vLLM Neuron image",
        )
    if dep.platform == "sagemaker" and spec.container.wrapper == "required" and not dep.container.image_uri:
        yield from _wrapper_needed(spec)
    if spec.container.compiles_at_start:  # on EC2 too: its instances start the same server
        yield from _compile_at_start_advice(loaded)
    elif dep.platform == "sagemaker" and not spec.container.ours:
        yield from _precompile_advice(loaded)


def _wrapper_needed(spec: InferenceSpec) -> Iterable[Finding]:
    """SageMaker pulls a model's image from a private ECR registry; this kind's image is on a public one."""
    try:
        base = wrapper_base(spec)
    except CatalogError:
        return  # check_sdk says why
    kind = spec.container
    yield error(
        "deployment.container.image_uri",
        f"container {kind.name} runs on SageMaker from the account's own ECR: its image {base} is on a public "
        "registry, which SageMaker does not pull from",
        f"build the wrapper (docker build -f {WRAPPER_BUILD} --build-arg BASE_IMAGE={base} --build-arg "
        f"HF_ENTRYPOINT='{kind.wrapper_entrypoint}' -t ACCOUNT.dkr.ecr.{spec.region}.amazonaws.com/"
        f"neurondeploy-{kind.name}:TAG .), push it and set deployment.container.image_uri to it",
    )


def _compile_at_start_advice(loaded: LoadedSpec) -> Iterable[Finding]:
    """vllm-neuron compiles the model through NxD Inference when it starts unless NEURON_COMPILED_ARTIFACTS names
    compiled ones (vllm_neuron/worker/neuronx_distributed_model_loader.py). compile --remote builds them; without
    them the spec must agree to the compile at start, which the startup health check must outlast."""
    spec = loaded.spec
    named = spec.model.hf_model_id or "the model"
    timeout = spec.deployment.health_check_timeout_s
    built = _loading_estimate(loaded, "built")
    run_first = f"run `neurondeploy compile {loaded.source.file} --remote` before apply"
    if not spec.deployment.container.compile_at_start:
        yield warning(
            "deployment.container",
            f"apply refuses to deploy {named} until compile --remote has built its compiled artifacts "
            f"({spec.container.name} would compile it when the endpoint starts){built}",
            f"{run_first}, or set deployment.container.compile_at_start: true to let it compile at start",
        )
    elif timeout < MAX_STARTUP_S:
        yield warning(
            "deployment.health_check_timeout_s",
            f"without compile --remote's artifacts the container compiles {named} with NxD Inference when it "
            f"starts, within the {timeout} s startup health check: an 8B model's compile takes tens of minutes, and "
            "an endpoint whose compile outlasts the check fails",
            f"{run_first}, or set deployment.health_check_timeout_s: {MAX_STARTUP_S} (the most SageMaker allows)",
        )


def _loading_estimate(loaded: LoadedSpec, verb: str) -> str:
    """ "; <verb>, apply points the endpoint at it in S3 and loading needs about N s (why)", from the weights'
    size (the architecture's parameters at the spec's dtype); empty when the architecture is unknown."""
    arch = model_architecture(loaded)
    if arch is None:
        return ""
    weights = sizing.parameter_count(arch) * sizing.DTYPE_BYTES[loaded.spec.model.dtype]
    budget, why = load_budget(int(weights), volume_for(loaded.spec, weights / 2**30))
    return f"; {verb}, apply points the endpoint at it in S3 and loading needs about {budget} s ({why})"


def _precompile_advice(loaded: LoadedSpec) -> Iterable[Finding]:
    """What an LLM endpoint starts from. Without a `compile --remote` export, the Hugging Face container starts only
    from a compiled configuration of the model at these shapes in the Hugging Face Neuron cache, and refuses to
    compile one itself unless told to (optimum-neuron optimum/commands/neuron/serve.py: "If set, export the model
    even if no cached configuration exists", --allow_non_cached_model; its vLLM loader raises "No cached version
    found" otherwise). With one, apply loads it from S3 and sets the budget it derives."""
    exported = _loading_estimate(loaded, "exported")
    if not exported:
        return
    model = loaded.spec.model
    named = model.hf_model_id or f"the model at {model.path or model.s3_uri or f'training job {model.training_job}'}"
    if not loaded.spec.deployment.container.start_from_neuron_cache:
        yield warning(
            "deployment.container",
            f"apply refuses to deploy {named} until compile --remote has exported it at these shapes (the container "
            "does not compile on the instance, and starts from the Hugging Face Neuron cache only if that has it)"
            + exported,
            f"run `neurondeploy compile {loaded.source.file} --remote` before apply",
        )
        return
    yield warning(
        "deployment.health_check_timeout_s",
        f"without a model exported by compile --remote the container starts only if the Hugging Face Neuron cache "
        f"(aws-neuron/optimum-neuron-cache) has {named} compiled at these shapes, and "
        "refuses to start otherwise (it does not compile on the instance without --allow_non_cached_model)" + exported,
        f"run `neurondeploy compile {loaded.source.file} --remote` before apply",
    )


SYSTEM_ROOTS = (Path("/proc"), Path("/sys"), Path("/dev"))  # pseudo-files: endless, blocking or the machine's own
# Never a source tree, even with source_dir_outside_project: train would pack and upload the machine's own files.
NEVER_SOURCE = (Path("/etc"), Path("/usr"), Path("/boot"), Path("/var"), Path("/bin"), Path("/sbin"), Path("/lib"))


def is_within(path: Path, roots: Iterable[Path]) -> bool:
    """``path`` is one of ``roots`` or lies under one (both resolved by the caller)."""
    return any(path == root or root in path.parents for root in roots)


def project_directory(spec_dir: Path) -> Path:
    """The project a spec belongs to: the root of the git work tree holding it (``.git``, a directory or a
    worktree's file), else the spec file's own directory."""
    spec_dir = spec_dir.resolve()
    return next((d for d in (spec_dir, *spec_dir.parents) if (d / ".git").exists()), spec_dir)


def _place_problem(
    loaded: LoadedSpec, field: str, given: str, what_happens: str, fix: str, *, outside_allowed: bool = False
) -> tuple[str, str] | None:
    """(what is wrong, fix) when the local path ``given`` (relative to the spec, symlinks resolved) is the filesystem
    root or a system directory, or leaves the spec's project (its git work tree, else its directory) unless
    ``outside_allowed``; None when it stays in its place."""
    project = project_directory(loaded.base_dir)
    place = local_path(given, loaded.base_dir).resolve()
    if place == Path(place.anchor) or is_within(place, (*SYSTEM_ROOTS, *NEVER_SOURCE)):
        return f"{field} {given} is {place}, a system directory", fix
    if not is_within(place, (project,)) and not outside_allowed:
        return f"{field} {given} is {place}, outside the spec's project {project}; {what_happens}", fix
    return None


def source_dir_problem(loaded: LoadedSpec) -> tuple[str, str] | None:
    """(what is wrong, fix) when the training source_dir (symlinks resolved) leaves the spec's project without the
    opt-out, or is the filesystem root or a system directory; None when train may pack it."""
    spec = loaded.spec
    if spec.source_dir.startswith(PACKAGE_PREFIX):
        return None  # an installed package's own directory, shipped to be used (the spec refuses `..` in it)
    problem = _place_problem(
        loaded,
        "source_dir",
        spec.source_dir,
        "train would upload it",
        "move the spec next to its code, or set source_dir_outside_project: true if that tree is meant to ship",
        outside_allowed=spec.source_dir_outside_project,
    )
    if problem and "a system directory" in problem[0]:
        return problem[0], "point it at your training code"
    return problem


def channel_path_problem(loaded: LoadedSpec, channel: str) -> tuple[str, str] | None:
    """(what is wrong, fix) when input channel ``channel``'s local_path leaves the spec's project or is a system
    directory: `data` writes a dataset there and `train --local` reads it."""
    given = loaded.spec.inputs[channel].local_path
    if given is None:
        return None
    return _place_problem(
        loaded,
        f"inputs.{channel}.local_path",
        given,
        "`neurondeploy data` would write there",
        "give a directory inside the project, e.g. data/" + channel,
    )


def check_input_channels(loaded: LoadedSpec) -> Iterable[Finding]:
    for channel in loaded.spec.inputs:
        problem = channel_path_problem(loaded, channel)
        if problem:
            yield error(f"inputs.{channel}.local_path", *problem)


def _missing_entry_fix(spec: TrainingSpec) -> str:
    if spec.engine == "nxd-training":  # the SDK's recipe launch clones it the same way (sm_recipes/utils.py)
        return (
            "point source_dir at NxD Training's examples directory before `train` uploads it: git clone "
            "https://github.com/aws-neuron/neuronx-distributed-training, at the release the training image ships"
        )
    return "fix the path before `train` uploads source_dir"


def check_entry_script(loaded: LoadedSpec) -> Iterable[Finding]:
    spec = loaded.spec
    problem = source_dir_problem(loaded)
    if problem:
        yield error("source_dir", *problem)
        return
    try:
        source = spec.resolved_source_dir(loaded.base_dir)
    except SpecError as exc:  # a pkg:// naming no package directory
        yield error("source_dir", exc.message, exc.hint)
        return
    script = source / spec.entry_point
    if not script.is_file():
        yield warning("entry_point", f"{script} does not exist here", _missing_entry_fix(spec))
    elif (
        spec.engine == "reference"
        and spec.distribution.pipeline_parallel > 1
        and REFERENCE_SCRIPT_MARKER in script.read_text(errors="replace")[:200]
    ):
        # On Trainium the reference script shards with NxD's tensor-parallel layers and ZeRO-1; it has no pipeline
        # engine there, so the job would stop at start after the instances were paid for.
        yield error(
            "distribution.pipeline_parallel",
            f"pipeline_parallel {spec.distribution.pipeline_parallel}: the reference training script does not "
            "pipeline on Trainium (tensor parallel and ZeRO-1 run there, with NxD Core)",
            "set pipeline_parallel: 1 and give the cores to tensor_parallel and data_parallel "
            "(`train --local` still runs pipeline stages on the CPU), or use an NxD Training script",
        )


def check_model_path(loaded: LoadedSpec) -> Iterable[Finding]:
    """A model path is a model: a directory with a config.json, or a TorchScript file; never a device, a FIFO or a
    file of /proc, /sys or /dev (which compile would read forever or block on), and a pkg:// path stays inside its
    package."""
    spec = loaded.spec
    if spec.model.path:
        text = spec.model.path
        if text.startswith(PACKAGE_PREFIX) and ".." in Path(text[len(PACKAGE_PREFIX) :]).parts:
            yield error("model.path", f"{text} leaves its package", "name a directory inside the package")
            return
        try:
            path = resolve_model_path(loaded)
        except PackageNotInstalled as exc:  # as a path that does not exist here: compile needs it, plan does not
            yield warning("model.path", exc.message, f"{exc.hint}; compile needs it, plan does not")
            return
        except SpecError as exc:  # a pkg:// naming a module, not a package directory
            yield error("model.path", exc.message, exc.hint)
            return
        try:
            real = path.resolve()
        except (RuntimeError, OSError) as exc:  # a symlink loop: RuntimeError up to Python 3.12, OSError after
            yield error("model.path", f"{path} cannot be resolved ({exc})", "point it at a model directory or file")
            return
        if is_within(real, SYSTEM_ROOTS):
            yield error("model.path", f"{path} is a system pseudo-file ({real})", "give a model directory or file")
            return
        if not path.exists():
            yield warning("model.path", f"{path} does not exist on this machine", "compile needs it; plan does not")
        elif not (path.is_dir() or path.is_file()):
            yield error("model.path", f"{path} is not a regular file or directory", "give a model directory or file")
        elif spec.model.source_kind == "hf-directory" and not (path / "config.json").is_file():
            what = "a file" if path.is_file() else "a directory without config.json"
            if path.is_dir() and not spec.container.ours:
                # an LLM spec may name the directory a training run is still to fill: apply needs it, plan not
                yield warning("model.path", f"{path} is {what} yet", "train the model into it before apply")
                return
            yield error(
                "model.path",
                f"{path} is {what}, not a Hugging Face model directory",
                "give the directory holding config.json and the weights, or a TorchScript .pt file",
            )
        else:
            try:
                model_architecture(loaded)
            except PlanError as exc:
                yield error("model.path", exc.message, exc.hint)


# Each figure as the sizing reads it: an empty kv_heads is attention_heads, an empty intermediate_size 4 × hidden.
ARCHITECTURE_FIELDS = {
    "layers": lambda a: a.layers,
    "hidden_size": lambda a: a.hidden_size,
    "attention_heads": lambda a: a.attention_heads,
    "kv_heads": lambda a: a.key_value_heads,
    "vocab_size": lambda a: a.vocab_size,
    "intermediate_size": lambda a: a.dense_intermediate_size,
}


def check_architecture_agrees(loaded: LoadedSpec) -> Iterable[Finding]:
    """A spec's ``model.architecture`` beside a model directory with its own config.json: every figure the plan
    sizes, times and prices by comes from the architecture, so a copied template's 8B numbers over a 1 MB model
    would go unnoticed. They must agree; the error names what differs."""
    spec = loaded.spec
    if spec.kind != "inference" or spec.model.architecture is None or _model_config(loaded) is None:
        return
    try:
        own = sizing.architecture_from_config(resolve_model_path(loaded))
    except PlanError:
        return  # check_model_path reports an unreadable config
    given = spec.model.architecture
    differs = [
        f"{name} {value(given)} (config.json: {value(own)})"
        for name, value in ARCHITECTURE_FIELDS.items()
        if value(given) != value(own)
    ]
    if differs:
        yield error(
            "model.architecture",
            f"model.architecture is not the model at {spec.model.path}: {', '.join(differs)}; the plan would size, "
            "time and price the architecture's model",
            "remove model.architecture (the model's config.json describes it), or point model.path at the model "
            "it describes",
        )


def check_model_family(loaded: LoadedSpec) -> Iterable[Finding]:
    """A Hugging Face LLM container serves the model types its optimum-neuron registers for text-generation
    (data/images.yaml, read from optimum-neuron at the image's version); another type fails when the container
    loads it, after the endpoint was created. A warning, not a refusal: `apply --local`'s stand-in serves any
    causal LM (the train -> serve template's GPT-2 among them)."""
    spec = loaded.spec
    found = None if spec.kind != "inference" or spec.container.ours else _model_config(loaded)
    model_type = found[0].get("model_type") if found else None
    if not isinstance(model_type, str):
        return
    try:
        release = deployment_release(spec)
    except CatalogError:
        return  # check_sdk says why
    images = [  # the newest of the release's tags: the one the deployment runs (resources.release)
        tag
        for tag in catalog.known_tags(spec.container.image_purpose)
        if tag.sdk == release.sdk and tag.text_generation_models
    ]
    image = images[-1] if images else None
    if image is not None and model_type not in image.text_generation_models:
        yield warning(
            "model.path",
            f"the {spec.container.name} image {image.tag} serves text-generation models of type "
            f"{', '.join(image.text_generation_models)} (its optimum-neuron's own list); the model at "
            f"{spec.model.path} is {model_type}, which its container refuses to load on AWS",
            "serve a model of one of those types there (apply --local's stand-in serves it either way)",
        )


def _model_config(loaded: LoadedSpec) -> tuple[dict, Path] | None:
    """(config.json of a Hugging Face model directory, its path), or None when there is none to read."""
    if loaded.spec.model.source_kind != "hf-directory":
        return None
    directory = _readable_model_path(loaded)
    config_path = directory / "config.json" if directory is not None else None
    if config_path is None or not config_path.is_file():
        return None
    try:
        return sizing.read_config(config_path), config_path
    except PlanError:
        return None  # check_model_path reports an unreadable config


def check_sequence_lengths(loaded: LoadedSpec) -> Iterable[Finding]:
    """A bucket longer than the model's positions cannot be traced (it fails minutes into compile): refuse at
    validate. The limit is the config's max_position_embeddings (n_positions for GPT-2-style configs)."""
    found = None if loaded.spec.compile.image_size else _model_config(loaded)
    if found is None:
        return
    config, config_path = found
    config = config.get("text_config", config)
    limit = next(
        (config[k] for k in ("max_position_embeddings", "n_positions") if isinstance(config.get(k), int)), None
    )
    too_long = [n for n in loaded.spec.compile.sequence_lengths if limit is not None and n > limit]
    if too_long:
        yield error(
            "compile.sequence_lengths",
            f"{too_long} exceed the model's {limit} positions (max_position_embeddings in {config_path})",
            f"compile sequence lengths of at most {limit}",
        )


# Vision transformers whose patch position embeddings are a fixed grid: transformers' ViTEmbeddings (and these
# models' copies of it) raise "Input image size (..) doesn't match model (..)" for any other size unless
# interpolate_pos_encoding is passed, which a traced module cannot take. Convolutional models take any size.
FIXED_GRID_VISION_MODELS = {"vit", "deit", "beit", "vit_msn", "vit_mae", "data2vec-vision", "dinat"}


def check_image_size(loaded: LoadedSpec) -> Iterable[Finding]:
    """An image bucket of another size than a ViT's grid fails at trace: refuse at validate."""
    image_size = loaded.spec.compile.image_size
    found = _model_config(loaded) if image_size else None
    if found is None:
        return
    config, config_path = found
    config = config.get("vision_config", config)
    side = config.get("image_size")
    if config.get("model_type") not in FIXED_GRID_VISION_MODELS or not isinstance(side, int):
        return
    if list(image_size) != [side, side]:
        yield error(
            "compile.image_size",
            f"{list(image_size)} is not the {config.get('model_type')} model's fixed {side}x{side} input "
            f"(image_size in {config_path}; its position embeddings are a fixed grid)",
            f"compile.image_size: [{side}, {side}], and resize images to it before sending them",
        )


def check_parallel_compile(loaded: LoadedSpec) -> Iterable[Finding]:
    """RUN_NEURON_PARALLEL_COMPILE=1 makes the training toolkit run neuron_parallel_compile, a graph-extraction trial
    that only fills the compile cache (aws-neuron-sdk frameworks/torch/torch-neuronx/api-reference-guide/training/pytorch-neuron-parallel-compile.rst; aws/sagemaker-python-sdk issue 3481): say so, and refuse it without a cache to fill."""
    spec = loaded.spec
    if not spec.parallel_compile:
        return
    if not spec.compile_cache_uri:
        yield error(
            "parallel_compile",
            "a pre-compile job keeps its graphs only in a shared compile cache, and compile_cache_uri is not set",
            "set compile_cache_uri: s3://BUCKET/neuron-compile-cache",
        )
    else:
        yield warning(
            "parallel_compile",
            "this job only pre-compiles into compile_cache_uri (neuron_parallel_compile's trial run trains nothing)",
            "run it, then train with parallel_compile: false and the same spec",
        )


def check_inter_container_encryption(loaded: LoadedSpec) -> Iterable[Finding]:
    spec = loaded.spec
    if spec.instance_count > 1 and not spec.inter_container_encryption:
        yield warning(
            "inter_container_encryption",
            f"the {spec.instance_count} instances exchange weights and gradients unencrypted",
            "remove inter_container_encryption: false unless its cost in training time was measured and accepted",
        )


def check_network_exposure(loaded: LoadedSpec) -> Iterable[Finding]:
    """The opt-outs of the network's secure defaults, each said once in plan and validate."""
    spec = loaded.spec
    if spec.deployment.platform != "ec2" or not spec.network.creates_vpc:
        return
    if spec.network.instance_subnets == "public":
        yield warning(
            "network.instance_subnets",
            "instances get a public IPv4 address each and are one security-group change away from the internet",
            "remove instance_subnets: public to keep them in private subnets behind a NAT gateway",
        )
    if not spec.network.empty_default_security_group:
        yield warning(
            "network.empty_default_security_group",
            "the VPC's default security group keeps AWS's rules (all traffic between its members, all egress)",
            "remove empty_default_security_group: false",
        )


Check = Callable[[LoadedSpec], Iterable[Finding]]
# The checks of each spec kind, in the order their findings are reported.
CHECKS: dict[str, list[Check]] = {
    "inference": [
        check_instance,
        check_sdk,
        check_image,
        check_compile_target,
        check_parallel_layout,
        check_model_path,
        check_architecture_agrees,
        check_model_family,
        check_sequence_lengths,
        check_image_size,
        check_inference_fit,
        check_sagemaker_endpoint,
        check_sagemaker_host,
        check_network_exposure,
    ],
    "training": [
        check_instance,
        check_sdk,
        check_image,
        check_parallel_layout,
        check_entry_script,
        check_input_channels,
        check_training_engine,
        check_training_figures,
        check_training_fit,
        check_parallel_compile,
        check_inter_container_encryption,
    ],
}


def run_checks(loaded: LoadedSpec) -> list[Finding]:
    return locate(loaded, [finding for check in CHECKS[loaded.spec.kind] for finding in check(loaded)])


def locate(loaded: LoadedSpec, findings: list[Finding]) -> list[Finding]:
    """``findings`` with the spec file and the line of the field each is about."""
    for finding in findings:
        path = tuple(int(p) if p.isdigit() else p for p in finding.field.split("."))
        if path[0] == "hyperparameters" and len(path) > 1 and path[1] in loaded.overrides:
            finding.file, finding.line = f"--hp {path[1]}", None  # the command line's, not a line of the file
            continue
        finding.file, finding.line = loaded.source.file, loaded.source.line_of(path)
    return findings


def errors_of(findings: list[Finding]) -> list[Finding]:
    return [finding for finding in findings if finding.level == "error"]


class PlanRefused(PlanError):
    """A spec with error findings: no plan is made. ``problems`` are the findings, one line each."""

    def __init__(self, problems: list[Finding]) -> None:
        super().__init__(problems[0].one_line())
        self.problems = problems


def refuse_errors(loaded: LoadedSpec) -> list[Finding]:
    """Every check's findings; a spec with an error is refused here, before anything is traced, planned or sent."""
    findings = run_checks(loaded)
    if errors_of(findings):
        raise PlanRefused(errors_of(findings))
    return findings
