"""`compile`: spec → fit check → model → one cached, numerically checked module per bucket → artifact directory.

The fit check runs first, so a model that cannot fit is refused with the numbers before any tracing. Each bucket
is compiled inside the content-addressed cache's ``get_or_build``: a compile that fails, or whose numerical check
fails, raises inside the build and is never stored (no poisoned cache). The artifact directory is assembled in a
temporary directory and renamed into place, so a reader never sees half an artifact.

The artifact depends on its inputs only: the modules are the cache entry's files, and the manifest holds what
identifies them (model digest, shapes, compiler, flags, file hashes), never a clock or a timing. Compiling an
unchanged spec again gives the same bytes, so apply's sha256 check finds the object in S3 current. What the run
did (seconds, cache hits, when) is on the returned :class:`CompileResult` and its in-memory manifest only.
"""

from __future__ import annotations

import io
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

import torch

from neurondeploy.compiler.artifact import (
    PREPROCESSOR_DIR,
    Bucket,
    Manifest,
    NumericalCheck,
    TensorSpec,
    write_manifest,
)
from neurondeploy.compiler.backends import (
    MODEL_INPUT_HINT,
    describe_inputs,
    first_line,
    neuron_compiler_args,
    select_backend,
)
from neurondeploy.compiler.cache import CACHE_FULL_FIX, CompileCache, cache_key
from neurondeploy.compiler.disk_space import disk_full, write_checked
from neurondeploy.compiler.models import PREPROCESSOR_FILES, DigestMemo, LoadedModel, load_model
from neurondeploy.compiler.smoke import smoke_reference
from neurondeploy.errors import NeurondeployError, is_disk_full
from neurondeploy.paths import file_in_the_way
from neurondeploy.planner.artifact_target import artifact_sdk, compile_target
from neurondeploy.planner.checks import refuse_errors
from neurondeploy.specs import InferenceSpec, LoadedSpec

MODULE_FILE = "model.pt"
TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
CHECK_SEED = 1234  # fixed, so a recompile of the same thing checks the same inputs


class CompileError(NeurondeployError):
    exit_code = 3


class NumericalCheckFailed(CompileError):
    pass


@dataclass
class BucketResult:
    batch_size: int
    length: int
    cache_hit: bool
    source: str  # "built", "local" or "s3"
    trace_s: float
    check_s: float
    seconds: float  # wall time of this bucket in this run


@dataclass
class CompileResult:
    artifact_dir: Path
    manifest: Manifest
    backend: str
    buckets: list[BucketResult]
    seconds: float

    def as_dict(self) -> dict:
        return {
            "artifact": str(self.artifact_dir),
            "backend": self.backend,
            "target": self.manifest.target,
            "seconds": round(self.seconds, 3),
            "buckets": [asdict(bucket) for bucket in self.buckets],
        }


def _tensor_specs(names, tensors) -> list[TensorSpec]:
    return [
        TensorSpec(name=name, shape=list(tensor.shape), dtype=str(tensor.dtype)) for name, tensor in zip(names, tensors)
    ]


def _as_tuple(output) -> tuple[torch.Tensor, ...]:
    return output if isinstance(output, tuple) else (output,)


def numerical_check(
    compiled, module: torch.nn.Module, inputs: tuple[torch.Tensor, ...], tolerance: float
) -> tuple[NumericalCheck, tuple[torch.Tensor, ...]]:
    """Compiled vs eager on the same inputs; also returns the compiled outputs (their shapes go in the manifest)."""
    try:
        with torch.no_grad():
            expected = _as_tuple(module(*inputs))
            actual = _as_tuple(compiled(*inputs))
    except Exception as exc:  # the model's own error on inputs of the bucket's shape
        raise CompileError(
            f"running the model failed on inputs {describe_inputs(inputs)}: {first_line(exc)}", MODEL_INPUT_HINT
        ) from exc
    max_abs = max_rel = 0.0
    for want, got in zip(expected, actual):
        diff = (got.float() - want.float()).abs()
        max_abs = max(max_abs, float(diff.max()))
        max_rel = max(max_rel, float((diff / want.float().abs().clamp(min=1e-6)).max()))
    return NumericalCheck(
        max_abs_diff=max_abs, max_rel_diff=max_rel, tolerance=tolerance, passed=max_abs <= tolerance
    ), actual


def _bucket_dims(spec: InferenceSpec, batch: int, length: int) -> dict:
    if spec.compile.image_size:
        return {"batch_size": batch, "image_size": list(spec.compile.image_size)}
    return {"batch_size": batch, "sequence_length": length}


