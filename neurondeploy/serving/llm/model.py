"""The causal LM the local endpoint serves: a local Hugging Face directory, or, for an ``hf_model_id`` that is
not on this machine (there is no hub here), a small model of the same architecture class built from a
scaled-down config with random weights, named as a stand-in wherever it answers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from neurondeploy.errors import NeurondeployError
from neurondeploy.specs.inference import ModelArchitecture

# Which transformers architecture serves a model id, by the family its name carries (first match wins); what
# optimum-neuron's vLLM container serves on Inf2/Trn1: the families its CI caches for trn1 (optimum-neuron
# .github/workflows/cache_llm.yml: llama3, mixtral, qwen3, granite, phi4, smollm3).
FAMILIES: tuple[tuple[str, str], ...] = (
    (r"mixtral", "mixtral"),
    (r"mistral", "mistral"),
    (r"qwen3", "qwen3"),
    (r"qwen", "qwen2"),
    (r"granite", "granite"),
    (r"phi-?[34]", "phi3"),
    (r"llama|smollm", "llama"),
)
STAND_IN_LAYERS, STAND_IN_HIDDEN, STAND_IN_HEADS = 2, 64, 4
STAND_IN_SEED = 0
BYTE_VOCAB = 256
# A plain role-tagged transcript: enough for a byte-level model; real model directories bring their own template.
BYTE_CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


class ModelSourceError(NeurondeployError):
    exit_code = 2


@dataclass
class LanguageModel:
    model: object
    tokenizer: object
    served_name: str
    aliases: set[str]  # names a request's "model" may give
    eos_token_ids: set[int]
    description: str  # for the startup line
    max_positions: int | None


def byte_tokenizer():
    """A byte-level tokenizer: token id = byte value, so any text round-trips (GPT-2's byte-to-unicode alphabet
    over a BPE without merges, wrapped as a transformers fast tokenizer)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {_byte_symbol(value): value for value in range(BYTE_VOCAB)}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    wrapped = PreTrainedTokenizerFast(tokenizer_object=tokenizer)
    wrapped.chat_template = BYTE_CHAT_TEMPLATE
    return wrapped


def _byte_symbol(value: int) -> str:
    """GPT-2's printable stand-in for a byte: itself when printable, else a code point from 256 upwards."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    if value in printable:
        return chr(value)
    return chr(BYTE_VOCAB + sorted(set(range(BYTE_VOCAB)) - set(printable)).index(value))


def load_directory(path: Path) -> LanguageModel:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # the startup line says what loads; no bar per weight file
    if not (path / "config.json").is_file():
        raise ModelSourceError(f"{path} has no config.json", "give a Hugging Face causal-LM directory")
    has_tokenizer = any((path / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json"))
    tokenizer = AutoTokenizer.from_pretrained(path) if has_tokenizer else byte_tokenizer()
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    except (OSError, ValueError) as exc:
        raise ModelSourceError(
            f"{path}: not a causal LM transformers can load ({str(exc).splitlines()[0]})",
            "give a directory with config.json and model.safetensors of a causal LM",
        ) from None
    name = str(path)
    return LanguageModel(
        model,
        tokenizer,
        name,
        {name, path.name},
        _eos_ids(model, tokenizer),
        f"{type(model).__name__} from {path}"
        + ("" if has_tokenizer else " (byte-level tokenizer: none in the directory)"),
        getattr(model.config, "max_position_embeddings", None),
    )


def family_of(model_id: str, architecture: ModelArchitecture | None) -> str:
    lowered = model_id.lower()
    for pattern, model_type in FAMILIES:
        if re.search(pattern, lowered):
            return model_type
    return "llama" if architecture is None or architecture.gated_mlp else "gpt2"


def build_stand_in(model_id: str, architecture: ModelArchitecture | None, max_positions: int) -> LanguageModel:
    """The model id's architecture class at a few layers and 64 wide, random weights (seeded), byte vocabulary;
    grouped-query attention kept at the same ratio of query to key/value heads."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    model_type = family_of(model_id, architecture)
    ratio = 1
    if architecture and architecture.kv_heads:
        ratio = max(1, architecture.attention_heads // architecture.kv_heads)
    kv_heads = max(1, STAND_IN_HEADS // ratio)
    widths = {"hidden_size": STAND_IN_HIDDEN, "num_hidden_layers": STAND_IN_LAYERS, "vocab_size": BYTE_VOCAB}
    if model_type == "gpt2":
        settings = {"n_embd": STAND_IN_HIDDEN, "n_layer": STAND_IN_LAYERS, "n_head": STAND_IN_HEADS}
        settings |= {"vocab_size": BYTE_VOCAB, "n_positions": max_positions}
    else:
        settings = widths | {
            "num_attention_heads": STAND_IN_HEADS,
            "num_key_value_heads": kv_heads,
            "intermediate_size": 4 * STAND_IN_HIDDEN,
            "max_position_embeddings": max_positions,
        }
        if model_type in ("mistral", "mixtral", "qwen2", "qwen3"):
            settings["sliding_window"] = None
        if model_type == "qwen3":
            settings["head_dim"] = STAND_IN_HIDDEN // STAND_IN_HEADS
    config = AutoConfig.for_model(model_type, **settings)
    torch.manual_seed(STAND_IN_SEED)
    model = AutoModelForCausalLM.from_config(config).to(torch.float32).eval()
    printable_only(model)
    served = f"{model_id}:stand-in-{model_type}-{STAND_IN_LAYERS}x{STAND_IN_HIDDEN}-random"
    description = (
        f"STAND-IN for {model_id} (not on this machine, no hub here): {type(model).__name__} scaled down to "
        f"{STAND_IN_LAYERS} layers × {STAND_IN_HIDDEN} wide, {kv_heads}/{STAND_IN_HEADS} kv/query heads, random "
        f"weights, byte-level tokenizer; answers are meaningless text, served as {served!r}"
    )
    return LanguageModel(model, byte_tokenizer(), served, {served, model_id}, set(), description, max_positions)


PRINTABLE_BYTES = (ord("\n"), *range(ord(" "), ord("~") + 1))  # what the stand-in may write: a terminal shows it


def printable_only(model) -> None:
    """Random weights over a byte vocabulary write control characters and broken UTF-8 (raw bytes on the user's
    terminal): the stand-in's output layer gives every other byte -inf, so greedy and sampled text alike stay
    printable ASCII."""
    import torch

    blocked = torch.full((BYTE_VOCAB,), float("-inf"))
    blocked[list(PRINTABLE_BYTES)] = 0.0
    model.get_output_embeddings().register_forward_hook(lambda module, inputs, output: output + blocked)


def _eos_ids(model, tokenizer) -> set[int]:
    found = getattr(model.generation_config, "eos_token_id", None) if model.generation_config else None
    found = found if found is not None else tokenizer.eos_token_id
    if found is None:
        return set()
    return {found} if isinstance(found, int) else set(found)
