"""A small Llama-style causal language model built from a config, and the ways to split it over processes.

The computation of transformers' LlamaForCausalLM (RMSNorm, rotary position embeddings, grouped-query attention,
a SwiGLU MLP, an untied head; transformers models/llama/modeling_llama.py), so the trained weights save as a
Hugging Face Llama directory, the family the Neuron LLM containers serve. Its sizes come from the spec's
``architecture`` (neurondeploy passes them as hyperparameters). The shipped corpus is bytes: a byte-level
tokenizer (ids 0-255) needs no tokenizer files of its own, and a larger ``vocab_size`` only leaves ids unused.
Layers live in a ModuleDict keyed by their index, so parameter names are the same whatever the layout (single
process, DDP, tensor parallel, a pipeline stage) and checkpoints move between layouts.
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
    kv_heads: int = 2
    intermediate_size: int = 192
    max_positions: int = 256
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    def layout_problems(self, tensor_parallel: int, pipeline_parallel: int) -> list[str]:
        """Why the model cannot split this way (empty: it can). Heads, KV heads and MLP columns split evenly over
        TP ranks (each rank keeps whole query groups), layers over pipeline stages."""
        problems = []
        if self.hidden_size % self.heads:
            problems.append(f"hidden_size {self.hidden_size} must divide by heads {self.heads}")
        if self.heads % self.kv_heads:
            problems.append(f"heads {self.heads} must divide by kv_heads {self.kv_heads}")
        uneven = [
            f"{name} {value}"
            for name, value in (
                ("heads", self.heads),
                ("kv_heads", self.kv_heads),
                ("intermediate_size", self.intermediate_size),
            )
            if value % tensor_parallel
        ]
        if uneven:
            problems.append(f"{' and '.join(uneven)} must divide by tensor_parallel_size {tensor_parallel}")
        if self.layers < pipeline_parallel:
            problems.append(f"layers {self.layers} must be at least pipeline_parallel_size {pipeline_parallel}")
        return problems

    def check_layout(self, tensor_parallel: int, pipeline_parallel: int) -> None:
        problems = self.layout_problems(tensor_parallel, pipeline_parallel)
        if problems:
            raise SystemExit("error: " + "; ".join(problems))


class RMSNorm(nn.Module):
    """transformers' LlamaRMSNorm: normalized in float32, scaled in the input's dtype."""

    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rotary(length: int, head_dim: int, theta: float, device, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of each position's angles, the halves repeated (Llama's rotate_half layout)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64, device=device).float() / head_dim))
    angles = torch.outer(torch.arange(length, device=device).float(), inv_freq)
    both = torch.cat((angles, angles), dim=-1)
    return both.cos().to(dtype), both.sin().to(dtype)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-second, first), dim=-1) * sin


class Attention(nn.Module):
    def __init__(self, config: TinyLMConfig) -> None:
        super().__init__()
        self.head_dim = config.hidden_size // config.heads
        self.theta = config.rope_theta
        kv_width = config.kv_heads * self.head_dim
        self.q_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, kv_width, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, kv_width, bias=False)
        self.o_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        # -1 heads: under tensor parallelism each rank holds heads / TP and kv_heads / TP of them, whole groups.
        q, k, v = (
            proj(x).view(batch, length, -1, self.head_dim).transpose(1, 2)
            for proj in (self.q_proj, self.k_proj, self.v_proj)
        )
        cos, sin = rotary(length, self.head_dim, self.theta, x.device, q.dtype)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        groups = q.shape[1] // k.shape[1]  # query heads per KV head (transformers' repeat_kv)
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(y.transpose(1, 2).reshape(batch, length, -1))


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, config: TinyLMConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, config: TinyLMConfig) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.attention = Attention(config)
        self.mlp_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
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
        self.layers = nn.ModuleDict({str(i): Block(config) for i in range(config.layers)})
        self.norm: RMSNorm | None = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.lm_head: nn.Linear | None = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.gradient_checkpointing = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embed_tokens is not None:  # first stage: x are token ids (positions enter as rotations)
            x = self.embed_tokens(x)
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
        model.embed_tokens = None
    if stage < stages - 1:
        model.norm = model.lm_head = None
    return model


def apply_tensor_parallel(model: TinyLM, mesh) -> TinyLM:
    """Megatron-style sharding with DTensor: q/k/v and the MLP's gate and up projections split by output columns,
    o and down by input rows, so each block needs one all-reduce forward and one backward. Embeddings, norms and the
    head stay replicated (small here)."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    plan = {}
    for name in model.layers.keys():
        for column in COLUMN_PARALLEL:
            plan[f"layers.{name}.{column}"] = ColwiseParallel()
        for row in ROW_PARALLEL:
            plan[f"layers.{name}.{row}"] = RowwiseParallel()
    return parallelize_module(model, mesh, plan)