def _cast(tensors: tuple[torch.Tensor, ...], dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """Floating inputs (pixels) follow the weights' dtype; token ids and masks stay integers."""
    return tuple(t.to(dtype) if t.is_floating_point() else t for t in tensors)


def _build_bucket(
    backend, model: LoadedModel, dtype, inputs, check_inputs, compiler_args, tolerance
) -> Callable[[Path], dict]:
    def build(directory: Path) -> dict:
        workdir = directory / "workdir"
        workdir.mkdir()
        module = model.module.to(dtype)
        start = time.perf_counter()
        traced = backend.trace(module, inputs, compiler_args, workdir)
        # Serialized in memory, then written only where it fits: torch's serializer aborts the process (SIGABRT
        # from an uncaught C++ iostream error) when the disk fills under it.
        serialized = io.BytesIO()
        torch.jit.save(traced, serialized)
        write_checked(directory / MODULE_FILE, serialized.getvalue(), fix=CACHE_FULL_FIX)
        trace_s = time.perf_counter() - start
        start = time.perf_counter()
        # Check the saved file, not the in-memory trace: that is what the server will load.
        check, outputs = numerical_check(torch.jit.load(str(directory / MODULE_FILE)), module, check_inputs, tolerance)
        check_s = time.perf_counter() - start
        if not check.passed:
            raise NumericalCheckFailed(
                f"bucket batch {inputs[0].shape[0]} × {inputs[0].shape[1]}: compiled output differs from eager PyTorch by "
                f"{check.max_abs_diff:.3g} (tolerance {tolerance:g})",
                "try compile.auto_cast: none, or raise compile.numerical_tolerance if the difference is acceptable",
            )
        shutil.rmtree(workdir)
        return {
            "outputs": [
                spec.model_dump() for spec in _tensor_specs([f"output_{i}" for i in range(len(outputs))], outputs)
            ],
            "check": check.model_dump(),
            "trace_s": trace_s,
            "check_s": check_s,
        }

    return build


def _assemble(out_dir: Path, files: dict[str, Path], preprocessor: Path | None, manifest: Manifest) -> None:
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = out_dir.with_name(f".{out_dir.name}.{os.getpid()}.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        _stage(staging, files, preprocessor, manifest)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)  # a half-copied artifact is no artifact
        if not is_disk_full(exc):
            raise
        needed = sum(path.stat().st_size for path in [*files.values(), *_preprocessor_files(preprocessor)])
        raise disk_full(out_dir, needed, "free space there, or give --out a directory on a larger disk") from None
    _swap_in(out_dir, staging)


def _preprocessor_files(preprocessor: Path | None) -> list[Path]:
    return [preprocessor / name for name in PREPROCESSOR_FILES if preprocessor and (preprocessor / name).is_file()]


def _stage(staging: Path, files: dict[str, Path], preprocessor: Path | None, manifest: Manifest) -> None:
    """The artifact's files in ``staging``: hard links to the cache's where they share a filesystem, else copies."""
    (staging / "buckets").mkdir(parents=True)
    for relative, source in files.items():
        target = staging / relative
        try:
            os.link(source, target)  # same filesystem as the cache: no copy of the weights
        except OSError:
            shutil.copy2(source, target)
    if preprocessor is not None:
        (staging / PREPROCESSOR_DIR).mkdir()
        for path in _preprocessor_files(preprocessor):
            shutil.copy2(path, staging / PREPROCESSOR_DIR / path.name)
    write_manifest(staging, manifest)


def _swap_in(out_dir: Path, staging: Path) -> None:
    """The staged artifact in place of ``out_dir``'s: a reader sees the old one or the new one, whole."""
    if out_dir.exists():
        retired = out_dir.with_name(f".{out_dir.name}.{os.getpid()}.old")
        out_dir.rename(retired)
        staging.rename(out_dir)
        shutil.rmtree(retired, ignore_errors=True)
    else:
        staging.rename(out_dir)


def compile_spec(
    loaded: LoadedSpec,
    *,
    backend: str = "auto",
    cache: CompileCache | None = None,
    out_dir: Path | None = None,
    on_bucket: Callable[[BucketResult], None] | None = None,
) -> CompileResult:
    spec = loaded.spec
    if not isinstance(spec, InferenceSpec):
        raise CompileError(
            f"{loaded.source.file} is a training spec; compile takes inference specs",
            "use `neurondeploy train` for training",
        )
    if not spec.container.ours:
        raise CompileError(
            f"container {spec.deployment.container.kind} compiles the model itself on the instance",
            "compile applies to container kind neurondeploy",
        )
    refuse_errors(loaded)  # the fit check among them: refuse before tracing anything
    if spec.model.dtype not in TORCH_DTYPES:
        raise CompileError(
            f"model.dtype {spec.model.dtype} cannot be traced from PyTorch weights",
            "use float32, bfloat16 or float16 (fp8 is for the LLM containers' own loaders)",
        )
    dtype = TORCH_DTYPES[spec.model.dtype]
    artifact_dir = Path(out_dir) if out_dir else Path("artifacts") / spec.name
    blocker = file_in_the_way(artifact_dir.parent)
    if blocker is not None:  # found before minutes of tracing, not when the artifact is written
        raise CompileError(
            f"the artifact directory {artifact_dir} (--out) cannot be made: {blocker} is a file, not a directory",
            "give --out a path whose parents are directories",
        )
    started = time.perf_counter()
    chosen = select_backend(backend)
    target = compile_target(spec)
    compiler_args = neuron_compiler_args(spec.compile, target)
    cache = cache or CompileCache()
    memo = DigestMemo(cache.root / "digests.json")
    model = load_model(spec, loaded.base_dir, memo)
    memo.save()
    versions = chosen.versions() | {"neuron_sdk": artifact_sdk(spec)}
    buckets, results, files = [], [], {}
    width = spec.compile.image_size[1] if spec.compile.image_size else None
    for batch, length in spec.compile.buckets:
        bucket_start = time.perf_counter()
        inputs = _cast(
            model.example_inputs(
                batch, length, width, generator=torch.Generator().manual_seed(batch * 100003 + length)
            ),
            dtype,
        )
        check_inputs = _cast(
            model.example_inputs(batch, length, width, generator=torch.Generator().manual_seed(CHECK_SEED)), dtype
        )
        input_specs = _tensor_specs(model.input_names, inputs)
        key = cache_key(
            {
                "model_digest": model.digest,
                "task": spec.task,
                "options": model.options,
                "bucket": [spec_.model_dump() for spec_ in input_specs],
                "compiler_args": compiler_args,
                "backend": chosen.name,
                "target": target,
                "compiler_version": chosen.compiler_version(),
                "dtype": spec.model.dtype,
                "tolerance": spec.compile.numerical_tolerance,
            }
        )
        outcome = cache.get_or_build(
            key,
            _build_bucket(chosen, model, dtype, inputs, check_inputs, compiler_args, spec.compile.numerical_tolerance),
            deep=True,  # what goes into an artifact is hashed once per compile, never trusted for its stamp
        )
        metadata = outcome.entry.metadata
        relative = f"buckets/b{batch}_{'x'.join(map(str, spec.compile.image_size)) if width else f's{length}'}.pt"
        files[relative] = outcome.entry.path / MODULE_FILE
        buckets.append(
            Bucket(
                **_bucket_dims(spec, batch, length),
                file=relative,
                sha256=outcome.entry.files[MODULE_FILE],
                cache_key=key,
                inputs=input_specs,
                outputs=[TensorSpec(**o) for o in metadata["outputs"]],
                check=NumericalCheck(**metadata["check"]),
                compile_s=0.0 if outcome.hit else metadata["trace_s"],
                cache_hit=outcome.hit,
            )
        )
        result = BucketResult(
            batch,
            length,
            outcome.hit,
            outcome.source,
            metadata["trace_s"],
            metadata["check_s"],
            time.perf_counter() - bucket_start,
        )
        results.append(result)
        if on_bucket:
            on_bucket(result)
    lengths = [bucket.sequence_length for bucket in buckets if bucket.sequence_length]
    smoke = smoke_reference(
        model, list(spec.compile.buckets), spec.compile.image_size, dtype, spec.compile.numerical_tolerance, cache
    )
    manifest = Manifest(
        name=spec.name,
        task=spec.task,
        model_digest=model.digest,
        model_source=spec.model.source_kind,
        backend=chosen.name,
        target=target,
        compiler_args=compiler_args,
        versions=versions,
        input_names=list(model.input_names),
        buckets=buckets,
        preprocessor=PREPROCESSOR_DIR if model.preprocessor_dir else None,
        labels=model.labels,
        options=model.options,
        max_sequence_length=max(lengths) if lengths else None,
        smoke=smoke,
        compile_s=round(time.perf_counter() - started, 3),
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )
    _assemble(artifact_dir, files, model.preprocessor_dir, manifest)
    return CompileResult(artifact_dir, manifest, chosen.name, results, time.perf_counter() - started)
