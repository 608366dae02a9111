"""Sizing against deployments and figures that AWS, Hugging Face and model authors publish.

Each case names its source (a repository path or URL) and carries the model's config.json numbers, written here
(never fetched). A published deployment must fit at the published TP, batch and sequence length; a published
size must come out of the config; and where a rule predicts a refusal (Mixtral in 32 GB), the refusal is checked.
"""

from __future__ import annotations

import pytest

from neurondeploy import catalog
from neurondeploy.planner import sizing
from neurondeploy.planner.sizing import architecture_from_config_values

GIB = 1024**3

# --- config.json values, from the models' public repositories (Hugging Face hub, file config.json) ----------
MIXTRAL_8X7B = {  # mistralai/Mixtral-8x7B-Instruct-v0.1/config.json
    "model_type": "mixtral",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "vocab_size": 32000,
    "tie_word_embeddings": False,
}
MIXTRAL_8X22B = {  # mistralai/Mixtral-8x22B-Instruct-v0.1/config.json
    "model_type": "mixtral",
    "hidden_size": 6144,
    "intermediate_size": 16384,
    "num_hidden_layers": 56,
    "num_attention_heads": 48,
    "num_key_value_heads": 8,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "vocab_size": 32768,
    "tie_word_embeddings": False,
}
LLAMA_4_SCOUT = {  # meta-llama/Llama-4-Scout-17B-16E-Instruct/config.json (text_config)
    "model_type": "llama4",
    "tie_word_embeddings": False,
    "text_config": {
        "model_type": "llama4_text",
        "hidden_size": 5120,
        "intermediate_size": 8192,
        "intermediate_size_mlp": 16384,
        "num_hidden_layers": 48,
        "num_attention_heads": 40,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "num_local_experts": 16,
        "num_experts_per_tok": 1,
        "interleave_moe_layer_step": 1,
        "vocab_size": 202048,
    },
}
QWEN3_30B_A3B = {  # Qwen/Qwen3-30B-A3B/config.json
    "model_type": "qwen3_moe",
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "moe_intermediate_size": 768,
    "num_hidden_layers": 48,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "vocab_size": 151936,
    "tie_word_embeddings": False,
}
LLAMA_3_70B = {  # meta-llama/Llama-3.3-70B-Instruct/config.json (Llama-3.1-70B has the same shape)
    "model_type": "llama",
    "hidden_size": 8192,
    "intermediate_size": 28672,
    "num_hidden_layers": 80,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "tie_word_embeddings": False,
}
LLAMA_3_8B = {  # meta-llama/Llama-3.1-8B-Instruct/config.json
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "tie_word_embeddings": False,
}
LLAMA_3_2_1B = {  # meta-llama/Llama-3.2-1B/config.json
    "model_type": "llama",
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_hidden_layers": 16,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "vocab_size": 128256,
    "tie_word_embeddings": True,
}
GEMMA_7B = {  # google/gemma-7b/config.json (no tie_word_embeddings key: GemmaConfig ties by default)
    "model_type": "gemma",
    "hidden_size": 3072,
    "intermediate_size": 24576,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "head_dim": 256,
    "vocab_size": 256000,
}
MISTRAL_NEMO = {  # mistralai/Mistral-Nemo-Instruct-2407/config.json
    "model_type": "mistral",
    "hidden_size": 5120,
    "intermediate_size": 14336,
    "num_hidden_layers": 40,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 131072,
    "tie_word_embeddings": False,
}
LLAMA_2_13B = {  # meta-llama/Llama-2-13b-hf/config.json
    "model_type": "llama",
    "hidden_size": 5120,
    "intermediate_size": 13824,
    "num_hidden_layers": 40,
    "num_attention_heads": 40,
    "num_key_value_heads": 40,
    "vocab_size": 32000,
    "tie_word_embeddings": False,
}
LLAMA_2_7B = {  # meta-llama/Llama-2-7b-hf/config.json
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "vocab_size": 32000,
    "tie_word_embeddings": False,
}

