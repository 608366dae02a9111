"""Compile cost side by side, in one process on the same model and buckets (the MiniLM SageMaker template).

- raw: what a user would write by hand — load the model, torch.jit.trace each bucket, torch.jit.save it;
- cold: `compile_spec` into an empty cache, minus the numerical check (reported separately), goal ≤ 1.2 × raw;
- warm: `compile_spec` again, every bucket a cache hit, goal ≤ 0.05 × cold.
Imports are warmed first so no side pays them. Median of RUNS.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from neurondeploy.compiler.cache import CompileCache
from neurondeploy.compiler.compile import compile_spec
from neurondeploy.compiler.models import load_model
from neurondeploy.specs import load_spec

RUNS = 3
TEMPLATE = Path(__file__).parents[1] / "templates" / "minilm-sagemaker.yaml"


def raw_trace(loaded) -> float:
    start = time.perf_counter()
    model = load_model(loaded.spec, loaded.base_dir)
    with tempfile.TemporaryDirectory() as directory, torch.no_grad():
        for batch, length in loaded.spec.compile.buckets:
            inputs = model.example_inputs(batch, length)
            traced = torch.jit.trace(model.module, inputs, check_trace=False)
            torch.jit.save(traced, f"{directory}/b{batch}_{length}.pt")
    return time.perf_counter() - start


def ours(loaded, cache_root: Path, out: Path) -> tuple[float, float]:
    start = time.perf_counter()
    result = compile_spec(loaded, backend="cpu", cache=CompileCache(root=cache_root), out_dir=out)
    elapsed = time.perf_counter() - start
    check = sum(bucket.check_s for bucket in result.buckets if not bucket.cache_hit)
    return elapsed, check


def main() -> None:
    loaded = load_spec(TEMPLATE)
    raw_trace(loaded)  # warm imports and the page cache for both sides
    raws, colds, checks, warms = [], [], [], []
    for _ in range(RUNS):
        with tempfile.TemporaryDirectory() as directory:
            raws.append(raw_trace(loaded))
            cold, check = ours(loaded, Path(directory) / "cache", Path(directory) / "artifact")
            colds.append(cold - check)
            checks.append(check)
            warms.append(ours(loaded, Path(directory) / "cache", Path(directory) / "artifact")[0])
    raw, cold, warm, check = (statistics.median(values) for values in (raws, colds, warms, checks))
    buckets = len(loaded.spec.compile.buckets)
    print(
        f"model: {loaded.spec.model.path}, {buckets} buckets {loaded.spec.compile.buckets}, torch {torch.__version__}, median of {RUNS}"
    )
    print(f"raw torch.jit.trace + save        {raw:7.2f} s")
    print(f"ours, cold (excl. numerical check) {cold:7.2f} s   ratio to raw  {cold / raw:5.2f}  (goal <= 1.20)")
    print(f"  numerical check                  {check:7.2f} s")
    print(f"ours, warm (cache hit)            {warm:7.2f} s   ratio to cold {warm / cold:5.3f} (goal <= 0.05)")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
