"""NxD Training's YAML config for a training spec with ``engine: nxd-training`` (Llama-family models), rendered from
the spec the way NxD Training's own example configs are written, and the files the job's launch adds to its code.

The structure and every value not taken from the spec are those of NxD Training's Llama example configs
(``examples/conf/hf_llama3_8B_config.yaml``, ``hf_llama3_70B_config.yaml``, ``hf_llama3.1_405B_trn1_config.yaml`` in
aws-neuron/neuronx-distributed-training at 9169aa03f39efd4eb02da63891a7ed98defb1714, NxD Training 1.6.0, Neuron SDK
2.26.0; the top-level keys as ``docs/general/config_overview.rst`` lists them there). The spec gives: the nodes and
NeuronCores, the layout (TP, PP, ZeRO-1, sequence parallel, KV replication up to TP), micro and global batch, sequence
length, the model's shape, activation checkpointing, precision, optimizer and schedule from hyperparameters, the
checkpoint cadence and the compile cache. Paths are SageMaker's: the code under ``/opt/ml/code``, the data channel
under ``/opt/ml/input/data``, checkpoints (and logs) in the spec's checkpoint local path, which SageMaker syncs with its
S3 URI.

The launch is the SageMaker Python SDK's for Trainium recipes (``src/sagemaker/modules/train/sm_recipes/utils.py``,
``_configure_trainium_args`` and ``_get_args_from_recipe``): the code is NxD Training's ``examples`` directory, the
entry its ``training_orchestrator.py`` under torchrun, the config saved beside it and named by the hyperparameters
``config-path`` and ``config-name`` (Hydra's options). :func:`job_files` is what the launch writes beside the code: the
config and the model's ``config.json``, which NxD Training's Llama module reads with ``LlamaConfig.from_pretrained``
(``lightning_modules/model/hf_models/llama_model.py``).

A model with experts is rendered as ``examples/conf/hf_mixtral_8x7b_config.yaml`` differs from the Llama files (the
``model.moe`` block, and :func:`_mixture_of_experts`), its config.json as Mixtral's; NxD Training's ``training.py``
builds its Mixtral module for a config whose name holds "mixtral".

Not verified here: NxD Training itself (it needs torch-xla and Neuron devices), and the 1.7.0 that the 2.27 to 2.30
training images ship, whose source this machine does not have; a key it renamed would show when the job starts.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import yaml

from neurondeploy import catalog
from neurondeploy.errors import CatalogError, PlanError
from neurondeploy.specs.inference import strip_ml_prefix
from neurondeploy.specs.training import TrainingSpec

CODE_DIR = "/opt/ml/code"  # where SageMaker unpacks source_dir
DATA_DIR = "/opt/ml/input/data"
ENTRY_POINT = "training_orchestrator.py"  # NxD Training's examples/, beside training.py, which it imports
CONFIG_FILE = "nxd-training-config.yaml"
MODEL_CONFIG_FILE = "config.json"
# trainer.max_steps of the 70B and 405B example configs (examples/conf/hf_llama3_70B_config.yaml).
DEFAULT_MAX_STEPS = 30000
# The hyperparameters the config takes (the rest of it is the spec's layout); NxD Training reads no --key value
# arguments, so any other one would be dropped without a word.
CONFIG_HYPERPARAMETERS = (
    "sequence_length",
    "micro_batch_size",
    "global_batch_size",
    "max_steps",
    "learning_rate",
    "min_learning_rate",
    "warmup_steps",
    "weight_decay",
    "gradient_clip",
    "rope_theta",
    "seed",
    "log_every",
)
# What each numeric hyperparameter must be when the job starts: a whole number of at least the minimum, or a finite
# real above (">") or at least (">=") the bound. A string, a NaN, -1 steps (an unbounded run) or a negative rate
# passes SageMaker and fails (or runs until max_runtime_s) only after the instances start.
WHOLE_NUMBERS = {
    "sequence_length": 1,
    "micro_batch_size": 1,
    "global_batch_size": 1,
    "max_steps": 1,
    "warmup_steps": 0,
    "seed": 0,
    "log_every": 1,
}
REAL_NUMBERS = {
    "learning_rate": (">", 0.0),
    "min_learning_rate": (">=", 0.0),
    "weight_decay": (">=", 0.0),
    "gradient_clip": (">=", 0.0),
    "rope_theta": (">", 0.0),
}
RECOMPUTE_MODULES = {"attention": "CoreAttention", "mlp": "LlamaMLP"}  # NxD Training's module names
# (precision.type, master_weights, fp32_grad_acc) for our precision names. training_orchestrator.py sets the
# XLA and stochastic-rounding variables from the type; the two flags are read for type manual only
# (docs/general/config_overview.rst, Precision), and are rendered as what the type does.
PRECISION = {
    "fp32": ("fp32", False, False),
    "bf16-autocast": ("autocast", False, False),
    "bf16-stochastic-rounding": ("bf16SR", False, False),
    "bf16-mixed": ("mixed_precision", True, True),
    "bf16-mixed-stochastic-rounding": ("mixed_precision_SR", True, True),
}
STOCHASTIC_ROUNDING = ("bf16SR", "mixed_precision_SR")


def _sequence_length(spec: TrainingSpec) -> int:
    return int(spec.hyperparameters["sequence_length"])


def training_channel(spec: TrainingSpec) -> str | None:
    """The channel NxD Training trains from (``data.train_dir``): the first with format tokenized."""
    return next((name for name, channel in spec.inputs.items() if channel.format == "tokenized"), None)


def _rope_theta(spec: TrainingSpec) -> float:
    # Llama 3's config.json has 500000.0, Mixtral's 1000000.0 (as their example configs)
    return float(spec.hyperparameters.get("rope_theta", 1e6 if spec.architecture.experts else 5e5))


def _experts_problems(spec: TrainingSpec) -> list[tuple[str, str, str]]:
    """What NxD Training's Mixtral module cannot build: its decoder layer is attention and routed experts, every
    layer (modeling_mixtral.py); dropless routing needs a gated SiLU MLP (training_orchestrator.py)."""
    arch, problems = spec.architecture, []
    if arch.shared_expert_intermediate_size or arch.dense_layers:
        problems.append(
            (
                "architecture.experts",
                "NxD Training's Mixtral module has routed experts in every layer, without shared experts or dense "
                "layers",
                "train this model with engine: reference, or remove shared_expert_intermediate_size / dense_layers",
            )
        )
    if spec.distribution.precision == "bf16-autocast":
        problems.append(
            (
                "distribution.precision",
                "NxD Training's autocast is supported for its Hugging Face Llama models only",
                "use bf16-mixed, its published Mixtral config's precision",
            )
        )
    if spec.distribution.expert_capacity_factor == 0 and not arch.gated_mlp:
        problems.append(
            (
                "distribution.expert_capacity_factor",
                "0 is dropless routing, which NxD Training runs with a gated (GLU) SiLU MLP only",
                "set gated_mlp: true (Mixtral's experts are gated), or a capacity factor above 0",
            )
        )
    return problems


def _number_problem(name: str, value: Any) -> str | None:
    """What is wrong with hyperparameter ``name``'s value, or None."""
    is_number = isinstance(value, int | float) and not isinstance(value, bool)
    if name in WHOLE_NUMBERS:
        minimum = WHOLE_NUMBERS[name]
        whole = is_number and math.isfinite(value) and value == int(value)
        if not whole or value < minimum:
            return f"is {value!r}; NxD Training needs a whole number of at least {minimum}"
        return None
    if name in REAL_NUMBERS:
        relation, bound = REAL_NUMBERS[name]
        wanted = f"a finite number {'above' if relation == '>' else 'of at least'} {bound:g}"
        if not is_number or not math.isfinite(value) or (value <= bound if relation == ">" else value < bound):
            return f"is {value!r}; NxD Training needs {wanted}"
    return None