# --- sources -------------------------------------------------------------------------------------------------
ON_BENCH = "github.com/huggingface/optimum-neuron docs/source/benchmarks/"
ON_CACHE = "huggingface.co/aws-neuron/optimum-neuron-cache inference-cache-config/"
DJL_TNX = (
    "github.com/deepjavalibrary/djl-serving serving/docs/lmi/tuning_guides/tnx_tuning_guide.md "
    "(TransformersNeuronX tuning guide)"
)
NXDI_GUIDE = "github.com/aws-neuron/aws-neuron-sdk libraries/nxd-inference/developer_guides/feature-guide.rst"
NXDI_GQA = (
    "github.com/aws-neuron/neuronx-distributed-inference src/neuronx_distributed_inference/modules/attention/gqa.py"
)

# (case, config, instance, TP, batch, sequence, backend, quantization, source)
PUBLISHED_DEPLOYMENTS = [
    (
        "Llama-3.3-70B, 64 heads at TP 24, batch 48",
        LLAMA_3_70B,
        "inf2.48xlarge",
        24,
        48,
        4096,
        "nxdi",
        "none",
        ON_BENCH + "inferentia-llama3.3-70b.mdx (BS1-BS48, sequence_length 4096, 24 cores on inf2.48xlarge)",
    ),
    (
        "Llama-3.1-8B at TP 8, batch 32",
        LLAMA_3_8B,
        "inf2.48xlarge",
        8,
        32,
        4096,
        "nxdi",
        "none",
        ON_BENCH + "inferentia-llama3.1-8b.mdx (BS32, 4096, 8 cores on inf2.48xlarge)",
    ),
    (
        "Llama-3.1-8B bs1 on trn1.2xlarge",
        LLAMA_3_8B,
        "trn1.2xlarge",
        2,
        1,
        4096,
        "nxdi",
        "none",
        NXDI_GUIDE + " (Llama-3.1-8B bs1 bf16 needs about 16 GB: trn1.2xlarge suffices)",
    ),
    (
        "Llama-3.1-70B bs1 on 16 cores of trn1.32xlarge",
        LLAMA_3_70B,
        "trn1.32xlarge",
        16,
        1,
        4096,
        "nxdi",
        "none",
        NXDI_GUIDE + " (Llama-3.1-70B bs1 needs about 148 GB: 16 NeuronCores of trn1.32xlarge)",
    ),
    (
        "Mixtral-8x7B, 32 heads at TP 24, batch 4",
        MIXTRAL_8X7B,
        "inf2.48xlarge",
        24,
        4,
        4096,
        "nxdi",
        "none",
        ON_CACHE + "mixtral.json @7342c16 (batch 1 and 4, sequence_length 4096, num_cores 24, bf16)",
    ),
    (
        "Mixtral-8x22B at TP 24, batch 4",
        MIXTRAL_8X22B,
        "inf2.48xlarge",
        24,
        4,
        4096,
        "nxdi",
        "none",
        ON_CACHE + "mixtral.json @7342c16 (Mixtral-8x22B-Instruct-v0.1, batch 4, 4096, num_cores 24)",
    ),
    (
        "Llama-4-Scout, 40 heads at TP 32 on trn1.32xlarge, batch 8",
        LLAMA_4_SCOUT,
        "trn1.32xlarge",
        32,
        8,
        4096,
        "nxdi",
        "none",
        ON_CACHE + "trn1/llama4.json @ecc0bf7 (batch 8, sequence_length 4096, tensor_parallel_size 32)",
    ),
    (
        "Llama-4-Scout at TP 16, batch 4",
        LLAMA_4_SCOUT,
        "trn1.32xlarge",
        16,
        4,
        4096,
        "nxdi",
        "none",
        ON_CACHE + "trn1/llama4.json @ecc0bf7 (batch 4, sequence_length 4096, tensor_parallel_size 16)",
    ),
    (
        "Llama-2-13B int8 on inf2.xlarge",
        LLAMA_2_13B,
        "inf2.xlarge",
        2,
        4,
        512,
        "transformers-neuronx",
        "int8",
        DJL_TNX + " (Llama2 13b (int8), inf2.xlarge, TP 2, max_rolling_batch_size 4, n_positions 512)",
    ),
    (
        "Llama-2-7B on inf2.xlarge",
        LLAMA_2_7B,
        "inf2.xlarge",
        2,
        4,
        2048,
        "transformers-neuronx",
        "none",
        DJL_TNX + " (Llama2 7b, inf2.xlarge, TP 2, batch 4, n_positions 2048)",
    ),
    (
        "Llama-2-13B on inf2.24xlarge",
        LLAMA_2_13B,
        "inf2.24xlarge",
        8,
        4,
        2048,
        "transformers-neuronx",
        "none",
        DJL_TNX + " (Llama2 13b, inf2.24xlarge, TP 8, batch 4, n_positions 2048)",
    ),
    (
        "Mistral-Nemo (head_dim 128) at TP 12",
        MISTRAL_NEMO,
        "inf2.48xlarge",
        12,
        4,
        4096,
        "transformers-neuronx",
        "none",
        ON_BENCH + "inferentia-mistral-nemo.mdx (BS4, 4096, 12 cores on inf2.48xlarge)",
    ),
]


