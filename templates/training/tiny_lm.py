"""A tiny causal language model built from a config, and the ways to split it over processes.

Byte-level (vocabulary 256), so it needs no tokenizer: the shipped text trains it in seconds on a CPU.
Layers live in a ModuleDict keyed by their index, so parameter names are the same whatever the layout
(single process, DDP, tensor parallel, a pipeline stage) and checkpoints move between layouts.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint


@dataclass(frozen=True)
class TinyLMConfig:
    vocab_size: int = 256
    hidden_size: int = 64
    layers: int = 4
    heads: int = 4
    intermediate_size: int = 256
    max_positions: int = 256

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    def check_layout(self, tensor_parallel: int, pipeline_parallel: int) -> None:
        """The split must be even: heads and MLP columns over TP ranks, layers over pipeline stages."""
        problems = []
        if self.heads % tensor_parallel or self.intermediate_size % tensor_parallel:
            problems.append(
                f"heads {self.heads} and intermediate_size {self.intermediate_size} must divide by "
                f"tensor_parallel_size {tensor_parallel}"
            )
        if self.layers < pipeline_parallel:
            problems.append(f"layers {self.layers} must be at least pipeline_parallel_size {pipeline_parallel}")
        if problems:
            raise SystemExit("error: " + "; ".join(problems))


class Attention(nn.Module):
    def __init__(self, config: TinyLMConfig) -> None:
        super().__init__()
        self.head_dim = config.hidden_size // config.heads
        self.q_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=False)
        self.o_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        # -1 heads: under tensor parallelism each rank holds heads / TP of them.
        q, k, v = (
            proj(x).view(batch, length, -1, self.head_dim).transpose(1, 2)
            for proj in (self.q_proj, self.k_proj, self.v_proj)
        )
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(y.transpose(1, 2).reshape(batch, length, -1))


class MLP(nn.Module):
    def __init__(self, config: TinyLMConfig) -> None:
        super().__init__()
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.gelu(self.up_proj(x)))


class Block(nn.Module):
    def __init__(self, config: TinyLMConfig) -> None:
        super().__init__()
        self.attention_norm = nn.LayerNorm(config.hidden_size)
        self.attention = Attention(config)
        self.mlp_norm = nn.LayerNorm(config.hidden_size)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class TinyLM(nn.Module):
    """Embeddings -> blocks -> norm -> head. A pipeline stage keeps only its part (the others are None/removed)."""

    def __init__(self, config: TinyLMConfig) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens: nn.Embedding | None = nn.Embedding(config.vocab_size, config.hidden_size)
        self.embed_positions: nn.Embedding | None = nn.Embedding(config.max_positions, config.hidden_size)
        self.layers = nn.ModuleDict({str(i): Block(config) for i in range(config.layers)})
        self.norm: nn.LayerNorm | None = nn.LayerNorm(config.hidden_size)
        self.lm_head: nn.Linear | None = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.gradient_checkpointing = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embed_tokens is not None:  # first stage: x are token ids
            positions = torch.arange(x.shape[1], device=x.device)
            x = self.embed_tokens(x) + self.embed_positions(positions)
        for layer in self.layers.values():
            # Recompute each block's activations in backward instead of keeping them: less memory, ~1/3 more compute.
            x = checkpoint(layer, x, use_reentrant=False) if self.gradient_checkpointing and self.training else layer(x)
        if self.lm_head is not None:  # last stage: logits
            x = self.lm_head(self.norm(x))
        return x


def causal_lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))


def keep_pipeline_stage(model: TinyLM, stage: int, stages: int) -> TinyLM:
    """Cut ``model`` down to pipeline stage ``stage`` of ``stages``: contiguous layers, as even as possible,
    embeddings on the first stage, norm and head on the last."""
    layers = model.config.layers
    bounds = [layers * s // stages for s in range(stages + 1)]
    keep = {str(i) for i in range(bounds[stage], bounds[stage + 1])}
    for name in list(model.layers.keys()):
        if name not in keep:
            del model.layers[name]
    if stage > 0:
        model.embed_tokens = model.embed_positions = None
    if stage < stages - 1:
        model.norm = model.lm_head = None
    return model


def apply_tensor_parallel(model: TinyLM, mesh) -> TinyLM:
    """Megatron-style sharding with DTensor: q/k/v and the MLP's up projection split by output columns, o and
    down by input rows, so each block needs one all-reduce forward and one backward. Embeddings, norms and the
    head stay replicated (small here)."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    plan = {}
    for name in model.layers.keys():
        for column in ("attention.q_proj", "attention.k_proj", "attention.v_proj", "mlp.up_proj"):
            plan[f"layers.{name}.{column}"] = ColwiseParallel()
        for row in ("attention.o_proj", "mlp.down_proj"):
            plan[f"layers.{name}.{row}"] = RowwiseParallel()
    return parallelize_module(model, mesh, plan)