COLUMN_PARALLEL = ("attention.q_proj", "attention.k_proj", "attention.v_proj", "mlp.gate_proj", "mlp.up_proj")
ROW_PARALLEL = ("attention.o_proj", "mlp.down_proj")


def apply_nxd_tensor_parallel(model: TinyLM) -> TinyLM:
    """The same Megatron split on Trainium with NxD's parallel layers (neuronx_distributed.parallel_layers, after
    parallel_state.initialize_model_parallel): q/k/v, gate and up become ColumnParallelLinear (gather_output=False),
    o and down RowParallelLinear (input_is_parallel=True). Each keeps this rank's slice of the full layer's weight,
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
# TinyLM is LlamaForCausalLM's computation with its own parameter names, so its weights map onto transformers'
# LlamaForCausalLM one to one: any tool that loads Hugging Face Llama models (transformers, vLLM, the Neuron LLM
# containers) loads it. The tokenizer is its byte-level vocabulary: token id = byte value.

BYTE_CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def llama_config(config: TinyLMConfig) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": config.vocab_size,
        "hidden_size": config.hidden_size,
        "intermediate_size": config.intermediate_size,
        "num_hidden_layers": config.layers,
        "num_attention_heads": config.heads,
        "num_key_value_heads": config.kv_heads,
        "head_dim": config.hidden_size // config.heads,
        "max_position_embeddings": config.max_positions,
        "hidden_act": "silu",
        "rms_norm_eps": config.rms_norm_eps,
        "rope_theta": config.rope_theta,
        "attention_bias": False,
        "mlp_bias": False,
        "attention_dropout": 0.0,
        "tie_word_embeddings": False,
        "bos_token_id": None,
        "eos_token_id": None,  # a byte vocabulary has no end-of-text token: answers end at max_tokens or a stop
        "torch_dtype": "float32",
    }


HF_NAMES = {  # TinyLM block parameter -> LlamaDecoderLayer's
    "attention_norm.weight": "input_layernorm.weight",
    "mlp_norm.weight": "post_attention_layernorm.weight",
    **{f"attention.{p}.weight": f"self_attn.{p}.weight" for p in ("q_proj", "k_proj", "v_proj", "o_proj")},
    **{f"mlp.{p}.weight": f"mlp.{p}.weight" for p in ("gate_proj", "up_proj", "down_proj")},
}


def llama_state_dict(state: dict[str, torch.Tensor], config: TinyLMConfig) -> dict[str, torch.Tensor]:
    """TinyLM parameter names -> LlamaForCausalLM's."""
    out = {
        "model.embed_tokens.weight": state["embed_tokens.weight"],
        "model.norm.weight": state["norm.weight"],
        "lm_head.weight": state["lm_head.weight"],
    }
    for i in range(config.layers):
        out |= {f"model.layers.{i}.{theirs}": state[f"layers.{i}.{ours}"] for ours, theirs in HF_NAMES.items()}
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


def save_hugging_face_directory(
    state: dict[str, torch.Tensor], config: TinyLMConfig, directory, byte_tokenizer: bool = True
) -> None:
    """config.json, model.safetensors (pytorch_model.bin where safetensors is not installed) and, for a model
    trained on bytes, the byte-level tokenizer."""
    from pathlib import Path

    directory = Path(directory)
    weights = llama_state_dict(state, config)
    try:
        from safetensors.torch import save_file

        save_file(weights, str(directory / "model.safetensors"), metadata={"format": "pt"})
    except ImportError:
        torch.save(weights, directory / "pytorch_model.bin")
    (directory / "config.json").write_text(json.dumps(llama_config(config), indent=2))
    for name, content in byte_tokenizer_files(config).items() if byte_tokenizer else ():
        (directory / name).write_text(json.dumps(content, ensure_ascii=False, indent=1))
