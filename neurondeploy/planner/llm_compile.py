"""Where `compile --remote` exports a decoder LLM: the smallest SageMaker training Neuron instance whose memory fits
the export, with the reasoning the CLI prints.

The rule (both must hold):

* **HBM**: the model as it will be served (weights + KV cache at the spec's batch and sequence, over TP cores,
  plus the runtime headroom) fits the host's NeuronCores: :func:`planner.sizing.inference_memory`, the same
  estimate that sizes the endpoint (aws-neuron-sdk about-neuron/transformers/generative-llm-inference-with-neuron.rst). The export host can then load what it compiled.
* **Host RAM** ≥ ``HOST_RAM_FACTOR`` × the weights at the export dtype. Our figure, not an AWS one, set from the
  reported failure in aws-neuron/aws-neuron-sdk issue 706 ("neuronx-cc failed with -9"): Llama-3.1-8B (15 GiB of bf16 weights) was OOM-killed compiling on
  trn1.2xlarge's 32 GiB (aws-neuron/neuronx-distributed#53), so 2× is too little; 3× (the checkpoint, its
  converted and sharded copy, and neuronx-cc's working set) puts that model on a larger host.

Candidates are the catalogue's types SageMaker training offers (``sagemaker_training``) whose NEFFs the deployment
can run (same ``artifact_target``: inf2 and trn1 share one, optimum-neuron optimum/neuron/utils/instance.py), ordered by host memory, then price.
"""

from __future__ import annotations

from dataclasses import dataclass

from neurondeploy import catalog
from neurondeploy.errors import PlanError
from neurondeploy.planner.sizing import DTYPE_BYTES, GIB, inference_memory, parameter_count
from neurondeploy.specs import InferenceSpec
from neurondeploy.specs.inference import ModelArchitecture

HOST_RAM_FACTOR = 3


@dataclass(frozen=True)
class CompileHost:
    instance_type: str  # SageMaker spelling, ml.<type>
    reasons: tuple[str, ...]


def llm_compile_host(spec: InferenceSpec, arch: ModelArchitecture | None) -> CompileHost:
    if arch is None:
        raise PlanError(
            f"{spec.name}: compile --remote sizes the export host from the model's shape, which is unknown",
            "set model.architecture (layers, hidden_size, attention_heads, kv_heads, vocab_size ...) from its config.json",
        )
    batch, sequence = max(spec.compile.batch_sizes), max(spec.compile.sequence_lengths)
    tp = spec.deployment.tensor_parallel
    target = catalog.get_instance(spec.deployment.instance_type).artifact_target
    weights_gib = parameter_count(arch) * DTYPE_BYTES[spec.model.dtype] / GIB
    ram_needed = HOST_RAM_FACTOR * weights_gib
    candidates = sorted(
        (
            it
            for it in catalog.instance_types().values()
            if it.sagemaker_training and it.artifact_target == target and it.neuron_cores >= tp
        ),
        key=lambda it: (it.host_memory_gib, it.price_usd_per_hour or float("inf")),
    )
    refused = []
    for instance in candidates:
        hbm = inference_memory(arch, instance.hbm_per_core_gib, tp, batch, sequence, spec.model.dtype)
        if instance.host_memory_gib < ram_needed:
            refused.append(f"{instance.name}: host RAM {instance.host_memory_gib} GiB < {ram_needed:.0f} GiB")
            continue
        if not hbm.fits:
            refused.append(
                f"{instance.name}: {hbm.per_core_gib:.1f} GiB per core > {hbm.available_per_core_gib:g} GiB HBM"
            )
            continue
        return CompileHost(
            f"ml.{instance.name}",
            (
                f"weights {weights_gib:.1f} GiB ({spec.model.dtype}); host RAM needed {HOST_RAM_FACTOR} × weights = "
                f"{ram_needed:.0f} GiB (a Llama-3.1-8B compile was OOM-killed on 32 GiB: neuronx-distributed#53)",
                f"HBM at TP={tp}, batch {batch} × {sequence}: {hbm.per_core_gib:.1f} of "
                f"{hbm.available_per_core_gib:g} GiB per core",
                *(f"not {line}" for line in refused),
                f"-> ml.{instance.name} ({instance.host_memory_gib} GiB host RAM, {instance.neuron_cores} NeuronCores)",
            ),
        )
    raise PlanError(
        f"{spec.name}: no SageMaker training Neuron instance fits the export ({'; '.join(refused) or 'none'})",
        "lower the batch or sequence length, raise deployment.tensor_parallel, or pick a smaller dtype",
    )
