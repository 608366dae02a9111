"""The compiled artifact: one TorchScript module per shape bucket, the preprocessor, and a manifest.

Loading validates the manifest and refuses an artifact built for another target, SDK or runtime with a clear
message — the "Could not find a matching NEFF" / "status=2" failure caught before deploy, not on the instance.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from dataclasses import dataclass
from pathlib import Path

from neurondeploy.manifest import (  # noqa: F401  re-exported: the compiler's historical names
    MANIFEST,
    MANIFEST_FORMAT,
    PREPROCESSOR_DIR,
    ArtifactError,
    Bucket,
    Manifest,
    NumericalCheck,
    TensorSpec,
    check_artifact_files,
    check_compatible,
    read_manifest,
    write_manifest,
)
from neurondeploy.standin import reserve_neuron_cores


def current_runtime() -> str:
    """Where modules would run here: on NeuronCores when the Neuron SDK is installed, else on the CPU."""
    return "neuron" if importlib.util.find_spec("torch_neuronx") is not None else "cpu"


@dataclass
class LoadedArtifact:
    directory: Path
    manifest: Manifest
    modules: dict[tuple[int, int], object]  # (batch size, length) -> torch.jit.ScriptModule


def load_artifact(
    directory: str | Path, *, runtime: str | None = None, target: str | None = None, neuron_sdk: str | None = None
) -> LoadedArtifact:
    """Validate the manifest against this runtime, check every module's sha256, then torch.jit.load them.

    On Neuron each ``torch.jit.load`` places the NEFF on the next visible NeuronCore (round-robin), so the
    caller decides replicas by how many times it loads an artifact.
    """
    import torch

    directory = Path(directory)
    manifest = read_manifest(directory)
    runtime = runtime or current_runtime()
    neuronx_cc = None
    if runtime == "neuron":
        try:
            neuronx_cc = importlib.metadata.version("neuronx-cc")
        except importlib.metadata.PackageNotFoundError:
            neuronx_cc = None
    check_compatible(
        manifest, runtime=runtime, target=target, neuron_sdk=neuron_sdk, neuronx_cc=neuronx_cc, where=str(directory)
    )
    reserve_neuron_cores()  # a replayed Neuron host: this process's cores, as the runtime reserves them at load
    check_artifact_files(directory, manifest)
    modules = {
        (bucket.batch_size, bucket.length): torch.jit.load(str(directory / bucket.file)) for bucket in manifest.buckets
    }
    return LoadedArtifact(directory, manifest, modules)
