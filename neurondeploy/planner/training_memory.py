"""Training memory per NeuronCore: weights, gradients, optimizer state (ZeRO-1 aware) and activations.

State per core (parameters P sharded over TP × PP): weights, gradients and two AdamW moments, 4 + 4 + 8 bytes a
parameter in fp32 and bf16 autocast (fp32 master weights), 2 + 2 + 8 with bf16 weights and stochastic rounding,
2 + 4 + 12 with NxD Training's mixed precision (fp32 gradients, and an fp32 master copy beside the moments);
ZeRO-1 divides the moments (and that master copy) over the data-parallel ranks. The Neuron/optimum docs put this at
"approximately 4× the model size" per core (optimum-neuron docs/source/guides/distributed_training.mdx).

Activations follow Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models"
(arXiv:2205.05198, §4.1), which counts, per layer and per token, what autograd keeps for the backward pass:
34·h bytes at 16-bit plus 5·a·s bytes for the attention scores, i.e. ``s·b·h·(34 + 5·a·s/h)`` for a layer, and
``s·b·h·(10 + 24/t + 5·a·s/(h·t))`` with tensor parallelism t (the norms' and the first matmuls' inputs are
replicated, the rest is split). Adapted here, element by element, to what the models we size keep:

* no dropout (Llama-style pre-training and the reference script): Korthikanti's masks (2·h bytes) go;
* a fused (flash) attention kernel: it keeps q, k, v, its output and a log-sum-exp, not the s×s scores, so the
  ``5·a·s/h`` term goes and the attention output is kept twice (the kernel's, and the o-projection's input
  after the head transpose copies it) — ``attention_scores=True`` puts the scores back;
* GQA (k and v are kv_heads × head_dim wide), explicit head_dim, SwiGLU (gate, up, activation and product kept:
  4 × intermediate instead of GELU's 2 ×) and MoE (each token keeps its experts_per_token experts' intermediates);
* element size: 4 bytes in fp32, 2 bytes under bf16 (Korthikanti's 16-bit);
* the loss: logits in the compute dtype, their fp32 copy for the cross-entropy and its gradient
  (``s·b·V·(bytes + 8)``), split over TP as a vocab-parallel head does.

Per token and layer that is ``4·h`` replicated + ``(3·q + 2·kv + MLP)`` split over TP, with q = heads × head_dim
and kv = kv_heads × head_dim. For the reference model (h = 256, MLP 4·h, GELU, MHA) that is 17·h elements:
Korthikanti's 16·h + scores, with the kernel's output in place of the scores.

Full recomputation (gradient checkpointing per layer) keeps only each layer's input (``h`` per token,
Korthikanti's ``2·s·b·h·L`` bytes at 16-bit) and rebuilds one layer's activations at a time in the backward pass.
A pipeline stage holds ``layers / PP`` layers for every micro-batch in flight (GPipe: all of them, the reference
script's default).

``bench/train.py`` prints this prediction beside the measured peak step memory of the reference model on CPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from neurondeploy.planner.sizing import GIB, RUNTIME_HEADROOM_FRACTION, MemoryEstimate, parameter_count
from neurondeploy.specs.inference import ModelArchitecture

# NxD Training's mixed precision keeps bf16 weights, accumulates gradients in fp32 and updates an fp32 master copy
# of the weights, which its ZeRO-1 shards with the moments (docs/general/config_overview.rst, Precision).
MIXED = (2, 4, 4 + 8)
TRAINING_STATE_BYTES = {
    "fp32": (4, 4, 8),
    "bf16-autocast": (4, 4, 8),
    "bf16-stochastic-rounding": (2, 2, 8),
    "bf16-mixed": MIXED,
    "bf16-mixed-stochastic-rounding": MIXED,
}
ACTIVATION_BYTES = {name: 4 if name == "fp32" else 2 for name in TRAINING_STATE_BYTES}  # bf16 compute otherwise
LOSS_FP32_BYTES = 8  # the fp32 copy of the logits for the cross-entropy and its gradient


@dataclass(frozen=True)
class TrainingLoad:
    """What one forward/backward holds: sequences of a length, per data-parallel rank, and how many at once."""

    sequence_length: int
    micro_batch: int  # sequences per data-parallel rank in one forward/backward
    in_flight: int = 1  # micro-batches a pipeline stage keeps activations of at once


def layer_activation_elements(
    arch: ModelArchitecture,
    tp: int,
    sequence: int,
    attention_scores: bool,
    *,
    sequence_parallel: bool = False,
    recomputed: frozenset[str] = frozenset(),
) -> float:
    """Elements one layer keeps per token for the backward pass, per TP rank (see the module docstring).
    ``sequence_parallel`` splits what TP replicates over the TP ranks (Korthikanti §4.2.2); ``recomputed`` (selective
    checkpointing) drops what the backward pass rebuilds: the core attention's output ("attention") and the MLP's
    intermediates ("mlp"), whose inputs are kept anyway."""
    h, head_dim = arch.hidden_size, arch.attention_head_dim
    q, kv = arch.attention_heads * head_dim, arch.key_value_heads * head_dim
    replicated = 4 * h  # inputs of the two norms, of the QKV and of the first MLP matmul
    if arch.experts is None:
        width, routed = arch.dense_intermediate_size, 1
    else:
        width = arch.expert_intermediate_size or arch.dense_intermediate_size
        routed = arch.experts_per_token or arch.experts
    mlp = (4 if arch.gated_mlp else 2) * width * routed + (4 if arch.gated_mlp else 2) * (
        arch.shared_expert_intermediate_size if arch.experts else 0
    )
    scores = arch.attention_heads * sequence if attention_scores else 0
    if "attention" in recomputed:
        q_kept, scores = 2 * q, 0  # q and the o-projection's input; the kernel's output is rebuilt
    else:
        q_kept = 3 * q
    if "mlp" in recomputed:
        mlp = 0
    split = q_kept + 2 * kv + mlp + scores
    return (replicated / tp if sequence_parallel else replicated) + split / tp


def activation_bytes(
    arch: ModelArchitecture,
    load: TrainingLoad,
    *,
    tp: int = 1,
    pp: int = 1,
    precision: str = "fp32",
    checkpointing: bool = False,
    attention_scores: bool = False,
    sequence_parallel: bool = False,
    recomputed: frozenset[str] = frozenset(),
) -> float:
    """Activation bytes one NeuronCore holds at the peak of a step (first pipeline stage; the loss on the last).
    ``checkpointing`` is full recomputation; ``recomputed`` is selective (:func:`layer_activation_elements`)."""
    element = ACTIVATION_BYTES[precision]
    tokens = load.sequence_length * load.micro_batch
    layers = math.ceil(arch.layers / pp)
    # Full recomputation rebuilds a whole layer at a time; selective keeps each layer but what it recomputes.
    elements = layer_activation_elements(
        arch,
        tp,
        load.sequence_length,
        attention_scores,
        sequence_parallel=sequence_parallel,
        recomputed=frozenset() if checkpointing else recomputed,
    )
    one_layer = elements * tokens * element
    if checkpointing:
        layer_input = arch.hidden_size / (tp if sequence_parallel else 1)
        kept = layers * layer_input * tokens * element * load.in_flight + one_layer
    else:
        kept = layers * one_layer * load.in_flight
    loss = tokens * arch.vocab_size * (element + LOSS_FP32_BYTES) / tp
    return kept + loss


@dataclass(frozen=True)
class TrainingLayout:
    """How a training step is split and kept: parallel degrees, ZeRO-1, precision, gradient checkpointing."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    zero1: bool = False
    precision: str = "fp32"
    checkpointing: bool = False  # full recomputation
    sequence_parallel: bool = False
    recomputed: frozenset[str] = frozenset()  # selective checkpointing: what the backward pass rebuilds


