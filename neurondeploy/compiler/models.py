"""Load the model a spec names and wrap it as a tensors-in, tensor-out module for tracing.

Three sources: a local Hugging Face directory (config + safetensors + tokenizer; never a hub download),
a TorchScript file, or a ``module:function`` factory returning an ``nn.Module``. The wrapper fixes the task's
input names, dtypes and post-processing (mean pooling, L2 normalisation) so the traced graph is the whole
model the endpoint serves, and the model digest hashes weights and config bytes, never file timestamps.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from neurondeploy.errors import NeurondeployError
from neurondeploy.specs.inference import InferenceSpec

TEXT_INPUTS = ("input_ids", "attention_mask")
IMAGE_INPUTS = ("pixel_values",)
# Files the server needs to turn requests into tensors; copied into the artifact beside the modules.
PREPROCESSOR_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.txt",
    "special_tokens_map.json",
    "merges.txt",
    "vocab.json",
    "spiece.model",
    "sentencepiece.bpe.model",
    "preprocessor_config.json",
)
HASH_CHUNK = 1 << 20


class ModelLoadError(NeurondeployError):
    exit_code = 2


class MeanPooledEncoder(torch.nn.Module):
    """last_hidden_state → mask-weighted mean over tokens (sentence-transformers' 'mean' pooling), optionally
    L2-normalised when the model's sentence-transformers pipeline ends in Normalize."""

    def __init__(self, encoder: torch.nn.Module, normalize: bool) -> None:
        super().__init__()
        self.encoder = encoder
        self.normalize = normalize

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        weights = attention_mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, p=2.0, dim=1) if self.normalize else pooled


class SequenceClassifier(torch.nn.Module):
    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, attention_mask=attention_mask).logits


@dataclass
class LoadedModel:
    """What the compiler needs to know about a model — digest, inputs, preprocessor — and the module itself,
    built only when a bucket is not in the cache (a warm compile never loads the weights into torch)."""

    build_module: Callable[[], torch.nn.Module]
    task: str
    input_names: tuple[str, ...]
    digest: str
    vocab_size: int | None = None
    preprocessor_dir: Path | None = None
    labels: dict[int, str] = field(default_factory=dict)
    options: dict = field(default_factory=dict)  # task post-processing recorded in the manifest (e.g. normalize)

    @functools.cached_property
    def module(self) -> torch.nn.Module:
        return self.build_module().eval()

    def example_inputs(
        self, batch: int, length: int, width: int | None = None, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, ...]:
        """Inputs of one bucket's shape (images: length × width pixels). Text: random tokens with random real
        lengths, so padding is exercised; images: random pixels. Deterministic for a given generator."""
        if self.input_names == IMAGE_INPUTS:
            return (torch.randn(batch, 3, length, width or length, generator=generator),)
        high = self.vocab_size or 1000
        input_ids = torch.randint(1, high, (batch, length), generator=generator, dtype=torch.int64)
        lengths = torch.randint(1, length + 1, (batch,), generator=generator)
        attention_mask = (torch.arange(length).unsqueeze(0) < lengths.unsqueeze(1)).to(torch.int64)
        return input_ids * attention_mask, attention_mask


class DigestMemo:
    """sha256 of files remembered by (size, mtime, inode), so a warm compile does not re-read gigabytes of weights.

    Like git's index: a file modified within RACY_S of being hashed is not remembered (its mtime may not have
    moved yet), so a later edit in the same clock tick can never reuse a stale digest.
    """

    RACY_S = 2.0

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.known: dict[str, dict] = {}
        if path is not None and path.is_file():
            try:
                self.known = json.loads(path.read_text())
            except ValueError:
                self.known = {}  # a damaged memo only costs hashing again
        self.dirty = False

    def sha256(self, file: Path) -> str:
        stat = file.stat()
        fingerprint = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "ino": stat.st_ino}
        remembered = self.known.get(str(file.resolve()))
        if remembered and {k: remembered.get(k) for k in fingerprint} == fingerprint:
            return remembered["sha256"]
        digest = hashlib.sha256()
        with file.open("rb") as handle:
            while chunk := handle.read(HASH_CHUNK):
                digest.update(chunk)
        if time.time() - stat.st_mtime > self.RACY_S:
            self.known[str(file.resolve())] = fingerprint | {"sha256": digest.hexdigest()}
            self.dirty = True
        return digest.hexdigest()

    def save(self) -> None:
        if self.path is None or not self.dirty:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError:
            return  # a read-only cache root: the memo is an optimisation only
        temporary = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        temporary.write_text(json.dumps(self.known))
        temporary.replace(self.path)


def _hash_files(paths: list[Path], base: Path, memo: DigestMemo | None = None) -> str:
    """One digest over the files' names (relative to base) and contents: weights and config, not timestamps."""
    memo = memo or DigestMemo(None)
    digest = hashlib.sha256()
    for path in sorted(paths):
        digest.update(f"{path.relative_to(base)}\0{memo.sha256(path)}\0".encode())
    return digest.hexdigest()


def _module_digest(module: torch.nn.Module, identity: str) -> str:
    """Hash of a module's parameters and buffers (names, dtypes, shapes, bytes) and where it came from."""
    digest = hashlib.sha256(identity.encode())
    for name, tensor in sorted(module.state_dict().items()):
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        digest.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def _task_inputs(task: str) -> tuple[str, ...]:
    return IMAGE_INPUTS if task == "image-classification" else TEXT_INPUTS


