"""Memory fit per NeuronCore, TP choice and instance choice: the planner every other check uses.

The formulas are the Neuron docs' (neuron-facts §5.1): weights = parameters × dtype bytes (``12·L·d²``
for GPT-style shapes), KV cache = batch × layers × context × 2 × (KV heads × head dim) × dtype bytes —
GQA-aware, which the doc's MHA formula is not (derived, unconfirmed) — and the budget is 16 GiB per
NeuronCore-v2 (the catalogue's ``hbm_per_core_gib``). Where the serving backend replicates KV heads
(TP > KV heads) or pads attention heads (heads not divisible by TP), the extra memory is counted.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import asdict, dataclass, field
from pathlib import Path

from neurondeploy import catalog
from neurondeploy.errors import PlanError
from neurondeploy.specs.inference import ModelArchitecture

GIB = 1024**3
NON_PARAMETER_DTYPES = {"I64", "I32", "I16", "U64", "U32", "BOOL"}
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "fp8": 1}
# Our margin, not an AWS figure: the runtime, NEFF instructions, scratchpad and activations share HBM with
# weights and KV. 10% keeps the docs' worked examples on the side they are on (Llama-3.1-8B bs1 fits
# trn1.2xlarge; OPT-66B bs16 needs 24 Inf2 cores).
RUNTIME_HEADROOM_FRACTION = 0.10
# Training keeps fp32 master weights, gradients and two AdamW moments (4 + 4 + 8 bytes) beside the compute
# copy; the Neuron/optimum docs put it at "approximately 4× the model size" per core (facts §5.1).
TRAINING_STATE_BYTES = {"fp32": (4, 4, 8), "bf16-autocast": (4, 4, 8), "bf16-stochastic-rounding": (2, 2, 8)}

_CONFIG_KEYS = {
    "layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "hidden_size": ("hidden_size", "n_embd", "d_model"),
    "attention_heads": ("num_attention_heads", "n_head"),
    "kv_heads": ("num_key_value_heads",),
    "vocab_size": ("vocab_size",),
    "intermediate_size": ("intermediate_size", "n_inner", "ffn_dim"),
}
_GATED_MODEL_TYPES = {"llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma", "gemma2", "granite", "phi3", "olmo2"}


def architecture_from_config(model_dir: str | Path) -> ModelArchitecture:
    """Read shape numbers from a Hugging Face config.json, and the exact parameter count from safetensors headers."""
    model_dir = Path(model_dir)
    config_path = model_dir / "config.json"
    try:
        config = json.loads(config_path.read_text())
    except FileNotFoundError:
        raise PlanError(
            f"{config_path}: no config.json", "give a Hugging Face model directory or model.architecture"
        ) from None
    except (OSError, ValueError) as exc:
        raise PlanError(f"{config_path}: unreadable config ({exc})", "check the model directory") from None
    config = config.get("text_config", config)
    values: dict = {}
    for name, keys in _CONFIG_KEYS.items():
        values[name] = next((config[key] for key in keys if config.get(key) is not None), None)
    missing = [name for name in ("layers", "hidden_size", "attention_heads") if values[name] is None]
    if missing:
        raise PlanError(f"{config_path}: no {', '.join(missing)} in config", "set model.architecture in the spec")
    values = {key: value for key, value in values.items() if value is not None}
    values["gated_mlp"] = config.get("model_type") in _GATED_MODEL_TYPES
    values["tied_embeddings"] = bool(config.get("tie_word_embeddings", config.get("model_type") == "bert"))
    values["parameters"] = safetensors_parameter_count(model_dir)
    return ModelArchitecture.model_validate(values)


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


def parameter_count(arch: ModelArchitecture) -> int:
    if arch.parameters:
        return arch.parameters
    d = arch.hidden_size
    kv_fraction = (arch.kv_heads or arch.attention_heads) / arch.attention_heads
    attention = d * d * (2 + 2 * kv_fraction)  # q and o full width; k and v scaled by KV heads
    intermediate = arch.intermediate_size or 4 * d
    mlp = (3 if arch.gated_mlp else 2) * d * intermediate
    embeddings = arch.vocab_size * d * (1 if arch.tied_embeddings else 2)
    return int(arch.layers * (attention + mlp) + embeddings)


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

    @property
    def fits(self) -> bool:
        return self.per_core_gib <= self.available_per_core_gib

    def as_dict(self) -> dict:
        return asdict(self) | {"fits": self.fits}


def head_layout(arch: ModelArchitecture, tp: int) -> tuple[int, int]:
    """(attention heads after padding to a multiple of TP, KV heads after replication so each core has one)."""
    padded = math.ceil(arch.attention_heads / tp) * tp
    kv = arch.kv_heads or arch.attention_heads
    effective_kv = kv if kv >= tp else kv * math.ceil(tp / kv)
    return padded, effective_kv


def inference_memory(
    arch: ModelArchitecture, hbm_per_core_gib: float, tp: int, batch: int, sequence: int, dtype: str
) -> MemoryEstimate:
    bytes_per = DTYPE_BYTES[dtype]
    params = parameter_count(arch)
    padded, effective_kv = head_layout(arch, tp)
    head_dim = arch.hidden_size // arch.attention_heads
    attention_weights = arch.layers * 2 * arch.hidden_size * arch.hidden_size  # q + o, grow with padding
    weights = (params + attention_weights * (padded - arch.attention_heads) / arch.attention_heads) * bytes_per
    kv_cache = batch * arch.layers * sequence * 2 * effective_kv * head_dim * bytes_per
    notes = []
    if padded != arch.attention_heads:
        notes.append(f"{arch.attention_heads} attention heads padded to {padded} for TP={tp}")
    if effective_kv != (arch.kv_heads or arch.attention_heads):
        notes.append(f"{arch.kv_heads} KV heads replicated to {effective_kv} for TP={tp}")
    headroom = hbm_per_core_gib * RUNTIME_HEADROOM_FRACTION
    per_core = (weights + kv_cache) / tp / GIB + headroom
    return MemoryEstimate(
        tp, weights / GIB, kv_cache / GIB, 0.0, headroom, per_core, hbm_per_core_gib, padded, effective_kv, notes
    )


def training_memory(
    arch: ModelArchitecture, hbm_per_core_gib: float, tp: int, pp: int, dp: int, zero1: bool, precision: str
) -> MemoryEstimate:
    weight_bytes, grad_bytes, optimizer_bytes = TRAINING_STATE_BYTES[precision]
    shard = parameter_count(arch) / (tp * pp)
    optimizer = shard * optimizer_bytes / (dp if zero1 else 1)
    weights = shard * weight_bytes
    state = shard * grad_bytes + optimizer
    headroom = hbm_per_core_gib * RUNTIME_HEADROOM_FRACTION
    per_core = (weights + state) / GIB + headroom
    padded, effective_kv = head_layout(arch, tp)
    notes = ["activations not counted: enable gradient checkpointing if the first steps run out of memory"]
    return MemoryEstimate(
        tp, weights * tp * pp / GIB, 0.0, state / GIB, headroom, per_core, hbm_per_core_gib, padded, effective_kv, notes
    )


@dataclass
class SizingOption:
    instance: str
    tensor_parallel: int
    replicas_per_instance: int
    per_core_gib: float
    available_per_core_gib: float
    hourly_usd: float | None
    price_confirmed: bool
    notes: list[str]


def size_options(
    arch: ModelArchitecture, batch: int, sequence: int, dtype: str, backend: str = "nxdi", region: str | None = None
) -> list[SizingOption]:
    """Every (instance, TP) that fits, cheapest per hour first, then smallest TP."""
    options = []
    for instance in catalog.instance_types().values():
        if instance.compile_target is None or (region and region not in instance.regions):
            continue
        for tp in catalog.legal_tp_degrees(instance, backend):
            if backend == "nxdi" and arch.attention_heads % tp:
                continue
            estimate = inference_memory(arch, instance.hbm_per_core_gib, tp, batch, sequence, dtype)
            if estimate.fits:
                options.append(
                    SizingOption(
                        instance.name,
                        tp,
                        instance.neuron_cores // tp,
                        round(estimate.per_core_gib, 2),
                        instance.hbm_per_core_gib,
                        instance.price_usd_per_hour,
                        instance.price_confirmed,
                        estimate.notes,
                    )
                )
    return sorted(options, key=lambda o: (o.hourly_usd if o.hourly_usd is not None else math.inf, o.tensor_parallel))
