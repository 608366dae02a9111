"""Training costs side by side, in one run, on the reference model (neurondeploy/training/reference/tiny_lm.py):

1. gradient checkpointing off vs on: peak memory of a training step (RSS above the process's level before the
   first step) and step time;
2. fp32 vs bf16 autocast: step time, and how far the loss moves apart over the same steps and data;
3. 1 vs 2 processes: tokens/s of the real `train --local` path (torchrun, DDP on gloo) at the same global batch.

(1) and (2) run each variant in a fresh process (peak RSS is per process), model sized so activations matter
(hidden 256, 6 layers, sequence 256, batch 4). (3) uses the template's tiny model through the launcher.

Beside (1), the planner's training-memory model (neurondeploy/planner/training_memory.py: Korthikanti et al. 2022,
adapted) predicts the same step's peak: activations of the micro-batch plus the gradients (the step allocates them:
the loop frees them with zero_grad(set_to_none=True)), and the ratio predicted / measured is printed.
Usage: python bench/train.py [--memory]   (--memory: only (1) and the prediction, about 30 s)
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT_DIR = REPO / "neurondeploy" / "training" / "reference"
STEPS, WARMUP, ROUNDS = 6, 2, 3
SHAPE = {"hidden_size": 256, "layers": 6, "heads": 8, "intermediate_size": 1024, "batch": 4, "sequence": 256}


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def worker(variant: dict) -> dict:
    """One variant, in this (fresh) process: the reference model and its loss, single process."""
    sys.path.insert(0, str(SCRIPT_DIR))
    import torch
    from tiny_lm import TinyLM, TinyLMConfig, causal_lm_loss

    torch.manual_seed(0)
    config = TinyLMConfig(
        hidden_size=SHAPE["hidden_size"],
        layers=SHAPE["layers"],
        heads=SHAPE["heads"],
        kv_heads=SHAPE["heads"],
        intermediate_size=SHAPE["intermediate_size"],
        max_positions=SHAPE["sequence"],
    )
    model = TinyLM(config)
    model.gradient_checkpointing = variant["checkpointing"]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(1)
    batches = [
        torch.randint(0, 256, (SHAPE["batch"], SHAPE["sequence"] + 1), generator=generator)
        for _ in range(STEPS + WARMUP)
    ]
    # Optimizer state exists after the first step; measure from there so only activations differ.
    times, losses, baseline = [], [], None
    for index, batch in enumerate(batches):
        if index == 1:
            baseline = _rss_mib()
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=variant["bf16"]):
            loss = causal_lm_loss(model(batch[:, :-1]), batch[:, 1:])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if index >= WARMUP:
            times.append(time.perf_counter() - start)
        losses.append(loss.item())
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"step_s": statistics.median(times), "peak_step_mib": peak - baseline, "losses": losses}


def run_variant(**variant) -> dict:
    output = subprocess.run(
        [sys.executable, __file__, "--worker", json.dumps(variant)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "OMP_NUM_THREADS": str(os.cpu_count() or 1)},
    )
    return json.loads(output.stdout)


def run_variants(variants: dict[str, dict]) -> dict[str, dict]:
    """ROUNDS rounds, the variants interleaved in each, so a busy spell of the machine hits all of them; medians."""
    runs = {name: [] for name in variants}
    for _ in range(ROUNDS):
        for name, variant in variants.items():
            runs[name].append(run_variant(**variant))
    return {
        name: {
            "step_s": statistics.median(r["step_s"] for r in results),
            "peak_step_mib": statistics.median(r["peak_step_mib"] for r in results),
            "losses": results[0]["losses"],
        }
        for name, results in runs.items()
    }


def processes_throughput(processes: int, work: Path) -> float:
    """Median tokens/s of the logged steps of `train --local` on the tiny template (skips the first 3 steps)."""
    from neurondeploy.specs import load_spec
    from neurondeploy.training.local import run_local_training

    loaded = load_spec(REPO / "templates" / "tiny-lm-train-local.yaml")
    result = run_local_training(
        loaded,
        processes=processes,
        work_dir=work,
        hyperparameters={"max_steps": 40, "log_every": 1, "global_batch_size": 32},
    )
    records = [json.loads(line) for line in (work / "output" / "data" / "metrics.jsonl").read_text().splitlines()]
    seconds = statistics.median(r["step_seconds"] for r in records if r["step"] > 3)
    assert result.last_step == 40
    return 32 * 64 / seconds


def predicted_step_mib(checkpointing: bool) -> tuple[float, float, float]:
    """(activations, gradients, their sum) in MiB, as the planner sizes the reference model's fp32 step."""
    from neurondeploy.planner.sizing import parameter_count
    from neurondeploy.planner.training_memory import TrainingLoad, activation_bytes
    from neurondeploy.specs.inference import ModelArchitecture

    arch = ModelArchitecture(
        layers=SHAPE["layers"],
        hidden_size=SHAPE["hidden_size"],
        attention_heads=SHAPE["heads"],
        vocab_size=256,
        intermediate_size=SHAPE["intermediate_size"],
        gated_mlp=True,  # the reference model's SwiGLU
    )
    load = TrainingLoad(sequence_length=SHAPE["sequence"], micro_batch=SHAPE["batch"])
    activations = activation_bytes(arch, load, precision="fp32", checkpointing=checkpointing) / 2**20
    gradients = parameter_count(arch) * 4 / 2**20  # fp32; rotary positions have no parameters
    return activations, gradients, activations + gradients