def _data_parallel(spec: TrainingSpec) -> int | None:
    d = spec.distribution
    try:
        cores = catalog.get_instance(strip_ml_prefix(spec.instance_type)).neuron_cores
    except CatalogError:
        return None  # check_instance reports it
    return d.data_parallel or max(1, cores * spec.instance_count // (d.tensor_parallel * d.pipeline_parallel))


def hyperparameter_problems(spec: TrainingSpec) -> list[tuple[str, str, str]]:
    """(field, what is wrong, fix) for the numbers NxD Training would stop on, or run forever with, after the
    instances start: each one's type and range, then how they must agree."""
    hp = spec.hyperparameters
    problems = []
    for name in [n for n in CONFIG_HYPERPARAMETERS if n in hp]:
        problem = _number_problem(name, hp[name])
        if problem:
            problems.append((f"hyperparameters.{name}", problem, "write the number without quotes, in range"))
    if problems:
        return problems
    max_steps = hp.get("max_steps", DEFAULT_MAX_STEPS)
    if hp.get("warmup_steps", 0) >= max_steps:
        problems.append(
            (
                "hyperparameters.warmup_steps",
                f"warmup_steps {hp['warmup_steps']} is not below max_steps {max_steps}: the run would end in warmup",
                "warm up for a fraction of the run (the examples: 10%)",
            )
        )
    if "min_learning_rate" in hp and hp["min_learning_rate"] > hp.get("learning_rate", hp["min_learning_rate"]):
        problems.append(
            (
                "hyperparameters.min_learning_rate",
                f"min_learning_rate {hp['min_learning_rate']} is above learning_rate {hp['learning_rate']}",
                "set it below the peak learning rate",
            )
        )
    data_parallel = _data_parallel(spec)
    micro, global_ = hp.get("micro_batch_size"), hp.get("global_batch_size")
    # The global batch is micro-batches across the data-parallel ranks, accumulated a whole number of times
    # (NxD Training's data module, as the Megatron microbatch calculator it follows).
    if data_parallel and micro and global_ and global_ % (micro * data_parallel):
        step = micro * data_parallel
        problems.append(
            (
                "hyperparameters.global_batch_size",
                f"global_batch_size {global_} is not a multiple of micro_batch_size {micro} × data parallel "
                f"{data_parallel} = {step}",
                f"use a multiple of {step}, e.g. {max(step, global_ // step * step)}",
            )
        )
    return problems


def config_problems(spec: TrainingSpec) -> list[tuple[str, str, str]]:
    """(spec field, what is wrong, fix) for a dense spec whose config cannot be rendered as it would train: checked
    by validate, so `train` never uploads a config NxD Training would misread."""
    arch, hp = spec.architecture, spec.hyperparameters
    problems = []
    if arch is None:
        problems.append(
            (
                "architecture",
                "engine nxd-training builds the model from `architecture` (NxD Training reads it as config.json)",
                "give architecture: the model's config.json numbers",
            )
        )
    elif arch.head_dim and arch.head_dim * arch.attention_heads != arch.hidden_size:
        # llama_model.py sets config.head_dim = hidden_size // num_attention_heads, whatever config.json says
        problems.append(
            (
                "architecture.head_dim",
                f"head_dim {arch.head_dim} is not hidden_size / attention_heads; NxD Training's Llama module "
                f"overrides it with {arch.hidden_size // arch.attention_heads}, so the job would train another model",
                "remove head_dim, or use engine: reference",
            )
        )
    missing = [key for key in ("sequence_length", "micro_batch_size", "global_batch_size") if key not in hp]
    if missing:
        problems.append(
            (
                "hyperparameters",
                f"NxD Training needs {', '.join(missing)}",
                "set them (NxD Training's model.encoder_seq_length, data.micro_batch_size, data.global_batch_size)",
            )
        )
    if training_channel(spec) is None:
        problems.append(
            (
                "inputs",
                "NxD Training's HF data module loads its training data from a channel with format: tokenized "
                "(datasets.load_from_disk of data.train_dir)" + ("" if spec.inputs else "; the spec has no channel"),
                "add inputs.train with s3_uri and format: tokenized, and fill it with `neurondeploy data`",
            )
        )
    if arch is not None and arch.experts:
        problems += _experts_problems(spec)
    problems += hyperparameter_problems(spec)
    for name in sorted(set(hp) - set(CONFIG_HYPERPARAMETERS)):
        problems.append(
            (
                f"hyperparameters.{name}",
                "is not a setting of NxD Training's config, which is all its job reads (it takes no --key value)",
                f"remove it; the config takes {', '.join(CONFIG_HYPERPARAMETERS)}",
            )
        )
    return problems


def nxd_training_config(spec: TrainingSpec, cores_per_node: int) -> dict[str, Any]:
    """The config NxD Training's ``training_orchestrator.py`` reads for ``spec`` (module doc)."""
    arch, d, hp = spec.architecture, spec.distribution, spec.hyperparameters
    problems = config_problems(spec)
    if problems:
        field, message, fix = problems[0]
        raise PlanError(f"{spec.name}: {field}: {message}", fix)
    max_steps = int(hp.get("max_steps", DEFAULT_MAX_STEPS))
    selective = d.selective_checkpointing
    kind, master_weights, fp32_grad_acc = PRECISION[d.precision]
    channel = training_channel(spec)
    name = _name(spec)
    config = {
        "name": name,
        "model_source": "hf",
        "seed": int(hp.get("seed", 1234)),
        "trainer": {
            "devices": cores_per_node,
            "num_nodes": spec.instance_count,
            "max_epochs": -1,
            "max_steps": max_steps,
            "log_every_n_steps": int(hp.get("log_every", 10)),
            "val_check_interval": max_steps + 1,  # no validation while training, as the examples
            "check_val_every_n_epoch": None,
            "num_sanity_val_steps": 0,
            "limit_val_batches": 0.0,
            "limit_test_batches": 0.0,
            "gradient_clip_val": float(hp.get("gradient_clip", 1.0)),
        },
        "exp_manager": {
            "log_local_rank_0_only": True,
            "create_tensorboard_logger": True,
            "explicit_log_dir": spec.checkpoint.local_path,
            "exp_dir": None,
            "name": name,
            "resume_if_exists": spec.checkpoint.resume,
            "resume_ignore_no_checkpoint": True,
            "create_checkpoint_callback": True,
            "checkpoint_callback_params": {
                "monitor": "step",
                "save_top_k": 1,
                "mode": "max",
                "save_last": False,
                "filename": f"{spec.name}--{{step}}-{{consumed_samples}}",
                "model_parallel_size": d.tensor_parallel * d.pipeline_parallel,
                "every_n_train_steps": spec.checkpoint.every_steps,
                "use_master_weights_in_ckpt": False,
            },
            "log_parameter_norm": True,
            "log_gradient_norm": True,
            "enable_recovery_time_instrumentation": False,
            "save_xser": True,
            "load_xser": True,
            "save_bf16": False,
            "async_checkpointing": False,
            "resume_from_checkpoint": None,
        },
        "distributed_strategy": {
            "tensor_model_parallel_size": d.tensor_parallel,
            "pipeline_model_parallel_size": d.pipeline_parallel,
            "virtual_pipeline_model_parallel_size": 1,
            "context_parallel_size": 1,
            "zero1": d.zero1,
            "sequence_parallel": d.sequence_parallel,
            # KV heads copied up to TP (each rank needs whole ones): 8 KV heads at TP 32 is 4
            "kv_replicator": max(1, d.tensor_parallel // arch.key_value_heads),
        },
        "data": {
            "micro_batch_size": int(hp["micro_batch_size"]),
            "global_batch_size": int(hp["global_batch_size"]),
            "train_dir": f"{DATA_DIR}/{channel}" if channel else None,
        },
        "model": {
            "model_config": f"{CODE_DIR}/{MODEL_CONFIG_FILE}",
            "encoder_seq_length": _sequence_length(spec),
            "max_position_embeddings": _sequence_length(spec),
            "num_layers": arch.layers,
            "hidden_size": arch.hidden_size,
            "qkv_linear": True,
            "fuse_qkv": True,
            "rope_theta": _rope_theta(spec),
            "use_cpu_initialization": True,
            "activations_checkpoint_granularity": d.checkpoint_granularity if d.gradient_checkpointing else None,
            "activations_checkpoint_recompute": [RECOMPUTE_MODULES[name] for name in d.recompute]
            if selective
            else None,
            "fusions": {"softmax": True, "flash_attention": True},
            "do_layer_norm_weight_decay": True,
            "optim": {
                "name": "adamw",
                "lr": float(hp.get("learning_rate", 1.5e-5)),
                "weight_decay": float(hp.get("weight_decay", 0.1)),
                "capturable": False,
                "betas": [0.9, 0.95],
                "sched": {
                    "name": "CosineAnnealing",
                    "warmup_steps": int(hp.get("warmup_steps", 2000)),
                    "max_steps": max_steps,
                    "min_lr": float(hp.get("min_learning_rate", 1e-6)),
                    "constant_steps": 0,
                },
            },
        },
        "precision": {
            "type": kind,
            "master_weights": master_weights,
            "fp32_grad_acc": fp32_grad_acc,
            "xla_use_bf16": "0",
            "xla_downcast_bf16": "0",
            "neuron_rt_stochastic_rounding_en": "1" if kind in STOCHASTIC_ROUNDING else "0",
        },
        "compiler_flags": "--model-type transformer",
        "compiler_cache_url": spec.compile_cache_uri or "/var/tmp/neuron-compile-cache",
        "aync_exec_max_inflight_requests": 5,  # sic: NxD Training's key
        "bucket_size_collectives": 1024,
        "neuron_rt_exec_timeout": 100,
        "neuron_experimental_compress_rg": False,
    }
    return _omegaconf_literal(_mixture_of_experts(config, spec) if arch.experts else config)


_INTERPOLATION = re.compile(r"(\\*)\$\{")


def _omegaconf_literal(value: Any) -> Any:
    r"""``value`` with every string written so that OmegaConf, which resolves NxD Training's Hydra config in the job,
    reads it back as it is: ``${`` is an interpolation there (``${oc.env:AWS_SECRET_ACCESS_KEY}`` in a checkpoint path
    would put a credential in a path and a log). ``\${`` is a literal ``${``, and backslashes before it are doubled
    (https://omegaconf.readthedocs.io/en/2.2_branch/grammar.html#escaping-in-top-level-strings)."""
    if isinstance(value, str):
        return _INTERPOLATION.sub(lambda m: m.group(1) * 2 + "\\${", value)
    if isinstance(value, dict):
        return {key: _omegaconf_literal(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_omegaconf_literal(item) for item in value]
    return value


def _name(spec: TrainingSpec) -> str:
    # training.py builds HFMixtralModule when "mixtral" is in the config's name, HFLLamaModule otherwise
    return "hf_mixtral" if spec.architecture.experts else "hf_llama"


def _mixture_of_experts(config: dict[str, Any], spec: TrainingSpec) -> dict[str, Any]:
    """The Llama config made Mixtral's, as ``examples/conf/hf_mixtral_8x7b_config.yaml`` differs from the Llama
    files: the model.moe block (what mixtral_model.py reads from it), expert parallel 1, no KV replicator, fused QKV
    or context parallel keys, NKI flash attention off, a capturable optimizer, fp32 gradients' collectives off, the
    compiler's saturate-infinity flag and 7 in-flight requests."""
    arch, d = spec.architecture, spec.distribution
    strategy = config["distributed_strategy"]
    for key in ("kv_replicator", "context_parallel_size"):
        strategy.pop(key)
    strategy["expert_model_parallel_size"] = 1
    model = config["model"]
    for key in ("qkv_linear", "fuse_qkv", "do_layer_norm_weight_decay"):
        model.pop(key)
    model["moe"] = {
        "num_experts": arch.experts,
        "frequency": 1,  # every layer
        "dropout": 0.0,
        "capacity_factor": d.expert_capacity_factor,
        "dropless": d.expert_capacity_factor == 0,
        "routing_algorithm": "top_k",
        "top_k": arch.experts_per_token or 1,
        "output_router_logits": True,
        "router_aux_loss_coef": 0.02,
        "normalize_top_k_affinities": True,
    }
    model["fusions"]["flash_attention"] = False
    model["optim"]["capturable"] = True
    config["precision"]["fp32_grads_cc"] = False
    config["compiler_flags"] = "--model-type transformer --enable-saturate-infinity"
    config["aync_exec_max_inflight_requests"] = 7
    return config


def model_config(spec: TrainingSpec) -> dict[str, Any]:
    """The model's Hugging Face ``config.json`` from ``architecture``, as ``LlamaConfig.from_pretrained`` (or
    ``MixtralConfig``'s, for experts) reads it: the keys of meta-llama's Llama-3 and mistralai's Mixtral config.json;
    the config's ``model`` block sets layers, width, sequence length and rope_theta over it, and both say the same."""
    arch = spec.architecture
    family = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "intermediate_size": arch.dense_intermediate_size,
    }
    if arch.experts:
        family = {
            "architectures": ["MixtralForCausalLM"],
            "model_type": "mixtral",
            "intermediate_size": arch.expert_intermediate_size or arch.dense_intermediate_size,  # one expert's
            "num_local_experts": arch.experts,
            "num_experts_per_tok": arch.experts_per_token or 1,
            "router_aux_loss_coef": 0.02,
            "output_router_logits": True,
        }
    return {
        **family,
        "hidden_size": arch.hidden_size,
        "num_hidden_layers": arch.layers,
        "num_attention_heads": arch.attention_heads,
        "num_key_value_heads": arch.key_value_heads,
        "vocab_size": arch.vocab_size,
        "max_position_embeddings": _sequence_length(spec),
        "rope_theta": _rope_theta(spec),
        "rms_norm_eps": 1e-05,
        "hidden_act": "silu",
        "tie_word_embeddings": arch.tied_embeddings,
        "torch_dtype": "float32" if spec.distribution.precision == "fp32" else "bfloat16",
    }


def job_files(spec: TrainingSpec, cores_per_node: int) -> dict[str, bytes]:
    """What the launch writes beside NxD Training's examples in the job's code (module doc): the config and the
    model's config.json, byte for byte the same for the same spec (the source archive is content-addressed)."""
    config = nxd_training_config(spec, cores_per_node)
    return {
        CONFIG_FILE: yaml.safe_dump(config, sort_keys=False).encode(),
        MODEL_CONFIG_FILE: (json.dumps(model_config(spec), indent=2) + "\n").encode(),
    }


def launch_hyperparameters() -> dict[str, str]:
    """What the training toolkit passes to the entry as ``--config-path . --config-name <file>``: Hydra's options,
    naming the config beside the code (the SDK's recipe launch passes the same two)."""
    return {"config-path": ".", "config-name": CONFIG_FILE}
