"""`compile --remote` of a decoder LLM (container hf-vllm / hf-tgi): the container's own export, optimum-neuron's
``optimum-cli export neuron`` (flags: [ON] optimum/commands/export/neuronx.py), run in a SageMaker job
on the spec's own image (the SDK and optimum-neuron it pins), its output stored in the S3 compile cache under a
content key, and found again by ``compile`` (no second job) and ``apply`` (the endpoint loads it from S3).

The key (:func:`llm_artifact_key`): the model id and revision, the export's shapes, TP, dtype and target, and the
image, which pins the Neuron SDK and optimum-neuron. The cache entry is the compile cache's layout
(``<prefix>/<key>/<file>``, ``entry.json`` last, so a half-upload is no entry): the export under ``model/``.

What runs in the job (:func:`job_main`, ``python3 -m neurondeploy.compiler.llm_export``): the image is the wrapper
of infra/hf-secrets, which carries this toolkit; its resolver (``python -m neurondeploy.aws.secrets --``) reads the
gated model's ``HF_TOKEN`` from Secrets Manager through the job's role first, into this process's environment
only. With a revision, the snapshot is downloaded first and exported from disk (optimum-cli has no --revision).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from neurondeploy import catalog
from neurondeploy.compiler.cache import CompileCache, cache_key
from neurondeploy.errors import NeurondeployError
from neurondeploy.specs import InferenceSpec

MODEL_SUBDIR = "model"  # inside the cache entry: what the endpoint's /opt/ml/model becomes
EXPORT_DTYPES = ("bfloat16", "float16", "float32")  # optimum-cli --torch_dtype choices
JOB_MODULE = "neurondeploy.compiler.llm_export"


class LlmExportError(NeurondeployError):
    exit_code = 3


def export_target(spec: InferenceSpec) -> str:
    """optimum-cli's --instance_type: the deployment's family (inf2, trn1, trn1n, trn2)."""
    return catalog.get_instance(spec.deployment.instance_type).compile_target


def export_argv(spec: InferenceSpec) -> list[str]:
    """``optimum-cli export neuron`` with the spec's shapes, TP and dtype; the job appends the output directory."""
    if spec.model.dtype not in EXPORT_DTYPES:
        raise LlmExportError(
            f"model.dtype {spec.model.dtype}: optimum-cli export neuron loads weights as {', '.join(EXPORT_DTYPES)}",
            "set model.dtype to bfloat16",
        )
    return [
        "optimum-cli",
        "export",
        "neuron",
        "--model",
        spec.model.hf_model_id,
        "--task",
        "text-generation",
        "--batch_size",
        str(max(spec.compile.batch_sizes)),
        "--sequence_length",
        str(max(spec.compile.sequence_lengths)),
        "--tensor_parallel_size",
        str(spec.deployment.tensor_parallel),
        "--torch_dtype",
        spec.model.dtype,
        "--instance_type",
        export_target(spec),
    ]


def llm_artifact_key(spec: InferenceSpec, image: str) -> str:
    return cache_key(
        {
            "artifact": "optimum-neuron-export",
            "model": spec.model.hf_model_id,
            "revision": spec.model.hf_revision or "main",
            "batch_size": max(spec.compile.batch_sizes),
            "sequence_length": max(spec.compile.sequence_lengths),
            "tensor_parallel": spec.deployment.tensor_parallel,
            "dtype": spec.model.dtype,
            "target": export_target(spec),
            "image": image,
        }
    )


def precompiled_prefix(cache_uri: str, key: str) -> str:
    return f"{cache_uri.rstrip('/')}/{key}/{MODEL_SUBDIR}/"


def find_precompiled(cache_uri: str, key: str) -> int | None:
    """The exported model's size in bytes if the S3 cache holds entry ``key`` (its record only is read), else None."""
    record = CompileCache(s3_uri=cache_uri).s3_record(key)
    if record is None:
        return None
    return sum(info["size"] for rel, info in record["files"].items() if rel.startswith(f"{MODEL_SUBDIR}/"))


# --- what the job runs ------------------------------------------------------------------------------------------


def job_arguments(spec: InferenceSpec, key: str, cache_uri: str) -> list[str]:
    revision = ["--revision", spec.model.hf_revision] if spec.model.hf_revision else []
    return ["--artifact_key", key, "--cache_s3", cache_uri, *revision, "--", *export_argv(spec)]


def _download_revision(model_id: str, revision: str, directory: Path) -> Path:
    from huggingface_hub import snapshot_download  # in the image (optimum-neuron's dependency); reads HF_TOKEN

    return Path(snapshot_download(model_id, revision=revision, local_dir=directory / "checkpoint"))


def _export(export: list[str], revision: str | None, directory: Path) -> dict:
    argv = list(export)
    if revision:
        index = argv.index("--model") + 1
        argv[index] = str(_download_revision(argv[index], revision, directory.parent))
    ran = subprocess.run([*argv, str(directory / MODEL_SUBDIR)], capture_output=True, text=True, check=False)
    sys.stdout.write(ran.stdout)
    if ran.returncode != 0:
        tail = " | ".join(ran.stderr.strip().splitlines()[-3:])
        raise LlmExportError(f"optimum-cli export neuron exited {ran.returncode}: {tail}", "read the job's logs")
    return {"artifact": "optimum-neuron-export", "export": export, "revision": revision or "main"}


def job_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=JOB_MODULE)
    parser.add_argument("--artifact_key", required=True)
    parser.add_argument("--cache_s3", required=True)
    parser.add_argument("--revision")
    parser.add_argument("export", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    export = args.export[1:] if args.export[:1] == ["--"] else args.export
    return build_into_cache(
        args.artifact_key, args.cache_s3, lambda directory: _export(export, args.revision, directory)
    )


def build_into_cache(key: str, cache_s3: str, build: Callable[[Path], dict]) -> int:
    """A job's end: ``build`` into the S3 compile cache's entry ``key`` (unless it is there), the job's exit code."""
    try:
        cache = CompileCache(s3_uri=cache_s3)
        result = cache.get_or_build(key, build)
        if cache.s3_record(key) is None:  # the cache only warns when S3 refuses: the job must fail
            raise LlmExportError(f"the model was not stored in {cache_s3}", "read the job's logs")
        print(f"model {key} ({result.source}) in {precompiled_prefix(cache_s3, key)}")
    except NeurondeployError as exc:
        print(f"error: {exc.one_line()}", file=sys.stderr, flush=True)
        return exc.exit_code or 1
    return 0


if __name__ == "__main__":
    sys.exit(job_main(sys.argv[1:]))
