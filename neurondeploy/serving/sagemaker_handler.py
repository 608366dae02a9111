"""The handler contract of AWS's PyTorch inference containers (sagemaker-pytorch-inference-toolkit: ``model_fn``
and ``transform_fn``, made of ``input_fn``, ``predict_fn`` and ``output_fn``) over neurondeploy's runtime.

On the Neuron inference DLC (``pytorch-inference-neuronx``), SageMaker's ``serve`` starts TorchServe with the toolkit's
handler service, which installs ``code/requirements.txt`` from the model archive (this toolkit's wheel, shipped in it)
and imports ``code/inference.py`` (``SAGEMAKER_PROGRAM``), which re-exports ``model_fn`` and ``transform_fn`` (the
toolkit refuses ``transform_fn`` beside the other three). The artifact is the rest
of model.tar.gz; requests and answers are the same JSON as ``neurondeploy serve``'s.

The toolkit's own handler calls ``transform_fn`` once per request, in turn, even for a batch TorchServe gathered
(sagemaker_inference/transformer.py, ``Transformer.transform``), so behind it nothing is batched. model.tar.gz
therefore names :func:`handle` as the model's TorchServe handler (``MAR-INF/MANIFEST.json``, which TorchServe reads
for a model directory ahead of its default service handler): TorchServe gathers up to ``SAGEMAKER_TS_BATCH_SIZE``
requests within ``SAGEMAKER_TS_MAX_BATCH_DELAY`` ms (the toolkit writes both into the model's TorchServe config) and
:func:`handle` runs all of their inputs in the fewest compiled buckets. ``model_fn`` / ``transform_fn`` stay for the
toolkit's handler (an archive without the manifest).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from http import HTTPStatus
from pathlib import Path
from typing import Any

from neurondeploy.aws.secrets import resolve_secret_env
from neurondeploy.compiler.artifact import MANIFEST
from neurondeploy.serving.media import JSON, Unsupported, write_answers
from neurondeploy.serving.runtime import BadRequest, ModelRunner
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
    try:
        resolve_secret_env()  # {secret: ARN} env values, read through the execution role, as `neurondeploy serve` does
        runner = ModelRunner(_artifact_dir(model_dir), serving_from_env(), replicas=1)
        runner.warm_up()  # loaded and a forward run on every bucket: only then is the worker READY
    except Exception as exc:
        stop_the_model_server(exc)
        raise
    return runner


TORCHSERVE_FRONTEND = "org.pytorch.serve.ModelServer"  # in its command line (the toolkit's TS_NAMESPACE)
# The frontend copies a worker's stdout/stderr into its log from reader threads (ReaderThread in pytorch/serve
# frontend/server/src/main/java/org/pytorch/serve/wlm/WorkerLifeCycle.java);
# stopped at once, it can exit before they log why, and the endpoint's log would not say it.
LOG_GRACE_S = 2.0


def stop_the_model_server(reason: Exception) -> bool:
    """TorchServe answers /ping 200 "Healthy" while every worker fails to load the model (seen here on 0.11.0, the
    DLCs' version: its health counts started workers, not loaded ones), so SageMaker would put a model that cannot
    load InService. A worker of TorchServe whose model cannot load stops the model server, its parent, instead: the
    container exits, and SageMaker's startup health check (or the update) fails. Anywhere else, nothing."""
    parent = os.getppid()
    try:
        command = Path(f"/proc/{parent}/cmdline").read_bytes()
    except OSError:
        return False
    if TORCHSERVE_FRONTEND.encode() not in command:
        return False
    print(
        f"neurondeploy: the model cannot load ({type(reason).__name__}: {reason}); stopping TorchServe so that the "
        "endpoint fails its health check instead of answering Healthy with no worker",
        file=sys.stderr,
        flush=True,
    )
    time.sleep(LOG_GRACE_S)
    os.kill(parent, signal.SIGTERM)
    return True


def _check_content_type(content_type: str) -> None:
    if content_type and not content_type.startswith(JSON):
        raise Unsupported(415, f"Content-Type {content_type} is not supported; send {JSON}")


def input_fn(body: bytes | str, content_type: str = JSON) -> Any:
    _check_content_type(content_type)
    try:
        return json.loads(body)
    except ValueError as exc:
        raise BadRequest(f'the body is not JSON ({exc}): send {{"inputs": [...]}}') from None


def predict_fn(data: Any, runner: ModelRunner) -> Any:
    items, single = runner.parse(data)
    outputs = run_in_buckets(runner, items)
    return outputs[0] if single else outputs


def run_in_buckets(runner: ModelRunner, items: list) -> list[Any]:
    """Every item's answer, the items run in the groups that take the least time by the buckets' timings (the
    warm-up's, kept current by live forwards): a batch TorchServe gathered is whatever arrived within the delay, and
    20 items padded into a bucket of 32 cost more than 16 and 4."""
    outputs: list[Any] = []
    for count in runner.split(items):
        outputs += runner.run(0, items[len(outputs) : len(outputs) + count])
    return outputs


def output_fn(prediction: Any, accept: str = JSON) -> str:
    # the runtime answers with numpy arrays: the same writer as `neurondeploy serve`'s, so the bytes are the same
    return write_answers([prediction], JSON, JSON).decode()


def transform_fn(runner: ModelRunner, body: bytes | str, content_type: str, accept: str, context: Any) -> tuple:
    """One request as the toolkit hands it over (its transformer passes ``context`` to a handler function that
    takes one more parameter: sagemaker_inference/transformer.py, _run_handler_function). A wrong request gets what
    ``neurondeploy serve`` answers, 4xx and a one-line JSON error; raised, it would be the toolkit's 500 with a
    Python traceback in the body (transformer.handle_error)."""
    try:
        return output_fn(predict_fn(input_fn(body, content_type), runner), accept), JSON
    except (BadRequest, Unsupported) as exc:
        return _refused(context, 0, exc), JSON


CUSTOM_ATTRIBUTES = "X-Amzn-SageMaker-Custom-Attributes"  # the SageMaker runtime's response CustomAttributes
BATCHED_WITH = "neurondeploy-batched-requests"
_RUNNER: dict[str, ModelRunner] = {}  # the worker's one runner, loaded at TorchServe's initialize call


def handle(data: list[dict] | None, context: Any) -> list[str] | None:
    """TorchServe's entry point: ``data`` is the batch TorchServe gathered, one dict per request (its body under
    "body", already parsed when it was sent as JSON: ts/protocol/otf_message_handler.py), or None for the call that
    loads the model. Every input of every request goes through the fewest compiled buckets; each request gets its
    own answer, or its own 4xx with a one-line JSON error."""
    if "runner" not in _RUNNER:
        _RUNNER["runner"] = model_fn(context.system_properties["model_dir"])
    if data is None:
        return None
    runner = _RUNNER["runner"]
    answers = [""] * len(data)
    accepted: list[tuple[int, int, bool]] = []  # (request index, how many items, single)
    items: list = []
    for index, request in enumerate(data):
        try:
            payload = _payload(request.get("body", request.get("data")), _content_type(context, index))
            request_items, single = runner.parse(payload)
        except (BadRequest, Unsupported) as exc:
            answers[index] = _refused(context, index, exc)
            continue
        accepted.append((index, len(request_items), single))
        items += request_items
    outputs = run_in_buckets(runner, items)
    for index, count, single in accepted:
        mine, outputs = outputs[:count], outputs[count:]
        answers[index] = output_fn(mine[0] if single else mine)
        context.set_response_content_type(index, JSON)
        # InvokeEndpoint returns this header to the caller as CustomAttributes: how many requests shared the run
        context.set_response_header(index, CUSTOM_ATTRIBUTES, f"{BATCHED_WITH}={len(accepted)}")
    return answers


def _content_type(context: Any, index: int) -> str:
    headers = {key.lower(): value for key, value in (context.get_all_request_header(index) or {}).items()}
    return headers.get("content-type") or JSON


def _payload(body: Any, content_type: str) -> Any:
    """The request as parsed JSON: TorchServe parsed it already unless it was not JSON (bytes) or text (str)."""
    if isinstance(body, (bytes, bytearray, str)):
        return input_fn(bytes(body) if isinstance(body, bytearray) else body, content_type)
    _check_content_type(content_type)
    return body


def _refused(context: Any, index: int, exc: Exception) -> str:
    """Request ``index``'s own status and one-line JSON error (TorchServe's Context, the toolkit's too)."""
    status = getattr(exc, "status", HTTPStatus.BAD_REQUEST)
    context.set_response_status(code=int(status), phrase=HTTPStatus(status).phrase, idx=index)
    context.set_response_content_type(index, JSON)
    return json.dumps({"error": str(exc)})