COLUMN_PARALLEL = ("attention.q_proj", "attention.k_proj", "attention.v_proj", "mlp.up_proj")
ROW_PARALLEL = ("attention.o_proj", "mlp.down_proj")


def apply_nxd_tensor_parallel(model: TinyLM) -> TinyLM:
    """The same Megatron split on Trainium with NxD's parallel layers (neuronx_distributed.parallel_layers, after
    parallel_state.initialize_model_parallel): q/k/v and up become ColumnParallelLinear (gather_output=False), o
    and down RowParallelLinear (input_is_parallel=True). Each keeps this rank's slice of the full layer's weight,
    so every layout starts from the same model and parameter names stay those of the unsplit one."""
    from neuronx_distributed.parallel_layers import ColumnParallelLinear, RowParallelLinear, parallel_state

    size, rank = parallel_state.get_tensor_model_parallel_size(), parallel_state.get_tensor_model_parallel_rank()
    for block in model.layers.values():
        for path in COLUMN_PARALLEL + ROW_PARALLEL:
            owner_name, name = path.split(".")
            owner = getattr(block, owner_name)
            full = getattr(owner, name)
            column = path in COLUMN_PARALLEL
            layer = (
                ColumnParallelLinear(
                    full.in_features, full.out_features, bias=False, gather_output=False, dtype=full.weight.dtype
                )
                if column
                else RowParallelLinear(
                    full.in_features, full.out_features, bias=False, input_is_parallel=True, dtype=full.weight.dtype
                )
            )
            with torch.no_grad():
                layer.weight.copy_(full.weight.chunk(size, dim=0 if column else 1)[rank])
            setattr(owner, name, layer)
    return model


# --- the trained model as a Hugging Face causal-LM directory -------------------------------------------------
#
# TinyLM is GPT-2's computation with bias-free linear layers, exact GELU and an untied head, so its weights map
# onto transformers' GPT2LMHeadModel exactly (zero biases): any tool that loads Hugging Face models (transformers,
# vLLM, optimum-neuron) loads it. The tokenizer is its byte-level vocabulary: token id = byte value.

BYTE_CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def gpt2_config(config: TinyLMConfig) -> dict:
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": config.vocab_size,
        "n_positions": config.max_positions,
        "n_embd": config.hidden_size,
        "n_layer": config.layers,
        "n_head": config.heads,
        "n_inner": config.intermediate_size,
        "activation_function": "gelu",  # F.gelu, exact (GPT-2's own is the tanh approximation, gelu_new)
        "layer_norm_epsilon": 1e-5,  # nn.LayerNorm's default
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
        "scale_attn_weights": True,
        "tie_word_embeddings": False,
        "bos_token_id": None,
        "eos_token_id": None,  # a byte vocabulary has no end-of-text token: answers end at max_tokens or a stop
        "torch_dtype": "float32",
    }