def training_memory(
    arch: ModelArchitecture, hbm_per_core_gib: float, layout: TrainingLayout, load: TrainingLoad | None = None
) -> MemoryEstimate:
    """Weights, gradients, optimizer state and (with a load) activations per NeuronCore, with headroom."""
    weight_bytes, grad_bytes, optimizer_bytes = TRAINING_STATE_BYTES[layout.precision]
    shard = parameter_count(arch) / (layout.tp * layout.pp)
    weights = shard * weight_bytes
    state = shard * grad_bytes + shard * optimizer_bytes / (layout.dp if layout.zero1 else 1)
    notes = []
    if load is None:
        activations = 0.0
        notes.append("activations not counted: give hyperparameters.sequence_length (and global_batch_size)")
    else:
        activations = activation_bytes(
            arch,
            load,
            tp=layout.tp,
            pp=layout.pp,
            precision=layout.precision,
            checkpointing=layout.checkpointing,
            sequence_parallel=layout.sequence_parallel,
            recomputed=layout.recomputed,
        )
    headroom = hbm_per_core_gib * RUNTIME_HEADROOM_FRACTION
    per_core = (weights + state + activations) / GIB + headroom
    return MemoryEstimate(
        layout.tp,
        weights * layout.tp * layout.pp / GIB,
        0.0,
        state / GIB,
        headroom,
        per_core,
        hbm_per_core_gib,
        arch.attention_heads,
        arch.key_value_heads,
        notes,
        activations_gib=activations / GIB,
    )


