"""The artifact manifest: what identifies a compiled artifact, and the check that it can run where it is sent.

Kept below the compiler and the engine (it needs neither torch nor AWS), so that ``apply`` (engine), ``serve``
(serving) and ``compile`` (compiler) judge an artifact with one rule.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from neurondeploy.archive import file_sha256
from neurondeploy.errors import NeurondeployError
from neurondeploy.user_files import parse_user_json, read_user_file

MANIFEST = "manifest.json"
MANIFEST_FORMAT = 1
MAX_MANIFEST_BYTES = 4 * 2**20  # a manifest lists a few buckets and files: kilobytes
PREPROCESSOR_DIR = "preprocessor"


class ArtifactError(NeurondeployError):
    exit_code = 3


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TensorSpec(_Model):
    name: str = Field(description="input or output name")
    shape: list[int] = Field(description="static shape the bucket was compiled for")
    dtype: str = Field(description="torch dtype, e.g. torch.int64")


class NumericalCheck(_Model):
    max_abs_diff: float = Field(description="largest |compiled - eager| over all outputs")
    max_rel_diff: float = Field(description="largest |compiled - eager| / max(|eager|, 1e-6)")
    tolerance: float = Field(description="max_abs_diff allowed (compile.numerical_tolerance)")
    passed: bool


class Bucket(_Model):
    batch_size: int
    sequence_length: int | None = Field(default=None, description="text models")
    image_size: list[int] | None = Field(default=None, description="[height, width] for image models")
    file: str = Field(description="TorchScript module, relative to the artifact")
    sha256: str = Field(description="of the module file")
    cache_key: str
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    check: NumericalCheck
    # Run facts: what one compile run did, not what the module is (see Manifest).
    compile_s: float | None = Field(
        default=None, exclude=True, description="this run's trace + compile seconds (0 when served from the cache)"
    )
    cache_hit: bool | None = Field(default=None, exclude=True, description="this run found the module in the cache")

    @property
    def length(self) -> int:
        return self.sequence_length if self.sequence_length is not None else self.image_size[0]


def smallest_first(shapes) -> list[tuple[int, int]]:
    """Bucket shapes (batch, length) by size, smallest first: the first that holds a group pads it the least. The
    server picks buckets in this order, and the smoke test's reference is computed in the bucket it would pick."""
    return sorted(shapes, key=lambda shape: (shape[0] * shape[1], shape))


# What the smoke test after every deploy sends a text model (its answer is compared with the reference below).
SMOKE_TEXT = "neurondeploy serves this model on Inferentia2 and, right now, on this machine."
SMOKE_TOKEN_IDS = list(range(1, 9))  # a model without a tokenizer takes token ids; 1..8 is in every vocabulary


class SmokeReference(_Model):
    """The answer a deployment must give to the smoke test's request, computed at compile time by eager PyTorch on
    the compiling machine, so a served artifact is checked against the model itself, not against itself."""

    sample: str | list[int] | None = Field(
        description="the request's one input: SMOKE_TEXT (tokenizer), SMOKE_TOKEN_IDS (token ids), or null for an "
        "all-zero image of the buckets' size"
    )
    output: list[float] = Field(description="eager PyTorch's output row for the sample, in the bucket that serves it")
    tolerance: float = Field(description="largest |served - output| accepted (compile.numerical_tolerance)")


class Manifest(_Model):
    format: int = MANIFEST_FORMAT
    name: str
    task: str
    model_digest: str = Field(description="sha256 of the weights and config bytes")
    model_source: str
    backend: Literal["neuron", "cpu"]
    target: str = Field(description="neuronx-cc --target the artifact stands for")
    compiler_args: list[str]
    versions: dict[str, str | None] = Field(description="torch, torch_neuronx, neuronx_cc and neuron_sdk")
    input_names: list[str]
    buckets: list[Bucket]
    preprocessor: str | None = Field(description="directory of tokenizer/preprocessor files, relative")
    labels: dict[int, str] = {}
    options: dict = Field(default_factory=dict, description="task post-processing baked into the modules")
    max_sequence_length: int | None = None
    smoke: SmokeReference | None = Field(
        default=None,
        description="what the smoke test after a deploy sends and must get back (null: compiled before it)",
    )
    # Run facts: when this compile ran and how long it took. They stay on the manifest compile_spec returns and are
    # never written (exclude=True): manifest.json is packed and hashed (archive.artifact_digest), and a clock in it
    # made every cache-hit compile a "new" artifact that apply uploaded again. Read back from an artifact they are
    # None; manifests written by earlier versions, which held them, still load.
    compile_s: float | None = Field(default=None, exclude=True, description="this run's wall time, seconds")
    created: str | None = Field(default=None, exclude=True, description="when this run finished (UTC, ISO 8601)")


