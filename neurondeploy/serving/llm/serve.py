"""What the local LLM endpoint serves and within which limits: from an LLM spec (its model and the shapes it
compiles for) or from a model directory (the limits from the container's own ``SM_ON_*`` settings, as the vLLM
Neuron container reads them), and starting it in the foreground (`serve`) or in a thread (`apply --local`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from neurondeploy.errors import NeurondeployError
from neurondeploy.serving.http_limits import uvicorn_config
from neurondeploy.serving.llm.api import LlmServer
from neurondeploy.serving.llm.model import LanguageModel, build_stand_in, load_directory
from neurondeploy.serving.local import LocalEndpoint, ensure_port_free, serve_in_thread
from neurondeploy.specs import InferenceSpec, LoadedSpec
from neurondeploy.specs.inference import LLM_TASK, ServingSpec, task_from_config

# optimum-cli neuron serve's defaults for a model without a cached config: batch 1, 2048 tokens (optimum-neuron optimum/commands/neuron/serve.py).
CONTAINER_DEFAULT_BATCH, CONTAINER_DEFAULT_SEQUENCE = 1, 2048
# Below this, one decode step is a few small matrix products: torch's intra-op threads only add synchronisation,
# and on a busy machine a lot of it (a 2-layer, 64-wide model here: 3.4 ms per forward on 1 thread, 89 ms on 2
# while other processes used the cores). Larger models keep torch's default.
ONE_THREAD_BELOW_PARAMETERS = 20_000_000


class LlmServeError(NeurondeployError):
    exit_code = 3


@dataclass
class LlmTarget:
    lm: LanguageModel
    max_batch: int
    max_model_len: int
    serving: ServingSpec
    tgi: bool = False  # an hf-tgi spec: TGI's own bodies as well

    def routes_line(self, url: str) -> str:
        return (
            f"serving {self.lm.description} on {url}: OpenAI API (POST /v1/chat/completions, /v1/completions; "
            f"GET /v1/models, /health){', TGI (POST /generate)' if self.tgi else ''} and SageMaker (GET /ping, "
            f"POST /invocations), GET /metrics; "
            f"at most {self.max_batch} sequences decode at once, {self.max_model_len} tokens of context"
        )

    def server(self) -> LlmServer:
        return LlmServer(
            self.lm,
            max_batch=self.max_batch,
            max_model_len=self.max_model_len,
            max_queue=self.serving.max_queue,
            max_body_bytes=self.serving.max_body_bytes,
            tgi=self.tgi,
        )


def is_llm_spec(spec) -> bool:
    return isinstance(spec, InferenceSpec) and spec.task == LLM_TASK


def is_causal_lm_directory(path: Path) -> bool:
    """A Hugging Face directory whose config names a *ForCausalLM / *LMHeadModel architecture."""
    config = path / "config.json"
    if not (path.is_dir() and config.is_file()):
        return False
    try:
        values = json.loads(config.read_text())
    except (ValueError, OSError):
        return False
    return isinstance(values, dict) and task_from_config(values) == LLM_TASK


def target_from_spec(loaded: LoadedSpec) -> LlmTarget:
    spec = loaded.spec
    max_batch, max_model_len = max(spec.compile.batch_sizes), max(spec.compile.sequence_lengths)
    remote = spec.model.s3_uri or spec.model.training_job
    if remote:
        raise LlmServeError(
            f"the model ({remote}) is in S3, where the endpoint reads it; this machine serves local models",
            "download and unpack its model.tar.gz (`aws s3 cp URI - | tar -xz -C DIR`) and give model.path: DIR",
        )
    if spec.model.hf_model_id:
        local = _local_snapshot(spec.model.hf_model_id)
        lm = (
            load_directory(local)
            if local
            else build_stand_in(spec.model.hf_model_id, spec.model.architecture, max_model_len)
        )
    else:
        lm = load_directory(spec.model.resolved_path(loaded.base_dir).resolve())
    return _checked(LlmTarget(lm, max_batch, max_model_len, spec.serving, "tgi" in spec.container.apis))


def target_from_directory(path: Path, serving: ServingSpec) -> LlmTarget:
    """A model directory served as the vLLM container would serve it, with its SM_ON_* limits if set."""
    lm = load_directory(path)
    max_batch = _env_int("SM_ON_BATCH_SIZE", CONTAINER_DEFAULT_BATCH)
    default_length = min(CONTAINER_DEFAULT_SEQUENCE, lm.max_positions or CONTAINER_DEFAULT_SEQUENCE)
    return _checked(LlmTarget(lm, max_batch, _env_int("SM_ON_SEQUENCE_LENGTH", default_length), serving))


def _checked(target: LlmTarget) -> LlmTarget:
    positions = target.lm.max_positions
    if positions and target.max_model_len > positions:
        raise LlmServeError(
            f"the compiled sequence length {target.max_model_len} is above the model's {positions} positions",
            f"set compile.sequence_lengths to {positions} or less",
        )
    return target


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "")
    if not raw:
        return default
    if not raw.isdigit() or int(raw) < 1:
        raise LlmServeError(f"${name} is {raw!r}, not a positive integer", f"set {name} to e.g. {default}")
    return int(raw)


def _local_snapshot(model_id: str) -> Path | None:
    """The model id's copy in the local Hugging Face cache, if one is there (never downloads)."""
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(model_id, local_files_only=True))
    except Exception:  # not cached (LocalEntryNotFoundError), or no huggingface_hub: build the stand-in
        return None


def fit_threads(target: LlmTarget) -> None:
    import torch

    if sum(parameter.numel() for parameter in target.lm.model.parameters()) < ONE_THREAD_BELOW_PARAMETERS:
        torch.set_num_threads(1)


def run(target: LlmTarget, host: str, port: int, log_level: str = "warning") -> None:
    import uvicorn

    fit_threads(target)
    server = uvicorn.Server(uvicorn_config(target.server().app(), target.serving, host, port, log_level=log_level))
    try:
        server.run()
    except KeyboardInterrupt:  # uvicorn re-raises Ctrl-C after its graceful shutdown: a clean stop here
        pass


def start_local(target: LlmTarget, host: str, port: int) -> LocalEndpoint:
    ensure_port_free(host, port)
    fit_threads(target)
    stop, thread = serve_in_thread(target.server().app(), target.serving, host, port)
    return LocalEndpoint(f"http://{host}:{port}", Path(target.lm.served_name), stop, thread)