@pytest.mark.parametrize(
    ("config", "instance_name", "tp", "batch", "sequence", "backend", "quantization", "source"),
    [case[1:] for case in PUBLISHED_DEPLOYMENTS],
    ids=[case[0] for case in PUBLISHED_DEPLOYMENTS],
)
def test_a_published_deployment_fits_where_it_was_published(
    config, instance_name, tp, batch, sequence, backend, quantization, source
):
    assert source  # every case says where it was published
    instance = catalog.get_instance(instance_name)
    assert tp in catalog.legal_tp_degrees(instance, backend)
    arch = architecture_from_config_values(config)
    estimate = sizing.inference_memory(
        arch, instance.hbm_per_core_gib, tp, batch, sequence, "bfloat16", backend=backend, quantization=quantization
    )
    assert estimate.fits, (estimate.per_core_gib, estimate.notes)
    offered = sizing.size_options(arch, batch, sequence, "bfloat16", backend, quantization=quantization)
    assert (instance_name, tp) in {(option.instance, option.tensor_parallel) for option in offered}


def test_mixtral_8x7b_is_sized_with_every_expert_and_does_not_fit_32_gb():
    # Mixtral paper / model card: 46.7B parameters, 12.9B used per token (mistral.ai/news/mixtral-of-experts).
    arch = architecture_from_config_values(MIXTRAL_8X7B)
    assert sizing.parameter_count(arch) == pytest.approx(46.7e9, rel=0.005)
    assert sizing.active_parameter_count(arch) == pytest.approx(12.9e9, rel=0.01)
    # 93 GB of bf16 weights: no instance with 32 GB of device memory (inf2.xlarge, inf2.8xlarge, trn1.2xlarge) fits it.
    for batch in (1, 4):
        options = sizing.size_options(arch, batch, 4096, "bfloat16")
        assert options, "it fits larger instances"
        assert not any(catalog.get_instance(o.instance).hbm_total_gib <= 32 for o in options)
    tp2 = sizing.inference_memory(arch, 16, 2, 1, 4096, "bfloat16")
    assert tp2.weights_gib > 2 * 16 and not tp2.fits


def test_mixtral_at_tp_24_pads_heads_and_replicates_kv_and_counts_both():
    # optimum-neuron-cache mixtral.json runs Mixtral-8x7B on 24 cores; 32 heads do not divide by 24.
    arch = architecture_from_config_values(MIXTRAL_8X7B)
    estimate = sizing.inference_memory(arch, 16, 24, 4, 4096, "bfloat16")
    assert (estimate.padded_heads, estimate.effective_kv_heads) == (48, 24)
    head_dim, layers, d = 128, 32, 4096
    extra_weights = layers * d * head_dim * 2 * ((48 - 32) + (24 - 8)) * 2  # q/o padding, k/v replication, bf16
    extra_kv = 4 * layers * 4096 * 2 * head_dim * (24 - 8) * 2
    assert estimate.padding_overhead_gib == pytest.approx((extra_weights + extra_kv) / GIB)
    assert estimate.padding_compute_fraction > 0.05  # 16 zero heads still run on every token
    assert any("padded to 48" in note for note in estimate.notes)


