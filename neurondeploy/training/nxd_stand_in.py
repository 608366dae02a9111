"""`train --local` of an ``engine: nxd-training`` spec. NxD Training needs torch-xla and Neuron devices, neither of
which exists on this machine, so the reference script (``pkg://neurondeploy/training/reference``) runs in its place:
the spec passes every check `validate` makes (NxD Training's layout rules, memory per NeuronCore, its config), then
a reference spec derived from it trains on its tokenized channel, with the layout scaled to the local processes
(``local_layout``), the model scaled to them (``local_model``, on the dataset's vocabulary) and the run cut to a few
steps of short sequences. What differs from NxD Training is said when it runs: precision, recomputation, sequence
parallel and the settings the reference script does not read.
"""

from __future__ import annotations

import dataclasses
import math

from neurondeploy.planner.checks import refuse_errors
from neurondeploy.resources.nxd_training_config import DEFAULT_MAX_STEPS, training_channel
from neurondeploy.specs import LoadedSpec
from neurondeploy.specs.training import REFERENCE_SOURCE
from neurondeploy.training.entry import with_overrides
from neurondeploy.training.local import LocalLayout, LocalTrainingError, local_layout

# The scaled-down run: a few steps of short sequences, a couple per data-parallel rank and micro-batch.
LOCAL_STEPS = 20
LOCAL_SEQUENCE_LENGTH = 128
LOCAL_SEQUENCES = 2  # per data-parallel rank and pipeline micro-batch
# The reference script's precision nearest to NxD Training's: the mixed types keep an fp32 master copy and compute
# in bf16, which is what autocast does with fp32 weights; stochastic rounding is a Neuron hardware rounding mode.
PRECISION = {
    "fp32": "fp32",
    "bf16-autocast": "bf16-autocast",
    "bf16-stochastic-rounding": "bf16-stochastic-rounding",
    "bf16-mixed": "bf16-autocast",
    "bf16-mixed-stochastic-rounding": "bf16-autocast",
}
RENAMED = {"gradient_clip": "max_grad_norm"}  # NxD Training's name -> the reference script's
NOT_READ = ("micro_batch_size", "min_learning_rate", "rope_theta")  # the stand-in derives or lacks them


def reference_stand_in(
    loaded: LoadedSpec, *, processes: int, overrides: dict[str, object]
) -> tuple[LoadedSpec, list[str]]:
    """The reference spec that trains here in place of ``loaded``'s NxD Training job, and the lines that say what
    differs. ``overrides`` (``--hp``) are checked as NxD Training's settings and win over the scaling."""
    given = loaded.spec.hyperparameters  # the spec's own, which the scaling takes its shares from
    loaded = with_overrides(loaded, _warmup_kept_in_share(overrides, given))
    spec = loaded.spec
    refuse_errors(loaded)  # the layout rules, the memory fit and the config, as validate checks them
    if spec.architecture.experts:
        raise LocalTrainingError(
            f"{spec.name}: a mixture-of-experts model trains with NxD Training only; the reference script that "
            "stands in for it here trains dense models, so nothing was started",
            "run it on SageMaker with `neurondeploy train` (plan shows its config and job)",
        )
    name = training_channel(spec)
    channel = spec.inputs[name]
    write = f"`neurondeploy data {loaded.path or 'SPEC'} --corpus FILE --tokenizer DIR --no-upload`"
    if not channel.local_path:
        raise LocalTrainingError(
            f"input channel {name} has only s3_uri; --local trains on a local copy of the tokenized dataset",
            f"set inputs.{name}.local_path: data/{name} and write it with {write}",
        )
    directory = loaded.base_dir / channel.local_path
    if not (directory / "state.json").is_file():
        raise LocalTrainingError(
            f"inputs.{name}.local_path {directory} holds no tokenized dataset (datasets' save_to_disk layout)",
            f"write it with {write}",
        )
    layout = local_layout(spec.distribution.tensor_parallel, spec.distribution.pipeline_parallel, processes)
    chunks = layout.pipeline_parallel  # micro-batches in flight: one per stage, as 1F1B fills the pipeline
    hyperparameters, cut = _hyperparameters(spec.hyperparameters, given, layout, chunks, set(overrides))
    d = spec.distribution
    distribution = d.model_copy(
        update={
            "precision": PRECISION[d.precision],
            "sequence_parallel": False,
            "checkpoint_granularity": "full",
            "microbatches": chunks if d.pipeline_parallel > 1 else 1,
        }
    )
    stand_in = spec.model_copy(
        update={
            "engine": "reference",
            "entry_point": "train.py",
            "source_dir": REFERENCE_SOURCE,
            "distribution": distribution,
            "hyperparameters": hyperparameters,
            "inputs": {"train": channel},  # the reference script reads SM_CHANNEL_TRAIN
        }
    )
    lines = [
        f"{spec.name}: NxD Training does not run on this machine (it needs torch-xla and Neuron devices); the "
        "reference script stands in for it, on the spec's layout and its tokenized channel at a scaled-down size. "
        "`plan` shows the NxD Training config and job that `neurondeploy train` starts on SageMaker",
    ]
    differences = _differences(d, spec.hyperparameters)
    if differences:
        lines.append(f"{spec.name}: stand-in differences: {', '.join(differences)}")
    if cut:
        lines.append(f"{spec.name}: run scaled down: {'; '.join(cut)} (--hp sets them)")
    return dataclasses.replace(loaded, spec=stand_in), lines


