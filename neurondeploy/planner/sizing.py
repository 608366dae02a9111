"""Memory fit per NeuronCore, TP choice and instance choice: the planner every other check uses.

The formulas are the Neuron docs' (aws-neuron-sdk about-neuron/transformers/generative-llm-inference-with-neuron.rst): weights = parameters × dtype bytes (``12·L·d²``
for GPT-style shapes), KV cache = batch × layers × context × 2 × (KV heads × head dim) × dtype bytes —
GQA-aware, which the doc's MHA formula is not (derived, unconfirmed) — and the budget is 16 GiB per
NeuronCore-v2 (the catalogue's ``hbm_per_core_gib``).

Sizing follows how the serving runtime really shards (the catalogue's ``sharding`` rules per backend, from
NxD Inference's ``modules/attention/gqa.py``): Q heads are padded with zero heads up to a multiple of TP
(``get_number_of_extra_heads``), K/V heads are replicated up to TP when TP is a multiple of them and the
model is converted to MHA otherwise (``get_shardable_head_counts``). The padded and replicated heads cost
weight memory, KV cache and compute, and all three are counted. Mixture-of-experts models keep every expert
resident (weights count all of them; the active parameters are reported beside), an explicit ``head_dim``
sizes q/k/v/o and the KV cache, tied embeddings count once, and weight-only int8/fp8 quantization takes
1 byte per linear-layer weight where the runtime supports it.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pydantic import ValidationError

from neurondeploy import catalog
from neurondeploy.errors import PlanError
from neurondeploy.specs.inference import ModelArchitecture
from neurondeploy.user_files import parse_user_json, read_user_file

GIB = 1024**3
# Hugging Face configs are kilobytes; a classifier's label maps can reach megabytes.
MAX_CONFIG_BYTES = 16 * 2**20
NON_PARAMETER_DTYPES = {"I64", "I32", "I16", "U64", "U32", "BOOL"}
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "fp8": 1}
QUANTIZED_WEIGHT_BYTES = 1  # int8 and fp8 (e4m3) weights; per-channel scales are negligible
# Our margin, not an AWS figure: the runtime, NEFF instructions, scratchpad and activations share HBM with
# weights and KV. 10% keeps the docs' worked examples on the side they are on (Llama-3.1-8B bs1 fits
# trn1.2xlarge; OPT-66B bs16 needs 24 Inf2 cores).
RUNTIME_HEADROOM_FRACTION = 0.10

_CONFIG_KEYS = {
    "layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "hidden_size": ("hidden_size", "n_embd", "d_model"),
    "attention_heads": ("num_attention_heads", "n_head"),
    "kv_heads": ("num_key_value_heads",),
    "head_dim": ("head_dim",),
    "vocab_size": ("vocab_size",),
    "intermediate_size": ("intermediate_size", "n_inner", "ffn_dim"),
    "experts": ("num_local_experts", "num_experts", "n_routed_experts"),
    "experts_per_token": ("num_experts_per_tok", "moe_topk"),
    "expert_intermediate_size": ("moe_intermediate_size",),
}
_ZERO_MEANS_UNUSED = {"experts", "experts_per_token", "expert_intermediate_size"}
_GATED_MODEL_TYPES = {
    "llama",
    "llama4_text",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen2_moe",
    "qwen3",
    "qwen3_moe",
    "gemma",
    "gemma2",
    "gemma3_text",
    "granite",
    "phi3",
    "olmo2",
    "deepseek_v2",
    "deepseek_v3",
}
# Configs where tie_word_embeddings is absent but the model ties them (the transformers class default).
_TIED_BY_DEFAULT = {"bert", "gemma", "gemma2", "gemma3_text"}


def read_config(
    config_path: Path, missing_fix: str = "give a Hugging Face model directory or model.architecture"
) -> dict:
    """A Hugging Face config.json as a dict; a missing, unreadable, oversized, deeply nested or non-object one (or a
    FIFO or device in its place) is one PlanError line."""
    fix = "check the model directory"
    try:
        raw = read_user_file(config_path, max_bytes=MAX_CONFIG_BYTES, what="a model config", fix=fix, error=PlanError)
    except FileNotFoundError:
        raise PlanError(f"{config_path}: no config.json", missing_fix) from None
    config = parse_user_json(raw, where=f"{config_path}: unreadable config", fix=fix, error=PlanError)
    if not isinstance(config, dict):
        raise PlanError(f"{config_path}: config.json is not a JSON object", "check the model directory")
    return config


def architecture_from_config(model_dir: str | Path) -> ModelArchitecture:
    """Read shape numbers from a Hugging Face config.json, and the exact parameter count from safetensors headers."""
    model_dir = Path(model_dir)
    config_path = model_dir / "config.json"
    return architecture_from_config_values(
        read_config(config_path), where=str(config_path), parameters=safetensors_parameter_count(model_dir)
    )


def architecture_from_config_values(
    config: dict, *, where: str = "config.json", parameters: int | None = None
) -> ModelArchitecture:
    """The shape numbers of a parsed config.json (multimodal configs: their text_config). A config.json is written
    by whoever published the model: a value of the wrong type is one PlanError naming it, never a crash."""
    try:
        return _architecture(config, where, parameters)
    except (TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise PlanError(
            f"{where}: a value of an unexpected type or size ({type(exc).__name__}: {str(exc)[:120]})",
            "fix config.json, or set model.architecture in the spec",
        ) from None


def _architecture(config: dict, where: str, parameters: int | None) -> ModelArchitecture:
    config = config.get("text_config", config)
    if not isinstance(config, dict):
        raise PlanError(f"{where}: text_config is not an object", "fix config.json, or set model.architecture")
    model_type = config.get("model_type")
    if model_type is not None and not isinstance(model_type, str):
        raise PlanError(f"{where}: model_type is {model_type!r}, not a name", "fix config.json")
    values: dict = {}
    for name, keys in _CONFIG_KEYS.items():
        # 0 or null means "not used" in the MoE keys of some configs (dense Qwen3 has num_experts_per_tok: 0), null
        # means "the default" in others (GPT-2's n_inner); a 0 anywhere else is a broken config, not a default.
        zero = next((key for key in keys if config.get(key) == 0 and not isinstance(config.get(key), bool)), None)
        if zero and name not in _ZERO_MEANS_UNUSED:
            raise PlanError(
                f"{where}: {zero} is 0", "fix config.json (a model has at least one), or set model.architecture"
            )
        values[name] = next((config[key] for key in keys if config.get(key)), None)
    missing = [name for name in ("layers", "hidden_size", "attention_heads") if values[name] is None]
    if missing:
        raise PlanError(f"{where}: no {', '.join(missing)} in config", "set model.architecture in the spec")
    if values["experts"] is not None:
        values.update(_moe_layout(config, values))
    values = {key: value for key, value in values.items() if value is not None}
    values["gated_mlp"] = model_type in _GATED_MODEL_TYPES
    values["tied_embeddings"] = bool(config.get("tie_word_embeddings", model_type in _TIED_BY_DEFAULT))
    values["parameters"] = parameters
    try:
        return ModelArchitecture.model_validate(values)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        field = ".".join(str(part) for part in first["loc"]) or "shape"
        raise PlanError(f"{where}: {field}: {first['msg']}", "set model.architecture in the spec") from None


def _moe_layout(config: dict, values: dict) -> dict:
    """Expert widths, shared experts and dense layers, spelled differently by each MoE family's config."""
    layers = values["layers"]
    if "intermediate_size_mlp" in config:
        # Llama-4: intermediate_size is the routed (and the one shared) expert's width, intermediate_size_mlp the
        # dense layers'; every interleave_moe_layer_step-th layer is MoE (transformers Llama4TextConfig).
        step = config.get("interleave_moe_layer_step") or 1
        return {
            "expert_intermediate_size": config["intermediate_size"],
            "intermediate_size": config["intermediate_size_mlp"],
            "shared_expert_intermediate_size": config["intermediate_size"],
            "dense_layers": layers - layers // step,
        }
    shared = (config.get("n_shared_experts") or 0) * (config.get("moe_intermediate_size") or 0)  # DeepSeek
    shared = shared or config.get("shared_expert_intermediate_size") or 0  # Qwen2-MoE
    dense = config.get("first_k_dense_replace") or 0  # DeepSeek
    if config.get("decoder_sparse_step") or config.get("mlp_only_layers"):  # Qwen2/3-MoE
        step = config.get("decoder_sparse_step") or 1
        only_mlp = set(config.get("mlp_only_layers") or ())
        dense = sum(1 for i in range(layers) if i in only_mlp or (i + 1) % step)
    return {"shared_expert_intermediate_size": shared, "dense_layers": dense}