def gpt2_state_dict(state: dict[str, torch.Tensor], config: TinyLMConfig) -> dict[str, torch.Tensor]:
    """TinyLM parameter names -> GPT2LMHeadModel's. GPT-2's Conv1D keeps weights as (in, out): transposed."""
    hidden = config.hidden_size
    out = {
        "transformer.wte.weight": state["embed_tokens.weight"],
        "transformer.wpe.weight": state["embed_positions.weight"],
        "transformer.ln_f.weight": state["norm.weight"],
        "transformer.ln_f.bias": state["norm.bias"],
        "lm_head.weight": state["lm_head.weight"],
    }
    for i in range(config.layers):
        ours, theirs = f"layers.{i}.", f"transformer.h.{i}."
        qkv = [state[f"{ours}attention.{name}.weight"] for name in ("q_proj", "k_proj", "v_proj")]
        out |= {
            f"{theirs}ln_1.weight": state[f"{ours}attention_norm.weight"],
            f"{theirs}ln_1.bias": state[f"{ours}attention_norm.bias"],
            f"{theirs}ln_2.weight": state[f"{ours}mlp_norm.weight"],
            f"{theirs}ln_2.bias": state[f"{ours}mlp_norm.bias"],
            f"{theirs}attn.c_attn.weight": torch.cat(qkv, dim=0).t(),
            f"{theirs}attn.c_attn.bias": torch.zeros(3 * hidden),
            f"{theirs}attn.c_proj.weight": state[f"{ours}attention.o_proj.weight"].t(),
            f"{theirs}attn.c_proj.bias": torch.zeros(hidden),
            f"{theirs}mlp.c_fc.weight": state[f"{ours}mlp.up_proj.weight"].t(),
            f"{theirs}mlp.c_fc.bias": torch.zeros(config.intermediate_size),
            f"{theirs}mlp.c_proj.weight": state[f"{ours}mlp.down_proj.weight"].t(),
            f"{theirs}mlp.c_proj.bias": torch.zeros(hidden),
        }
    return {name: tensor.detach().float().contiguous() for name, tensor in out.items()}


def byte_symbols() -> list[str]:
    """GPT-2's printable character for each byte (byte-level BPE's alphabet): the byte itself when printable,
    else the next free code point from 256 up."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    symbols, spare = {}, 256
    for value in range(256):
        if value in printable:
            symbols[value] = chr(value)
        else:
            symbols[value], spare = chr(spare), spare + 1
    return [symbols[value] for value in range(256)]


def byte_tokenizer_files(config: TinyLMConfig) -> dict[str, dict]:
    """tokenizer.json (a byte-level BPE without merges: the `tokenizers` library's format, so no library is
    needed to write it) and tokenizer_config.json for transformers' PreTrainedTokenizerFast."""
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [],
        "normalizer": None,
        "pre_tokenizer": byte_level,
        "post_processor": None,
        "decoder": byte_level,
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": {symbol: value for value, symbol in enumerate(byte_symbols())},
            "merges": [],
        },
    }
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": config.max_positions,
        "clean_up_tokenization_spaces": False,
        "chat_template": BYTE_CHAT_TEMPLATE,
    }
    return {"tokenizer.json": tokenizer, "tokenizer_config.json": tokenizer_config}


def save_hugging_face_directory(state: dict[str, torch.Tensor], config: TinyLMConfig, directory) -> None:
    """config.json, model.safetensors (pytorch_model.bin where safetensors is not installed) and the tokenizer."""
    from pathlib import Path

    directory = Path(directory)
    weights = gpt2_state_dict(state, config)
    try:
        from safetensors.torch import save_file

        save_file(weights, str(directory / "model.safetensors"), metadata={"format": "pt"})
    except ImportError:
        torch.save(weights, directory / "pytorch_model.bin")
    (directory / "config.json").write_text(json.dumps(gpt2_config(config), indent=2))
    for name, content in byte_tokenizer_files(config).items():
        (directory / name).write_text(json.dumps(content, ensure_ascii=False, indent=1))