def _warmup_kept_in_share(overrides: dict[str, object], given: dict[str, object]) -> dict[str, object]:
    """``overrides`` with the spec's warmup taking its share of an overridden ``max_steps`` (as the run's scaling
    does), so that ``--hp max_steps=10`` is not refused for the spec's warmup of a longer run."""
    if "max_steps" not in overrides or "warmup_steps" in overrides or "warmup_steps" not in given:
        return overrides
    try:
        steps, warmup = int(str(overrides["max_steps"])), int(str(given["warmup_steps"]))
        share = warmup / max(1, int(str(given.get("max_steps", DEFAULT_MAX_STEPS))))
    except ValueError:
        return overrides  # refuse_errors names the value that is no number
    return {**overrides, "warmup_steps": min(math.ceil(share * steps), max(0, steps - 1))}


def _hyperparameters(
    values: dict[str, object], given: dict[str, object], layout: LocalLayout, chunks: int, kept: set[str]
) -> tuple[dict[str, object], list[str]]:
    """NxD Training's settings (``values``, with ``--hp``) as the reference script reads them, the run's size cut
    down unless ``kept`` (set by ``--hp``); warmup keeps its share of the spec's own run (``given``)."""
    out = {RENAMED.get(key, key): value for key, value in values.items() if key not in NOT_READ}
    local = {
        "max_steps": min(int(values.get("max_steps", LOCAL_STEPS)), LOCAL_STEPS),
        "sequence_length": min(int(values["sequence_length"]), LOCAL_SEQUENCE_LENGTH),
        "global_batch_size": layout.data_parallel * chunks * LOCAL_SEQUENCES,
    }
    steps = int(values["max_steps"]) if "max_steps" in kept else local["max_steps"]  # what this run trains
    if "warmup_steps" in given:
        share = int(given["warmup_steps"]) / max(1, int(given.get("max_steps", DEFAULT_MAX_STEPS)))
        local["warmup_steps"] = math.ceil(share * steps)
    cut = []
    for key, value in local.items():
        if key in kept or out.get(key) == value:
            continue
        cut.append(f"{key} {value} (the spec's {out[key]})" if key in out else f"{key} {value}")
        out[key] = value
    if layout.pipeline_parallel > 1:
        out["pipeline_schedule"] = "1f1b"  # NxD Training's pipeline schedule
    return out, cut


def _differences(d, hyperparameters: dict[str, object]) -> list[str]:
    said = []
    if PRECISION[d.precision] != d.precision:
        said.append(f"precision {d.precision} runs as {PRECISION[d.precision]}")
    if d.selective_checkpointing:
        said.append(f"selective recomputation ({', '.join(d.recompute)}) runs as whole-layer checkpointing")
    if d.sequence_parallel:
        said.append("no sequence parallel")
    unread = [key for key in NOT_READ if key in hyperparameters]
    if unread:
        said.append(f"not read: {', '.join(unread)}")
    return said
