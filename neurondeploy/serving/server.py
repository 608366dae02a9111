"""`serve`: resolve what to serve (an artifact, or a spec compiled from the cache) and run it under uvicorn.

The same entry point runs locally, in the SageMaker container (``serve /opt/ml/model``, settings from
$NEURONDEPLOY_SERVING) and on Inf2 instances under systemd. On Neuron each replica is one more ``torch.jit.load``
of the artifact, which the runtime places on the next NeuronCore; by default one replica per core group.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from neurondeploy import catalog
from neurondeploy.aws.secrets import resolve_secret_env
from neurondeploy.compiler.artifact import MANIFEST, current_runtime
from neurondeploy.compiler.cache import CompileCache
from neurondeploy.compiler.compile import compile_spec
from neurondeploy.errors import NeurondeployError
from neurondeploy.manifest import read_manifest
from neurondeploy.planner.artifact_target import gate_artifact
from neurondeploy.serving.app import InferenceServer
from neurondeploy.serving.http_limits import uvicorn_config
from neurondeploy.specs import InferenceSpec, load_spec
from neurondeploy.specs.inference import SERVING_ENV, ServingSpec


class ServeError(NeurondeployError):
    exit_code = 2


@dataclass
class ServeTarget:
    artifact_dir: Path
    serving: ServingSpec
    spec: InferenceSpec | None


def serving_from_env() -> ServingSpec:
    raw = os.environ.get(SERVING_ENV)
    if not raw:
        return ServingSpec()
    try:
        return ServingSpec.model_validate(json.loads(raw))
    except ValueError as exc:
        raise ServeError(
            f"${SERVING_ENV} is not a valid serving spec: {str(exc).splitlines()[0]}",
            "set it to the JSON of a spec's serving section",
        ) from None


def resolve_target(
    target: str | Path, artifact: str | Path | None = None, *, backend: str = "auto", cache_dir: Path | None = None
) -> ServeTarget:
    """TARGET is an artifact directory, or a spec (compiled now, from the cache when it can be). With a spec, on a
    Neuron host, the artifact must match the spec's target and SDK (the gate apply uses); on a CPU host it serves
    here, and loading refuses anything but a CPU artifact."""
    target = Path(target)
    if target.is_dir() and (target / MANIFEST).is_file():
        read_manifest(target)  # a damaged or foreign manifest is one line here, not a server whose /ping fails
        return ServeTarget(target, serving_from_env(), None)
    if target.is_dir():
        raise ServeError(f"{target} is a directory without {MANIFEST}", "give a compiled artifact or a spec file")
    loaded = load_spec(target)
    spec = loaded.spec
    if not isinstance(spec, InferenceSpec):
        raise ServeError(f"{target} is a training spec", "serve takes an inference spec or an artifact")
    if artifact is not None:
        artifact_dir = Path(artifact)
    else:
        cache = CompileCache(root=cache_dir) if cache_dir else None
        artifact_dir = compile_spec(loaded, backend=backend, cache=cache).artifact_dir
    if current_runtime() == "neuron":  # on the deployment's instance: the artifact must be the one it runs
        gate_artifact(spec, read_manifest(artifact_dir), where=f"artifact {artifact_dir}", spec_file=str(target))
    return ServeTarget(artifact_dir, spec.serving, spec)


def default_replicas(spec: InferenceSpec | None, runtime: str) -> int:
    """One replica per NeuronCore group on Neuron; one on the CPU (torch already uses every core)."""
    if runtime != "neuron" or spec is None:
        return 1
    return catalog.replicas_per_instance(spec.deployment.instance_type, spec.deployment.tensor_parallel)


def run_server(
    target: ServeTarget,
    host: str = "127.0.0.1",
    port: int | None = None,
    replicas: int | None = None,
    log_level: str = "warning",
) -> None:
    import uvicorn

    resolve_secret_env()  # {secret: ARN} env values, read through this machine's role; only this process sees them
    runtime = current_runtime()
    server = InferenceServer(
        target.artifact_dir, target.serving, replicas or default_replicas(target.spec, runtime), runtime
    )
    config = uvicorn_config(server.app(), target.serving, host, port or target.serving.port, log_level=log_level)
    uvicorn.Server(config).run()