def load_hf_directory(directory: Path, task: str, memo: DigestMemo | None = None) -> LoadedModel:
    if not (directory / "config.json").is_file():
        raise ModelLoadError(
            f"{directory}: no config.json, so not a Hugging Face model directory",
            "point model.path at the folder with config.json and the weights",
        )
    weights = [p for p in directory.iterdir() if p.suffix in (".safetensors", ".bin") and p.is_file()]
    if not weights:
        raise ModelLoadError(f"{directory}: no *.safetensors or *.bin weights", "save the model with save_pretrained()")
    if task not in ("feature-extraction", "text-classification"):
        raise ModelLoadError(
            f"task {task} from a Hugging Face directory is not supported by the compiler",
            "use feature-extraction or text-classification, or a factory for other models",
        )
    try:
        config = json.loads((directory / "config.json").read_text())
    except ValueError as exc:
        raise ModelLoadError(
            f"{directory / 'config.json'}: not JSON ({exc})", "restore the model's config.json"
        ) from None
    normalize = task == "feature-extraction" and _ends_in_normalize(directory)
    options = {"pooling": "mean", "normalize": normalize} if task == "feature-extraction" else {}
    labels = {int(k): v for k, v in (config.get("id2label") or {}).items()} if task == "text-classification" else {}
    has_preprocessor = any((directory / name).is_file() for name in PREPROCESSOR_FILES)
    return LoadedModel(
        functools.partial(_hf_module, directory, task, normalize),
        task,
        TEXT_INPUTS,
        _hash_files([directory / "config.json", *weights], directory, memo),
        vocab_size=config.get("vocab_size"),
        preprocessor_dir=directory if has_preprocessor else None,
        labels=labels,
        options=options,
    )


def _hf_module(directory: Path, task: str, normalize: bool) -> torch.nn.Module:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local directory must never turn into a hub download
    from transformers import AutoModel, AutoModelForSequenceClassification
    from transformers.utils import logging as transformers_logging

    transformers_logging.set_verbosity_error()  # our own progress says what is happening; its bars would interleave
    transformers_logging.disable_progress_bar()

    # Eager attention traces to plain matmuls, which every backend (torch-xla / neuronx-cc included) compiles.
    kwargs = {"local_files_only": True, "attn_implementation": "eager"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # transformers' notices to its own API users, not to ours
        if task == "feature-extraction":
            return MeanPooledEncoder(AutoModel.from_pretrained(directory, **kwargs), normalize=normalize)
        return SequenceClassifier(AutoModelForSequenceClassification.from_pretrained(directory, **kwargs))


def _ends_in_normalize(directory: Path) -> bool:
    modules = directory / "modules.json"
    if not modules.is_file():
        return False
    try:
        return any(entry.get("type", "").endswith("Normalize") for entry in json.loads(modules.read_text()))
    except (ValueError, AttributeError):
        return False


def load_torchscript(path: Path, task: str, memo: DigestMemo | None = None) -> LoadedModel:
    return LoadedModel(
        functools.partial(_torchscript_module, path), task, _task_inputs(task), _hash_files([path], path.parent, memo)
    )


def _torchscript_module(path: Path) -> torch.nn.Module:
    try:
        return torch.jit.load(str(path), map_location="cpu")
    except (RuntimeError, ValueError) as exc:
        raise ModelLoadError(
            f"{path}: not a TorchScript file ({str(exc).splitlines()[0]})",
            "save it with torch.jit.save(torch.jit.trace(model, inputs), path)",
        ) from None


def load_factory(reference: str, task: str) -> LoadedModel:
    module_name, _, function_name = reference.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), function_name)
    except (ImportError, AttributeError) as exc:
        raise ModelLoadError(
            f"model.factory {reference}: cannot import it ({exc})",
            "make the module importable (PYTHONPATH) and check the function name",
        ) from None
    module = factory()
    if not isinstance(module, torch.nn.Module):
        raise ModelLoadError(
            f"model.factory {reference} returned {type(module).__name__}, not a torch.nn.Module",
            "return the model instance from the factory",
        )
    vocab = getattr(module, "vocab_size", None)
    return LoadedModel(lambda: module, task, _task_inputs(task), _module_digest(module, reference), vocab_size=vocab)


def load_model(spec: InferenceSpec, base_dir: Path, memo: DigestMemo | None = None) -> LoadedModel:
    model = spec.model
    if model.factory:
        loaded = load_factory(model.factory, spec.task)
        if model.architecture:
            loaded.vocab_size = model.architecture.vocab_size
        return loaded
    if model.hf_model_id:
        raise ModelLoadError(
            "model.hf_model_id is loaded by the Hugging Face container on the instance, not compiled here",
            "give model.path to compile with neurondeploy",
        )
    path = model.resolved_path(base_dir)
    if not path.exists():
        raise ModelLoadError(
            f"model.path {path} does not exist", "check the path (relative paths are relative to the spec file)"
        )
    loaded = (
        load_torchscript(path, spec.task, memo)
        if model.source_kind == "torchscript"
        else load_hf_directory(path, spec.task, memo)
    )
    if model.architecture:  # the spec's numbers win: a TorchScript file carries no config
        loaded.vocab_size = model.architecture.vocab_size
    return loaded
