"""`compile --remote`: the Neuron compile of an inference spec, run where the Neuron SDK is (a SageMaker job), and
its artifact found again by ``apply`` through the S3 compile cache.

The artifact's cache key (:func:`remote_artifact_key`) is computed from what decides a Neuron compile and is known
on any machine: the model digest (the weight and config bytes), the task and its post-processing, the buckets,
the neuronx-cc flags, the target, the Neuron SDK and the dtype. This machine computes it before submitting the
job; the job computes it again from the files it was sent and refuses to store under another key. The job's
compile pushes each bucket's module to the S3 cache as ``compile --cache-s3`` always does, then the whole artifact
directory as one more entry under the artifact key (same layout: files, then ``entry.json`` last). So:

* a second ``compile --remote`` of an unchanged spec finds the entry and starts no job;
* ``apply`` on a machine without the Neuron SDK fetches the entry (verified file by file) and uploads it.

What runs in the job (:func:`stage_job_source` writes it): ``neurondeploy_compile_job.py`` →
:func:`job_main`, with this toolkit's own package copied beside it (the exact code that computed the key), the spec
with ``model.path`` pointing at the copied model, and a ``requirements.txt`` of the toolkit's dependencies, which
the SageMaker training toolkit installs before running the entry.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import re
import shutil
import sys
from pathlib import Path

import neurondeploy
from neurondeploy.compiler.backends import neuron_compiler_args
from neurondeploy.compiler.cache import CompileCache, cache_key
from neurondeploy.compiler.compile import CompileError, compile_spec
from neurondeploy.compiler.models import DigestMemo, load_model
from neurondeploy.errors import NeurondeployError
from neurondeploy.manifest import MANIFEST_FORMAT
from neurondeploy.planner.artifact_target import artifact_sdk, compile_target, remote_compile_hint
from neurondeploy.resources.release import deployment_release
from neurondeploy.resources.sagemaker_compile import ENTRY
from neurondeploy.specs import InferenceSpec, LoadedSpec, load_spec
from neurondeploy.wheel import version_admits

JOB_SPEC = "spec.yaml"
JOB_MODEL = "model"
ARTIFACT_DIR = "artifact"  # inside the cache entry


class RemoteCompileError(NeurondeployError):
    exit_code = 3


def _inference(loaded: LoadedSpec) -> InferenceSpec:
    spec = loaded.spec
    if not isinstance(spec, InferenceSpec) or not spec.container.ours:
        raise RemoteCompileError(
            f"{loaded.source.file}: compile --remote takes an inference spec of container kind neurondeploy",
            "the Hugging Face containers compile on the instance; training specs run with `neurondeploy train`",
        )
    if spec.model.factory:
        raise RemoteCompileError(
            f"{loaded.source.file}: model.factory {spec.model.factory} is Python on this machine and cannot be "
            "sent to the compile job",
            "save the model as a Hugging Face directory (save_pretrained) or a TorchScript file and set model.path",
        )
    return spec


def remote_artifact_key(loaded: LoadedSpec, cache_root: Path | None = None) -> str:
    """The content key of the spec's Neuron artifact (see the module doc); reads the model's bytes, not its weights
    into torch."""
    spec = _inference(loaded)
    memo = DigestMemo((cache_root / "digests.json") if cache_root else None)
    model = load_model(spec, loaded.base_dir, memo)
    memo.save()
    target = compile_target(spec)
    return cache_key(
        {
            "artifact": "neuron",
            "manifest_format": MANIFEST_FORMAT,
            "model_digest": model.digest,
            "task": spec.task,
            "options": model.options,
            "buckets": [list(bucket) for bucket in spec.compile.buckets],
            "image_size": list(spec.compile.image_size) if spec.compile.image_size else None,
            "compiler_args": neuron_compiler_args(spec.compile, target),
            "target": target,
            "neuron_sdk": artifact_sdk(spec),
            "dtype": spec.model.dtype,
            "tolerance": spec.compile.numerical_tolerance,
        }
    )


class _NotCompiled(Exception):
    """The artifact entry is in neither the local nor the S3 cache (raised inside get_or_build: nothing stored)."""


def _missing(directory: Path) -> dict:
    raise _NotCompiled


def fetch_remote_artifact(key: str, cache: CompileCache) -> Path | None:
    """The artifact directory of ``key`` from the local cache or the S3 one (downloaded and verified), else None."""
    try:
        result = cache.get_or_build(key, _missing)
    except _NotCompiled:
        return None
    return result.entry.path / ARTIFACT_DIR


def store_remote_artifact(key: str, artifact_dir: Path, cache: CompileCache) -> Path:
    """Put an artifact directory into the cache under ``key`` (and S3, when the cache has it)."""

    def build(directory: Path) -> dict:
        shutil.copytree(artifact_dir, directory / ARTIFACT_DIR)
        return {"artifact": "neuron", "source": str(artifact_dir)}

    return cache.get_or_build(key, build).entry.path / ARTIFACT_DIR


# --- what the job runs ------------------------------------------------------------------------------------------


# transformers 5 turns PyTorch off below 2.6 ("Disabling PyTorch because PyTorch >= 2.6 is required", its
# utils/import_utils.py is_torch_available) and declares no torch dependency pip could see: an image whose torch
# is older keeps transformers 4.
TRANSFORMERS_5_NEEDS_TORCH = "2.6"


def job_requirements(image_torch: str) -> list[str]:
    """What the job's requirements.txt asks the compile image's pip for: the toolkit's runtime dependencies (no
    extras but the image catalogue's) and transformers in the compile extra's range, held below 5 when the image's
    torch (``image_torch``, never changed by us) is older than transformers 5 accepts."""
    found = []
    transformers = "transformers"
    for requirement in importlib.metadata.requires("neurondeploy") or []:
        name, _, marker = requirement.partition(";")
        if "extra ==" not in marker or re.search(r"extra\s*==\s*['\"]images['\"]", marker):
            found.append(name.strip())
        elif name.strip().startswith("transformers") and re.search(r"extra\s*==\s*['\"]compile['\"]", marker):
            transformers = name.strip()
    if not version_admits(f">={TRANSFORMERS_5_NEEDS_TORCH}", image_torch):
        clauses = [c for c in transformers.removeprefix("transformers").split(",") if c and not c.startswith("<")]
        transformers = "transformers" + ",".join([*clauses, "<5"])
    return [*found, transformers]


def stage_job_source(loaded: LoadedSpec, directory: Path) -> None:
    """Write what the compile job runs into ``directory``: the entry, this toolkit's package, the spec (its model
    path pointing at the copied model) and requirements.txt."""
    import yaml

    spec = _inference(loaded)
    model = spec.model.resolved_path(loaded.base_dir)
    directory.mkdir(parents=True, exist_ok=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    if model.is_dir():
        shutil.copytree(model, directory / JOB_MODEL, ignore=ignore)
        model_path = JOB_MODEL
    else:
        model_path = f"{JOB_MODEL}{model.suffix}"
        shutil.copy2(model, directory / model_path)
    raw = yaml.safe_load(Path(loaded.source.file).read_text())
    raw["model"]["path"] = model_path
    (directory / JOB_SPEC).write_text(yaml.safe_dump(raw, sort_keys=False))
    shutil.copytree(Path(neurondeploy.__file__).parent, directory / "neurondeploy", ignore=ignore)
    compile_image = deployment_release(spec).compile_image
    image_torch = compile_image.torch if compile_image else TRANSFORMERS_5_NEEDS_TORCH
    (directory / "requirements.txt").write_text("\n".join(job_requirements(image_torch)) + "\n")
    (directory / ENTRY).write_text(
        '"""neurondeploy compile job: what the SageMaker training toolkit runs (sagemaker_program)."""\n\n'
        "import sys\n\nfrom neurondeploy.compiler.remote import job_main\n\nsys.exit(job_main(sys.argv[1:]))\n"
    )


def job_main(argv: list[str]) -> int:
    """The compile job's entry: compile the staged spec with the Neuron backend, pushing every bucket to the S3
    cache, then the artifact under the key this machine's submitter computed (refused if this job computes
    another)."""
    parser = argparse.ArgumentParser(prog=ENTRY)
    parser.add_argument("--artifact_key", required=True)
    parser.add_argument("--cache_s3", required=True)
    parser.add_argument("--spec", default=JOB_SPEC)
    args, _ = parser.parse_known_args(argv)
    try:
        loaded = load_spec(Path(args.spec))  # relative to the working directory: the toolkit runs in the code dir
        cache = CompileCache(s3_uri=args.cache_s3)
        key = remote_artifact_key(loaded, cache.root)
        if key != args.artifact_key:
            raise RemoteCompileError(
                f"the job computes artifact key {key[:16]}, the submitter {args.artifact_key[:16]}: the model or "
                "toolkit sent differs from the one the key was computed from",
                remote_compile_hint(None),
            )
        out = Path(os.environ.get("SM_MODEL_DIR", ".")) / ARTIFACT_DIR
        result = compile_spec(loaded, backend="neuron", cache=cache, out_dir=out)
        for bucket in result.buckets:
            print(
                f"bucket b{bucket.batch_size} × {bucket.length}: {bucket.source} in {bucket.seconds:.1f} s", flush=True
            )
        stored = store_remote_artifact(key, result.artifact_dir, cache)
        print(f"artifact {key} stored in {args.cache_s3} ({stored})", flush=True)
    except (NeurondeployError, CompileError) as exc:
        print(f"error: {exc.one_line()}", file=sys.stderr, flush=True)
        return exc.exit_code or 1
    return 0
