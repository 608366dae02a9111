"""`compile --remote` of a vllm-neuron spec: vLLM's own compile, run in a SageMaker job on the endpoint's wrapper
image, started exactly as the endpoint starts, and kept in the S3 compile cache where `apply` finds it.

vllm-neuron loads compiled artifacts from ``$NEURON_COMPILED_ARTIFACTS`` when that directory holds them, and
otherwise compiles the model with NxD Inference and saves them there (vllm-project/vllm-neuron
vllm_neuron/worker/neuronx_distributed_model_loader.py: ``_get_compiled_model_path``, ``_load_compiled_model``,
``_compile_and_load_model``); its own end-to-end test compiles once that way and loads the second time
(test/e2e/offline/test_offline_e2e.py, ``test_double_on_device_sampling_config``). So the job is the endpoint's own
start: the model downloaded to /opt/ml/model (where SageMaker puts the endpoint's S3 prefix), the endpoint's
environment (``NEURON_COMPILED_ARTIFACTS=/opt/ml/model/neuron-compiled-artifacts``, the same ``SM_VLLM_*``) and
its launcher. When vLLM answers ``/ping`` the model is compiled and loaded on the job host's NeuronCores (the host is
sized for that), and the job stops it. The same paths on both sides: nothing the compile recorded points elsewhere.
What /opt/ml/model holds then moves into the cache entry (``model/``), so the job's own model.tar.gz is empty.

The key (:func:`vllm_compiled_key`): the model id and revision, the endpoint's environment over the compiled model
(TP, max_num_seqs, max_model_len and any other vLLM option), the instance family and the image (its SDK and vLLM).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path

from neurondeploy import catalog
from neurondeploy.compiler.cache import cache_key
from neurondeploy.compiler.llm_export import MODEL_SUBDIR, LlmExportError, build_into_cache
from neurondeploy.specs import InferenceSpec
from neurondeploy.specs.inference import SECRET_ENV

JOB_MODULE = "neurondeploy.compiler.vllm_neuron_compile"
ARTIFACT = "vllm-neuron-compiled"
POLL_S = 5.0  # between health checks: a compile takes minutes to an hour
STOP_GRACE_S = 120  # vLLM's shutdown after SIGTERM, before it is killed


def vllm_compiled_key(spec: InferenceSpec, image: str, environment: Mapping[str, str]) -> str:
    """``environment``: the endpoint's over the compiled model (secret references left out: a token's ARN does not
    change what is compiled)."""
    return cache_key(
        {
            "artifact": ARTIFACT,
            "model": spec.model.hf_model_id,
            "revision": spec.model.hf_revision or "main",
            "environment": {key: value for key, value in sorted(environment.items()) if key != SECRET_ENV},
            "family": catalog.get_instance(spec.deployment.instance_type).family,
            "image": image,
        }
    )


def job_arguments(
    spec: InferenceSpec, key: str, cache_uri: str, *, model_dir: str, health_url: str, launcher: str
) -> list[str]:
    """The job module's arguments: where the model goes, how to tell vLLM is up, then the endpoint's launcher."""
    revision = ["--revision", spec.model.hf_revision] if spec.model.hf_revision else []
    return [
        "--artifact_key", key,
        "--cache_s3", cache_uri,
        "--model_id", spec.model.hf_model_id,
        *revision,
        "--model_dir", model_dir,
        "--health_url", health_url,
        "--", *launcher.split(),
    ]  # fmt: skip


# --- what the job runs ------------------------------------------------------------------------------------------


def _download(model_id: str, revision: str | None, model_dir: Path) -> None:
    """The snapshot into the Hub client's cache ($HF_HOME, on the job's volume), then its files into ``model_dir``
    as the files they link to: hard links where the volume allows, else copies."""
    from huggingface_hub import snapshot_download  # in the image (vLLM's dependency); reads HF_TOKEN

    snapshot = Path(snapshot_download(model_id, revision=revision))
    for path in sorted(snapshot.rglob("*")):
        if path.is_dir():
            continue
        target = model_dir / path.relative_to(snapshot)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(path.resolve(), target)
        except OSError:
            shutil.copy2(path, target)


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _start_and_stop(launcher: list[str], health_url: str, poll_s: float) -> None:
    """Run the endpoint's launcher until vLLM answers ``health_url`` (compiled and loaded), then stop it."""
    process = subprocess.Popen(launcher, start_new_session=True)
    try:
        while not _healthy(health_url):
            code = process.poll()
            if code is not None:
                raise LlmExportError(
                    f"vLLM exited {code} before it answered {health_url}: it could not compile or load the model",
                    "read the job's logs",
                )
            time.sleep(poll_s)
        print(f"vLLM answered {health_url}: the model is compiled and loaded; stopping it", flush=True)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def _compile(args: argparse.Namespace, launcher: list[str], directory: Path) -> dict:
    model_dir = Path(args.model_dir)
    compiled = Path(os.environ.get("NEURON_COMPILED_ARTIFACTS", ""))
    if not compiled.is_relative_to(model_dir) or compiled == model_dir:
        raise LlmExportError(
            f"NEURON_COMPILED_ARTIFACTS ({compiled}) is not a directory inside {model_dir}",
            "it is written by neurondeploy's plan; do not edit the job",
        )
    model_dir.mkdir(parents=True, exist_ok=True)
    _download(args.model_id, args.revision, model_dir)
    _start_and_stop(launcher, args.health_url, args.poll_s)
    if not compiled.is_dir() or not any(compiled.iterdir()):
        raise LlmExportError(
            f"vLLM started but wrote no compiled artifacts to {compiled}",
            "read the job's logs: it may have loaded artifacts from elsewhere",
        )
    target = directory / MODEL_SUBDIR
    target.mkdir()
    for child in model_dir.iterdir():  # /opt/ml/model itself may be a mount point: move what it holds
        shutil.move(str(child), target / child.name)
    return {"artifact": ARTIFACT, "model": args.model_id, "revision": args.revision or "main", "launcher": launcher}


def job_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=JOB_MODULE)
    parser.add_argument("--artifact_key", required=True)
    parser.add_argument("--cache_s3", required=True)
    parser.add_argument("--model_id", required=True)
    parser.add_argument("--revision")
    parser.add_argument("--model_dir", required=True)
    parser.add_argument("--health_url", required=True)
    parser.add_argument("--poll_s", type=float, default=POLL_S)
    parser.add_argument("launcher", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    launcher = args.launcher[1:] if args.launcher[:1] == ["--"] else args.launcher
    return build_into_cache(args.artifact_key, args.cache_s3, lambda directory: _compile(args, launcher, directory))


if __name__ == "__main__":
    sys.exit(job_main(sys.argv[1:]))
