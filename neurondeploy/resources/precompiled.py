"""An LLM endpoint over the model `compile --remote` exported: SageMaker puts the S3 prefix, uncompressed, at
/opt/ml/model before the container starts (CreateModel ModelDataSource, CompressionType None); the Hugging Face
container is pointed at that directory (no Hub download, so no HF_TOKEN) and finds the NEFFs there (no compile at
start), so its startup health-check budget is what loading needs, not the hour a compile may take.

The load budget: ``STARTUP_S + SAFETY × size / bandwidth``, the bandwidth that of the volume the weights are read
from. An endpoint's ML storage volume is EBS gp2 ("Currently only Amazon EBS gp2 storage volumes are supported":
botocore's SageMaker model, ProductionVariant.VolumeSizeInGB), whose throughput limit is 128 MiB/s up to 170 GiB and
250 MiB/s above (from 334 GiB regardless of burst credits, between them while credits last, and a new volume starts
with them: docs.aws.amazon.com/ebs/latest/userguide/general-purpose.html, gp2 throughput performance); an instance
with NVMe storage instead (no VolumeSizeInGB) is given the lower figure. 120 s covering the container, the Neuron
runtime and vLLM's start, and ×2 for a cold page cache or a throttled volume, are ours, unconfirmed on Inf2. The
download itself is under ModelDataDownloadTimeoutInSeconds, not this budget.
"""

from __future__ import annotations

import math

from neurondeploy.resources.model import PlanContext
from neurondeploy.specs import InferenceSpec

MODEL_DIR = "/opt/ml/model"
# Where a container that compiles at start finds the artifacts compile --remote built, inside the model directory:
# vllm-neuron's own name for them (vllm_neuron/worker/neuronx_distributed_model_loader.py, _get_compiled_model_path)
COMPILED_SUBDIR = "neuron-compiled-artifacts"
GP2_SMALL_MIB_S, GP2_LARGE_MIB_S, GP2_SMALL_MAX_GIB = 128, 250, 170  # gp2's throughput limit by volume size
STARTUP_S = 120
SAFETY = 2
MIN_BUDGET_S = 60
MAX_BUDGET_S = 3600  # SageMaker's maximum ContainerStartupHealthCheckTimeoutInSeconds
HUB_ENV = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")  # nothing is read from the Hub any more


def load_bandwidth_mib_s(volume_gib: int | None) -> int:
    """What a gp2 endpoint volume of ``volume_gib`` reads at (module doc); None (instance storage) the lower."""
    return GP2_LARGE_MIB_S if volume_gib is not None and volume_gib > GP2_SMALL_MAX_GIB else GP2_SMALL_MIB_S


def load_budget(size_bytes: int, volume_gib: int | None = None) -> tuple[int, str]:
    """(seconds, the reasoning) of the startup health-check budget for a precompiled model of ``size_bytes`` read
    from the endpoint's gp2 volume of ``volume_gib``."""
    bandwidth = load_bandwidth_mib_s(volume_gib)
    load_s = size_bytes / (bandwidth * 2**20)
    seconds = min(MAX_BUDGET_S, max(MIN_BUDGET_S, math.ceil((STARTUP_S + SAFETY * load_s) / 30) * 30))
    volume = f"a {volume_gib} GiB gp2 volume" if volume_gib is not None else "instance storage"
    why = (
        f"{size_bytes / 2**30:.1f} GiB at {bandwidth} MiB/s ({volume}) = {load_s:.0f} s; "
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
    """The container's model setting pointed at the directory SageMaker fills from the S3 prefix, and for a
    container that compiles at start, the compiled artifacts' directory inside it."""
    kind = spec.container
    env = {kind.model_variable: MODEL_DIR}
    if kind.compiled_artifacts_env:
        env[kind.compiled_artifacts_env] = f"{MODEL_DIR}/{COMPILED_SUBDIR}"
    return env