def read_manifest(artifact_dir: Path) -> Manifest:
    path = Path(artifact_dir) / MANIFEST
    try:
        raw = read_user_file(
            path,
            max_bytes=MAX_MANIFEST_BYTES,
            what="an artifact manifest",
            fix="recompile the artifact",
            error=ArtifactError,
        )
        parse_user_json(raw, where=f"{path}: manifest", fix="recompile the artifact", error=ArtifactError)
        return Manifest.model_validate_json(raw)
    except FileNotFoundError:
        raise ArtifactError(
            f"{artifact_dir}: no {MANIFEST}, so not a neurondeploy artifact",
            "compile one with `neurondeploy compile SPEC`",
        ) from None
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"])
        raise ArtifactError(
            f"{path}: manifest is invalid at {where}: {first['msg']}",
            "recompile; the artifact was written by another neurondeploy version or edited",
        ) from None
    except ValueError as exc:
        raise ArtifactError(f"{path}: manifest is not JSON ({exc})", "recompile the artifact") from None


def write_manifest(artifact_dir: Path, manifest: Manifest) -> None:
    """manifest.json: what identifies the compiled model (no run facts), so the same inputs write the same bytes."""
    (artifact_dir / MANIFEST).write_text(json.dumps(manifest.model_dump(mode="json"), indent=2))


def check_compatible(
    manifest: Manifest,
    *,
    runtime: str,
    target: str | None = None,
    neuron_sdk: str | None = None,
    neuronx_cc: str | None = None,
    where: str = "artifact",
) -> None:
    """Refuse an artifact that cannot load here: CPU stand-ins on Neuron and NEFFs on CPU, another target
    generation, or another SDK / compiler version than the runtime's."""
    if manifest.format != MANIFEST_FORMAT:
        raise ArtifactError(
            f"{where} has manifest format {manifest.format}, this neurondeploy reads {MANIFEST_FORMAT}",
            "recompile with this version",
        )
    if manifest.backend != runtime:
        raise ArtifactError(
            f"{where} was compiled by the {manifest.backend} backend and cannot run on {runtime}",
            f"recompile with --backend {runtime}"
            if runtime == "neuron"
            else "NEFFs run only on Neuron devices; serve it on Inf2/Trn1, or recompile with --backend cpu to test here",
        )
    if target and manifest.target != target:
        raise ArtifactError(
            f"{where} was compiled for target {manifest.target}, not {target}",
            f"recompile with compile.target: {target}",
        )
    built_sdk = manifest.versions.get("neuron_sdk")
    if neuron_sdk and built_sdk and built_sdk != neuron_sdk:
        raise ArtifactError(
            f"{where} was compiled with Neuron SDK {built_sdk}; the runtime has {neuron_sdk} "
            "(NEFFs are not portable across SDK versions: 'Could not find a matching NEFF')",
            f"recompile with neuron_sdk_version: {neuron_sdk}",
        )
    built_cc = manifest.versions.get("neuronx_cc")
    if neuronx_cc and built_cc and built_cc != neuronx_cc:
        raise ArtifactError(
            f"{where} was compiled with neuronx-cc {built_cc}; the runtime has {neuronx_cc}",
            "recompile on the runtime's SDK",
        )


def smoke_request(manifest: Manifest) -> dict:
    """The smoke test's request body for an artifact: one input, as a list, so the answer is a list of one."""
    sample = manifest.smoke.sample if manifest.smoke else (SMOKE_TEXT if manifest.preprocessor else SMOKE_TOKEN_IDS)
    if manifest.input_names == ["pixel_values"]:
        height, width = manifest.buckets[0].image_size
        return {"inputs": [[[[0.0] * width for _ in range(height)] for _ in range(3)]]}
    return {"inputs": [sample]}


def check_artifact_files(directory: Path, manifest: Manifest) -> None:
    """Every compiled module the manifest names is there with its sha256; raises :class:`ArtifactError` (one line)
    for the first that is missing, damaged or replaced."""
    for bucket in manifest.buckets:
        path = Path(directory) / bucket.file
        if not path.is_file():
            raise ArtifactError(f"{path} is missing from the artifact", "recompile or re-download the artifact")
        if file_sha256(path) != bucket.sha256:
            raise ArtifactError(
                f"{path} does not match the sha256 in the manifest (damaged or replaced)",
                "recompile or re-download the artifact",
            )
