"""An LLM endpoint over the model `compile --remote` exported: SageMaker puts the S3 prefix, uncompressed, at
/opt/ml/model before the container starts (CreateModel ModelDataSource, CompressionType None); the Hugging Face
container is pointed at that directory (no Hub download, so no HF_TOKEN) and finds the NEFFs there (no compile at
start), so its startup health-check budget is what loading needs, not the hour a compile may take.

The load budget: ``STARTUP_S + SAFETY × size / LOAD_BANDWIDTH``. Both figures are ours, unconfirmed on Inf2:
125 MiB/s is the gp3 EBS baseline throughput (the slowest volume SageMaker may give the endpoint) for reading the
weights from /opt/ml/model into host memory and on to the NeuronCores; 120 s covers the container, the Neuron
runtime and vLLM's start; ×2 absorbs a slower volume or a cold page cache. The download itself is under
ModelDataDownloadTimeoutInSeconds, not this budget.
"""

from __future__ import annotations

import math

from neurondeploy.resources.model import PlanContext
from neurondeploy.specs import InferenceSpec

MODEL_DIR = "/opt/ml/model"
LOAD_BANDWIDTH_MIB_S = 125
STARTUP_S = 120
SAFETY = 2
MIN_BUDGET_S = 60
MAX_BUDGET_S = 3600  # SageMaker's maximum ContainerStartupHealthCheckTimeoutInSeconds
HUB_ENV = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")  # nothing is read from the Hub any more


def load_budget(size_bytes: int) -> tuple[int, str]:
    """(seconds, the reasoning) of the startup health-check budget for a precompiled model of ``size_bytes``."""
    load_s = size_bytes / (LOAD_BANDWIDTH_MIB_S * 2**20)
    seconds = min(MAX_BUDGET_S, max(MIN_BUDGET_S, math.ceil((STARTUP_S + SAFETY * load_s) / 30) * 30))
    why = (
        f"{size_bytes / 2**30:.1f} GiB at {LOAD_BANDWIDTH_MIB_S} MiB/s = {load_s:.0f} s; "
        f"{STARTUP_S} s start + {SAFETY} × {load_s:.0f} s, rounded up to 30 s = {seconds} s"
    )
    return seconds, why


def model_data_source(prefix_uri: str) -> dict:
    return {
        "S3DataSource": {"S3Uri": prefix_uri.rstrip("/") + "/", "S3DataType": "S3Prefix", "CompressionType": "None"}
    }


def uses_precompiled(spec: InferenceSpec, ctx: PlanContext) -> bool:
    return spec.container.model_variable is not None and ctx.precompiled_model_uri is not None


def without_hub_token(spec: InferenceSpec) -> InferenceSpec:
    """The spec as the endpoint over a precompiled model sees it: no Hub token in its environment (nor the role's
    read on that secret)."""
    container = spec.deployment.container
    env = {key: value for key, value in container.env.items() if key not in HUB_ENV}
    deployment = spec.deployment.model_copy(update={"container": container.model_copy(update={"env": env})})
    return spec.model_copy(update={"deployment": deployment})


def precompiled_env(spec: InferenceSpec) -> dict[str, str]:
    """The container's model setting pointed at the directory SageMaker fills from the S3 prefix."""
    return {spec.container.model_variable: MODEL_DIR}