def test_mixtral_8x22b_and_llama_4_scout_total_and_active_parameters():
    # Mixtral-8x22B: 141B total, 39B active (mistral.ai/news/mixtral-8x22b).
    big = architecture_from_config_values(MIXTRAL_8X22B)
    assert sizing.parameter_count(big) == pytest.approx(141e9, rel=0.005)
    assert sizing.active_parameter_count(big) == pytest.approx(39e9, rel=0.01)
    # Llama-4-Scout: 17B active, 109B total with its vision encoder (~1.7B, not in text_config):
    # huggingface.co/meta-llama/Llama-4-Scout-17B-16E-Instruct model card.
    scout = architecture_from_config_values(LLAMA_4_SCOUT)
    assert (scout.experts, scout.experts_per_token, scout.shared_expert_intermediate_size) == (16, 1, 8192)
    assert sizing.parameter_count(scout) == pytest.approx(109e9 - 1.7e9, rel=0.01)
    assert sizing.active_parameter_count(scout) == pytest.approx(17e9, rel=0.02)


def test_llama_4_scout_at_tp_32_pads_40_heads_to_64():
    scout = architecture_from_config_values(LLAMA_4_SCOUT)
    estimate = sizing.inference_memory(scout, 16, 32, 8, 4096, "bfloat16")
    assert (estimate.padded_heads, estimate.effective_kv_heads) == (64, 32)
    # the KV cache holds 32 heads of 128, not 40 heads of hidden/heads
    assert estimate.kv_cache_gib == pytest.approx(8 * 48 * 4096 * 2 * 32 * 128 * 2 / GIB)
    assert not sizing.inference_memory(scout, 16, 8, 1, 4096, "bfloat16").fits  # 200 GiB of experts over 8 cores


def test_qwen3_moe_explicit_head_dim_and_active_parameters():
    # Qwen/Qwen3-30B-A3B model card: 30.5B total, 3.3B activated; head_dim 128 while hidden/heads is 64.
    arch = architecture_from_config_values(QWEN3_30B_A3B)
    assert arch.attention_head_dim == 128 != arch.hidden_size // arch.attention_heads
    assert sizing.parameter_count(arch) == pytest.approx(30.5e9, rel=0.005)
    assert sizing.active_parameter_count(arch) == pytest.approx(3.3e9, rel=0.02)
    estimate = sizing.inference_memory(arch, 16, 4, 1, 4096, "bfloat16")
    assert estimate.kv_cache_gib == pytest.approx(48 * 4096 * 2 * 4 * 128 * 2 / GIB)  # 4 KV heads of 128


def test_mistral_nemo_kv_cache_uses_the_configs_head_dim():
    arch = architecture_from_config_values(MISTRAL_NEMO)
    assert arch.attention_head_dim == 128  # not 5120 / 32 = 160
    assert sizing.parameter_count(arch) == pytest.approx(12.2e9, rel=0.01)  # "12B" (mistral.ai/news/mistral-nemo)
    estimate = sizing.inference_memory(arch, 16, 8, 4, 4096, "bfloat16")
    assert estimate.kv_cache_gib == pytest.approx(4 * 40 * 4096 * 2 * 8 * 128 * 2 / GIB)


def test_tied_embeddings_count_once_gemma_and_llama_3_2():
    # google/gemma-7b model card: 8.54B parameters; head_dim 256 × 16 heads is wider than hidden 3072.
    gemma = architecture_from_config_values(GEMMA_7B)
    assert gemma.tied_embeddings and gemma.attention_head_dim == 256
    assert sizing.parameter_count(gemma) == pytest.approx(8.54e9, rel=0.002)
    # meta-llama/Llama-3.2-1B model card: 1.23B parameters (1,235,814,400 in its safetensors).
    llama = architecture_from_config_values(LLAMA_3_2_1B)
    assert llama.tied_embeddings
    assert sizing.parameter_count(llama) == pytest.approx(1_235_814_400, rel=0.001)
    untied = llama.model_copy(update={"tied_embeddings": False})
    assert sizing.parameter_count(untied) - sizing.parameter_count(llama) == 128256 * 2048