def first_fix(
    arch: ModelArchitecture, hbm_per_core_gib: float, layout: TrainingLayout, load: TrainingLoad | None
) -> str:
    """The changes, in the order a user would try them (each assuming the ones before), that make a layout fit."""
    trials = []
    if load and not layout.checkpointing:
        full = "set checkpoint_granularity: full" if layout.recomputed else "turn on gradient_checkpointing"
        trials.append((full, {"checkpointing": True, "recomputed": frozenset()}, load))
    if not layout.zero1 and layout.dp > 1:
        trials.append(("turn on zero1", {"zero1": True}, load))
    if load and load.micro_batch > 1:
        smaller = TrainingLoad(load.sequence_length, 1, load.in_flight)
        trials.append(("set hyperparameters.micro_batch_size: 1 (gradient accumulation)", {}, smaller))
    applied = []
    for text, change, trial_load in trials:
        layout, load, applied = replace(layout, **change), trial_load, [*applied, text]
        if training_memory(arch, hbm_per_core_gib, layout, load).fits:
            return " and ".join(applied)
    return "raise tensor_parallel / pipeline_parallel" + (f" (after: {', '.join(applied)})" if applied else "")


# The hyperparameters training_load reads (planner.checks refuses a given one that is not a positive whole number).
LOAD_FIGURES = ("sequence_length", "micro_batch_size", "global_batch_size")


def training_load(
    hyperparameters: dict, dp: int, microbatches: int, *, one_f_one_b_stages: int | None = None
) -> TrainingLoad | None:
    """The load a spec's hyperparameters describe, or None when they do not give a sequence length.

    ``micro_batch_size`` (NxD Training's and Megatron's name: sequences per data-parallel rank in one
    forward/backward, gradient accumulation making up the rest) wins; otherwise the reference script's split,
    ``global_batch_size / data_parallel`` cut into ``microbatches`` pipeline micro-batches, all in flight (GPipe).
    ``one_f_one_b_stages``: NxD Training's 1F1B pipeline schedule over that many stages, where the first stage holds
    at most that many of the step's micro-batches (``global_batch_size / (micro_batch_size × DP)``) at once.
    """
    sequence = positive_int(hyperparameters.get("sequence_length"))
    if sequence is None:
        return None
    micro = positive_int(hyperparameters.get("micro_batch_size"))
    if micro is not None and one_f_one_b_stages is not None:
        steps_micro = max(1, (positive_int(hyperparameters.get("global_batch_size")) or micro * dp) // (micro * dp))
        return TrainingLoad(sequence, micro, min(steps_micro, one_f_one_b_stages))
    if micro is not None:
        return TrainingLoad(sequence, micro, microbatches)
    global_batch = positive_int(hyperparameters.get("global_batch_size")) or dp * microbatches
    per_rank = max(1, global_batch // dp)
    return TrainingLoad(sequence, max(1, per_rank // microbatches), microbatches)


def positive_int(value) -> int | None:
    if isinstance(value, bool):
        return None
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):  # a list, "abc", .inf
        return None
    return number if number > 0 else None