def safetensors_parameter_count(model_dir: Path) -> int | None:
    """Exact parameter count from the safetensors headers (no weights are read), or None without safetensors."""
    total = 0
    files = sorted(model_dir.glob("*.safetensors"))
    for path in files:
        with path.open("rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(length))
        for name, entry in header.items():
            # Integer tensors are buffers (position ids, masks), not parameters; int8 weights still count.
            if name != "__metadata__" and entry["dtype"] not in NON_PARAMETER_DTYPES:
                total += math.prod(entry["shape"])
    return total or None


@dataclass(frozen=True)
class ParameterCounts:
    """Parameters by where they live; MoE layers keep every expert resident, a token uses only some of them."""

    attention: int  # q, k, v, o of every layer
    mlp: int  # dense MLPs, every routed expert, shared experts and routers
    active_mlp: int  # what one token runs through: dense MLPs, shared experts, its routed experts, routers
    embeddings: int  # input embeddings, plus the output head unless tied

    @property
    def total(self) -> int:
        return self.attention + self.mlp + self.embeddings

    @property
    def active(self) -> int:
        return self.attention + self.active_mlp + self.embeddings


def parameter_counts(arch: ModelArchitecture) -> ParameterCounts:
    """Counted from the shape (biases and norms left out: well under 0.1% for these models)."""
    d, head_dim = arch.hidden_size, arch.attention_head_dim
    attention = d * head_dim * (2 * arch.attention_heads + 2 * arch.key_value_heads)  # q and o; k and v
    matrices = 3 if arch.gated_mlp else 2
    dense_width = arch.dense_intermediate_size
    if arch.experts is None:
        mlp = active_mlp = arch.layers * matrices * d * dense_width
    else:
        expert_width = arch.expert_intermediate_size or dense_width
        moe_layers = arch.layers - arch.dense_layers
        router = d * arch.experts
        shared = matrices * d * arch.shared_expert_intermediate_size
        dense = arch.dense_layers * matrices * d * dense_width
        mlp = dense + moe_layers * (arch.experts * matrices * d * expert_width + shared + router)
        active_experts = arch.experts_per_token or arch.experts
        active_mlp = dense + moe_layers * (active_experts * matrices * d * expert_width + shared + router)
    embeddings = arch.vocab_size * d * (1 if arch.tied_embeddings else 2)
    return ParameterCounts(arch.layers * attention, mlp, active_mlp, embeddings)


def parameter_count(arch: ModelArchitecture) -> int:
    """All parameters (every expert): the exact count when known, else counted from the shape."""
    return arch.parameters or parameter_counts(arch).total


def active_parameter_count(arch: ModelArchitecture) -> int:
    """Parameters one token runs through (dense models: all of them)."""
    counts = parameter_counts(arch)
    return parameter_count(arch) - (counts.mlp - counts.active_mlp)


@dataclass
class MemoryEstimate:
    """What one NeuronCore must hold, against what it has."""

    tensor_parallel: int
    weights_gib: float
    kv_cache_gib: float
    training_state_gib: float
    headroom_gib: float
    per_core_gib: float
    available_per_core_gib: float
    padded_heads: int
    effective_kv_heads: int
    notes: list[str] = field(default_factory=list)
    padding_overhead_gib: float = 0.0  # weights + KV cache the padded and replicated heads add, all cores
    padding_compute_fraction: float = 0.0  # extra FLOPs per generated token from those heads
    activations_gib: float = 0.0  # training: activations kept for the backward pass, per core

    @property
    def fits(self) -> bool:
        return self.per_core_gib <= self.available_per_core_gib

    def as_dict(self) -> dict:
        return asdict(self) | {"fits": self.fits}


def head_layout(arch: ModelArchitecture, tp: int, backend: str = "nxdi") -> tuple[int, int]:
    """(Q heads, K/V heads) as ``backend`` shards them over ``tp`` ranks.

    NxD Inference (modules/attention/gqa.py ``get_shardable_head_counts``): Q heads are padded by
    ``get_number_of_extra_heads`` to a multiple of TP; MHA models pad K/V alike; GQA models whose K/V heads
    are fewer than TP or not a multiple of it replicate them to TP when TP is a multiple of them
    (REPLICATE_TO_TP_DEGREE) and otherwise become MHA with K/V = padded Q (``determine_sharding_strategy``
    falls back to CONVERT_TO_MHA).
    """
    heads, kv = arch.attention_heads, arch.key_value_heads
    rules = catalog.sharding_rules(backend)
    padded = math.ceil(heads / tp) * tp if rules.pads_attention_heads else heads
    if not rules.replicates_kv_heads:
        return padded, kv
    if kv == heads:
        return padded, padded
    if kv < tp or kv % tp:
        return padded, (tp if tp % kv == 0 else padded)
    return padded, kv


def _attention_flops_per_token(arch: ModelArchitecture, params: int, q_heads: int, context: int) -> float:
    """Decode FLOPs per token: 2 per weight a token passes, plus QK^T and AV over the context (4·ctx·head_dim a head)."""
    return 2 * params + 4 * arch.layers * context * arch.attention_head_dim * q_heads


def inference_memory(
    arch: ModelArchitecture,
    hbm_per_core_gib: float,
    tp: int,
    batch: int,
    sequence: int,
    dtype: str,
    *,
    backend: str = "nxdi",
    quantization: str = "none",
) -> MemoryEstimate:
    bytes_per = DTYPE_BYTES[dtype]
    counts = parameter_counts(arch)
    params = parameter_count(arch)
    heads, kv = arch.attention_heads, arch.key_value_heads
    padded, effective_kv = head_layout(arch, tp, backend)
    head_dim = arch.attention_head_dim
    # q and o grow by the padded heads, k and v by the replicated ones (zero or copied weights, still in HBM).
    extra_params = arch.layers * arch.hidden_size * head_dim * 2 * ((padded - heads) + (effective_kv - kv))
    if quantization == "none":
        weights = (params + extra_params) * bytes_per
    else:  # linear layers in 1 byte; embeddings and the output head stay in dtype
        linear = params - counts.embeddings + extra_params
        weights = linear * QUANTIZED_WEIGHT_BYTES + counts.embeddings * bytes_per
    kv_bytes_per_head = batch * arch.layers * sequence * 2 * head_dim * bytes_per
    kv_cache = kv_bytes_per_head * effective_kv
    linear_bytes = QUANTIZED_WEIGHT_BYTES if quantization != "none" else bytes_per
    padding_bytes = extra_params * linear_bytes + kv_bytes_per_head * (effective_kv - kv)
    active = active_parameter_count(arch)
    compute = _attention_flops_per_token(arch, active + extra_params, padded, sequence)
    padding_compute = compute / _attention_flops_per_token(arch, active, heads, sequence) - 1
    notes = []
    if padded != heads:
        notes.append(
            f"{heads} attention heads padded to {padded} for TP={tp} ({backend} pads Q heads to a multiple of TP)"
        )
    if effective_kv != kv:
        notes.append(f"{kv} KV heads replicated to {effective_kv} for TP={tp}")
    if padding_bytes:
        notes.append(
            f"padding and replication cost {padding_bytes / GIB:.2f} GiB over all cores and "
            f"{padding_compute:.1%} more compute per token"
        )
    headroom = hbm_per_core_gib * RUNTIME_HEADROOM_FRACTION
    per_core = (weights + kv_cache) / tp / GIB + headroom
    return MemoryEstimate(
        tp,
        weights / GIB,
        kv_cache / GIB,
        0.0,
        headroom,
        per_core,
        hbm_per_core_gib,
        padded,
        effective_kv,
        notes,
        padding_overhead_gib=padding_bytes / GIB,
        padding_compute_fraction=padding_compute,
    )


@dataclass(frozen=True)
class ServingProfile:
    """A load to size an LLM for when the user has not said one: what `size` defaults to and `init` compiles."""

    name: str
    batch: int
    sequence: int  # tokens held per sequence: prompt and completion
    use: str


# Ours, not AWS figures: named loads so that a first `size` answers for a realistic endpoint (a few concurrent
# chats) instead of one 2048-token request, and says which load it assumed.
SERVING_PROFILES = {
    profile.name: profile
    for profile in (
        ServingProfile("interactive", 1, 4096, "one conversation at a time, the lowest latency"),
        ServingProfile("chat", 4, 4096, "a few concurrent conversations of up to 4096 tokens"),
        ServingProfile("throughput", 16, 2048, "many concurrent short requests, the most tokens per dollar"),
        ServingProfile("long-context", 1, 32768, "one long document or conversation at a time"),
    )
}
DEFAULT_SERVING_PROFILE = "chat"


# Hosts with less RAM than this struggle to load (or export on the fly) a 7B-class model (huggingface/optimum-neuron PR
# 595; vllm-project/vllm issue 6452).
SMALL_HOST_RAM_GIB = 32
LARGE_MODEL_PARAMETERS = 6_000_000_000
# A fit above this share of a core's HBM leaves nothing for what the estimate does not count (the runtime's own
# buffers beyond the headroom, a longer prompt than planned): fits, but not what `size` recommends.
TIGHT_FIT_FRACTION = 0.95


@dataclass
class SizingOption:
    instance: str  # as the platform names it: inf2.xlarge on EC2, ml.inf2.xlarge on SageMaker
    tensor_parallel: int
    replicas_per_instance: int
    per_core_gib: float
    available_per_core_gib: float
    hourly_usd: float | None
    price_confirmed: bool
    notes: list[str]
    padded_heads: int = 0
    kv_heads: int = 0
    padding_overhead_gib: float = 0.0
    padding_compute_pct: float = 0.0
    warnings: list[str] = field(default_factory=list)  # why it fits but is not recommended


def host_too_small(instance: catalog.InstanceType, arch: ModelArchitecture) -> bool:
    """The host-RAM rule `size` and `validate` both apply."""
    return instance.host_memory_gib < SMALL_HOST_RAM_GIB and parameter_count(arch) >= LARGE_MODEL_PARAMETERS


def idle_cores(instance: catalog.InstanceType, tp: int, backend: str) -> int:
    """NeuronCores a single LLM server at ``tp`` leaves unused on ``instance`` (vLLM's tensor_parallel_size, TGI's
    HF_NUM_CORES: one container per SageMaker endpoint instance, on TP cores), when a legal larger TP would use
    them; 0 when ``tp`` is already the instance's largest legal degree."""
    if tp >= max(catalog.legal_tp_degrees(instance, backend), default=tp):
        return 0
    return instance.neuron_cores - tp


def fit_warnings(
    instance: catalog.InstanceType, arch: ModelArchitecture, per_core_gib: float, idle: int = 0
) -> list[str]:
    """Why a fitting (instance, TP) is a poor choice: the same host-RAM rule validate warns with, a tight fit, the
    cores one server leaves idle (``idle``, :func:`idle_cores`)."""
    warnings = []
    if host_too_small(instance, arch):
        warnings.append(
            f"host RAM {instance.host_memory_gib} GiB: loading a 7B-class model on a host with less than "
            f"{SMALL_HOST_RAM_GIB} GiB of RAM often fails"
        )
    if per_core_gib > TIGHT_FIT_FRACTION * instance.hbm_per_core_gib:
        warnings.append(
            f"tight: over {TIGHT_FIT_FRACTION:.0%} of a core's HBM, nothing left for what the estimate does not count"
        )
    if idle:
        warnings.append(
            f"idle cores {idle}: one LLM server per instance runs on TP of its NeuronCores; the rest are paid for "
            "and unused (a larger TP on the same instance uses them, with more HBM for the KV cache)"
        )
    return warnings


def size_options(
    arch: ModelArchitecture,
    batch: int,
    sequence: int,
    dtype: str,
    backend: str = "nxdi",
    region: str | None = None,
    quantization: str = "none",
    platform: str = "ec2",
    one_server: bool = True,
) -> list[SizingOption]:
    """Every (instance, TP) that fits, cheapest per hour first, then smallest TP. ``platform`` "sagemaker": the
    instances SageMaker hosts endpoints on, by their ml.* names and prices. ``one_server``: the LLM containers run
    one server per instance on TP cores (vLLM, TGI); False: our server, one replica per TP cores."""
    options = []
    sagemaker = platform == "sagemaker"
    for instance in catalog.instance_types().values():
        if instance.compile_target is None or (region and region not in instance.regions):
            continue
        if sagemaker and not instance.sagemaker_endpoint:
            continue
        for tp in catalog.legal_tp_degrees(instance, backend):
            estimate = inference_memory(
                arch, instance.hbm_per_core_gib, tp, batch, sequence, dtype, backend=backend, quantization=quantization
            )
            if estimate.fits:
                options.append(
                    SizingOption(
                        instance.sagemaker_name if sagemaker else instance.name,
                        tp,
                        1 if one_server else catalog.replicas_per_instance(instance.name, tp),
                        round(estimate.per_core_gib, 2),
                        instance.hbm_per_core_gib,
                        catalog.price_per_hour(instance, region=region, platform=platform),
                        instance.sagemaker_price_confirmed if sagemaker else instance.price_confirmed,
                        estimate.notes,
                        estimate.padded_heads,
                        estimate.effective_kv_heads,
                        round(estimate.padding_overhead_gib, 2),
                        round(100 * estimate.padding_compute_fraction, 1),
                        fit_warnings(
                            instance,
                            arch,
                            estimate.per_core_gib,
                            idle_cores(instance, tp, backend) if one_server else 0,
                        ),
                    )
                )
    return sorted(options, key=lambda o: (o.hourly_usd if o.hourly_usd is not None else math.inf, o.tensor_parallel))


def recommended(options: list[SizingOption]) -> SizingOption | None:
    """What `size` recommends and validate's "does not fit" fix names: the cheapest fit with no warning."""
    return next((option for option in options if not option.warnings), None)