def test_int8_weights_take_one_byte_and_the_kv_cache_stays_in_dtype():
    # DJL TransformersNeuronX tuning guide: Llama2-13B "(int8)" on inf2.xlarge, model size 13 GB (26 GB in fp16).
    arch = architecture_from_config_values(LLAMA_2_13B)
    full = sizing.inference_memory(arch, 16, 2, 4, 512, "bfloat16", backend="transformers-neuronx")
    int8 = sizing.inference_memory(arch, 16, 2, 4, 512, "bfloat16", backend="transformers-neuronx", quantization="int8")
    embeddings = 2 * 32000 * 5120
    assert int8.weights_gib * GIB == pytest.approx((sizing.parameter_count(arch) - embeddings) + embeddings * 2)
    assert int8.weights_gib * GIB / 1e9 == pytest.approx(13.3, abs=0.1)  # the guide's "13" GB
    assert full.weights_gib * GIB / 1e9 == pytest.approx(26.0, abs=0.1)  # the guide's "26" GB
    assert int8.kv_cache_gib == full.kv_cache_gib


def test_the_nxdi_head_rules_reproduce_the_examples_in_gqa_py():
    # NXDI_GQA, GQA.REPLICATE_TO_TP_DEGREE comment: tp_degree 32, num_attention_heads 56 -> 64, KV heads 8 -> 32.
    arch = sizing.ModelArchitecture(layers=1, hidden_size=56 * 128, attention_heads=56, kv_heads=8)
    assert sizing.head_layout(arch, 32) == (64, 32)
    # determine_sharding_strategy: TP not a multiple of the KV heads falls back to CONVERT_TO_MHA (KV = padded Q).
    assert sizing.head_layout(arch.model_copy(update={"attention_heads": 32, "hidden_size": 4096}), 12) == (36, 36)
    # MHA pads K/V like Q; KV heads a multiple of TP stay as they are.
    mha = sizing.ModelArchitecture(layers=1, hidden_size=9216, attention_heads=72)
    assert sizing.head_layout(mha, 32) == (96, 96)
    assert sizing.head_layout(arch.model_copy(update={"kv_heads": 8}), 4) == (56, 8)
    # the trace backend (one unsharded model per core) never pads
    assert sizing.head_layout(arch, 1, "trace") == (56, 8)
    assert NXDI_GQA


def test_llama_3_1_70b_needs_16_trn1_cores_as_the_nxdi_guide_says():
    arch = architecture_from_config_values(LLAMA_3_70B)
    sixteen = sizing.inference_memory(arch, 16, 16, 1, 4096, "bfloat16")
    assert (sixteen.weights_gib + sixteen.kv_cache_gib) * GIB / 1e9 == pytest.approx(148, rel=0.02)  # "about 148 GB"
    assert sixteen.fits and not sizing.inference_memory(arch, 16, 8, 1, 4096, "bfloat16").fits


@pytest.mark.parametrize(
    "config",
    [MIXTRAL_8X7B, MIXTRAL_8X22B, LLAMA_4_SCOUT, QWEN3_30B_A3B, GEMMA_7B, LLAMA_3_2_1B, MISTRAL_NEMO, LLAMA_3_70B],
    ids=[
        "mixtral-8x7b",
        "mixtral-8x22b",
        "llama-4-scout",
        "qwen3-30b-a3b",
        "gemma-7b",
        "llama-3.2-1b",
        "nemo",
        "llama-70b",
    ],
)
def test_the_count_from_the_shape_equals_transformers_own_modules(config):
    """transformers builds each model from the same config on the meta device (no memory): its weight matrices —
    every expert, the explicit head_dim, a tied head counted once — add up to exactly our count (norm weights aside,
    which the planner leaves out)."""
    import torch
    import transformers

    values = {key: value for key, value in config.items() if key != "model_type"}
    with torch.device("meta"):
        if config["model_type"] == "llama4":
            text = {key: value for key, value in values["text_config"].items() if key != "model_type"}
            model = transformers.Llama4ForCausalLM(transformers.Llama4TextConfig(**text, tie_word_embeddings=False))
        else:
            model = transformers.AutoModelForCausalLM.from_config(
                transformers.AutoConfig.for_model(config["model_type"], **values)
            )
    weights = sum(parameter.numel() for name, parameter in model.named_parameters() if "norm" not in name)
    assert sizing.parameter_count(architecture_from_config_values(config)) == weights
