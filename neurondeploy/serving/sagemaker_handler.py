"""The handler contract of AWS's PyTorch inference containers (sagemaker-pytorch-inference-toolkit: ``model_fn``,
``input_fn``, ``predict_fn``, ``output_fn``) over neurondeploy's runtime.

On the Neuron inference DLC (``pytorch-inference-neuronx``), SageMaker's ``serve`` starts TorchServe with the toolkit's
handler service, which installs ``code/requirements.txt`` from the model archive (this toolkit's wheel, shipped in it)
and imports ``code/inference.py`` (``SAGEMAKER_PROGRAM``), which re-exports these functions. The artifact is the rest
of model.tar.gz; requests and answers are the same JSON as ``neurondeploy serve``'s. TorchServe hands requests over one
by one, so batching is TorchServe's, not neurondeploy's batcher.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from neurondeploy.aws.secrets import resolve_secret_env
from neurondeploy.compiler.artifact import MANIFEST
from neurondeploy.serving.media import JSON, write_answers
from neurondeploy.serving.runtime import ModelRunner
from neurondeploy.serving.server import serving_from_env


def _artifact_dir(model_dir: str) -> Path:
    """TorchServe passes the directory it extracted the model archive to; the toolkit's own view is
    $SAGEMAKER_BASE_DIR/model (/opt/ml/model). The artifact is whichever holds the manifest."""
    base = Path(os.environ.get("SAGEMAKER_BASE_DIR", "/opt/ml")) / "model"
    for candidate in (Path(model_dir), Path(model_dir).parent, base):
        if (candidate / MANIFEST).is_file():
            return candidate
    raise FileNotFoundError(f"no {MANIFEST} in {model_dir}, its parent or {base}: model.tar.gz is not an artifact")


def model_fn(model_dir: str) -> ModelRunner:
    resolve_secret_env()  # {secret: ARN} env values, read through the execution role, as `neurondeploy serve` does
    runner = ModelRunner(_artifact_dir(model_dir), serving_from_env(), replicas=1)
    runner.warm_up()
    return runner


def input_fn(body: bytes | str, content_type: str = JSON) -> Any:
    if content_type and not content_type.startswith(JSON):
        raise ValueError(f"content type {content_type} is not supported: send {JSON}")
    return json.loads(body)


def predict_fn(data: Any, runner: ModelRunner) -> Any:
    items, single = runner.parse(data)
    outputs: list[Any] = []
    for start in range(0, len(items), runner.max_batch):
        outputs += runner.run(0, items[start : start + runner.max_batch])
    return outputs[0] if single else outputs


def output_fn(prediction: Any, accept: str = JSON) -> str:
    # the runtime answers with numpy arrays: the same writer as `neurondeploy serve`'s, so the bytes are the same
    return write_answers([prediction], JSON, JSON).decode()