def print_memory(plain: dict, checkpointed: dict) -> None:
    print(
        f"gradient checkpointing: peak step memory {plain['peak_step_mib']:.0f} MiB -> {checkpointed['peak_step_mib']:.0f} MiB "
        f"(ratio {checkpointed['peak_step_mib'] / plain['peak_step_mib']:.2f}); step time {plain['step_s'] * 1000:.0f} ms -> "
        f"{checkpointed['step_s'] * 1000:.0f} ms (ratio {checkpointed['step_s'] / plain['step_s']:.2f})"
    )
    for name, measured, checkpointing in (("without", plain, False), ("with", checkpointed, True)):
        activations, gradients, total = predicted_step_mib(checkpointing)
        print(
            f"planner's training-memory model, {name} checkpointing: predicted {total:.0f} MiB (activations "
            f"{activations:.0f} + gradients {gradients:.0f}), measured {measured['peak_step_mib']:.0f} MiB, "
            f"ratio predicted/measured {total / measured['peak_step_mib']:.2f}"
        )


def main(memory_only: bool = False) -> None:
    variants = {
        "plain": {"checkpointing": False, "bf16": False},
        "checkpointed": {"checkpointing": True, "bf16": False},
    }
    if not memory_only:
        variants["bf16"] = {"checkpointing": False, "bf16": True}
    results = run_variants(variants)
    plain, checkpointed = results["plain"], results["checkpointed"]
    print(
        f"reference model {SHAPE}, median step of {STEPS} after {WARMUP} warm-up, median of {ROUNDS} interleaved "
        f"rounds, {os.cpu_count()} cores"
    )
    print_memory(plain, checkpointed)
    if memory_only:
        return
    bf16 = results["bf16"]
    drift = max(abs(a - b) for a, b in zip(plain["losses"], bf16["losses"]))
    print(
        f"fp32 vs bf16 autocast: step time {plain['step_s'] * 1000:.0f} ms vs {bf16['step_s'] * 1000:.0f} ms "
        f"(ratio {bf16['step_s'] / plain['step_s']:.2f}); loss after {STEPS + WARMUP} steps {plain['losses'][-1]:.4f} vs "
        f"{bf16['losses'][-1]:.4f}, largest difference over the steps {drift:.4f}"
    )
    with tempfile.TemporaryDirectory() as directory:
        one = processes_throughput(1, Path(directory) / "one")
        two = processes_throughput(2, Path(directory) / "two")
    print(
        f"train --local, tiny template, global batch 32 × 64: 1 process {one:,.0f} tokens/s, 2 processes (DDP, gloo) "
        f"{two:,.0f} tokens/s (ratio {two / one:.2f})"
    )


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        print(json.dumps(worker(json.loads(sys.argv[2]))))
    else:
        main(memory_only="--memory" in sys.argv[1:])
