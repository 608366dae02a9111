"""The smoke test's reference: what eager PyTorch answers to the request every deploy is checked with.

It is computed where the artifact is compiled, from the model itself (not from the compiled modules), and stored in
the manifest, so a deployment's answer is judged against the model: a wrong preprocessor, a module from another
model, or a host that computes garbage all show. The request is padded to the bucket the server would pick for it
alone (the first of :func:`~neurondeploy.manifest.smallest_first` that holds it, the order
``ModelRunner.pick_bucket`` takes them in), with the tokenizer's own ids and pad token, as the server builds them.

The answer is a cache entry of its own (keyed by the model's digest, dtype, options and the bucket), so a warm
compile still never loads the weights.
"""

from __future__ import annotations

from pathlib import Path

import torch

from neurondeploy.compiler.cache import CompileCache, cache_key
from neurondeploy.compiler.models import IMAGE_INPUTS, LoadedModel
from neurondeploy.manifest import SMOKE_TEXT, SMOKE_TOKEN_IDS, SmokeReference, smallest_first

REFERENCE_FORMAT = 1
SIGNIFICANT_DIGITS = 7  # float32 holds ~7; fewer digits keep the manifest's bytes stable across runs


def _token_ids(model: LoadedModel) -> tuple[str | list[int], list[int], int]:
    """(the sample, its token ids, the pad id) as the server's tokenizer makes them."""
    if model.preprocessor_dir is None:
        return SMOKE_TOKEN_IDS, SMOKE_TOKEN_IDS, 0
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model.preprocessor_dir), local_files_only=True)
    ids = tokenizer(SMOKE_TEXT, add_special_tokens=True)["input_ids"]
    return SMOKE_TEXT, ids, getattr(tokenizer, "pad_token_id", None) or 0


def _serving_bucket(buckets: list[tuple[int, int]], length: int) -> tuple[int, int]:
    for batch, bucket_length in smallest_first(buckets):
        if bucket_length >= length:
            return batch, bucket_length
    raise ValueError(f"no bucket holds the smoke test's {length} tokens")


def _inputs(model: LoadedModel, buckets: list[tuple[int, int]], image_size, dtype) -> tuple[dict, tuple]:
    """The cache key's description of the request, and the eager inputs (batch 1: a padding row changes nothing)."""
    if model.input_names == IMAGE_INPUTS:
        height, width = image_size
        return {"sample": None, "image_size": [height, width]}, (torch.zeros(1, 3, height, width, dtype=dtype),)
    sample, ids, pad_id = _token_ids(model)
    ids = ids[: max(length for _, length in buckets)]
    _, length = _serving_bucket(buckets, len(ids))
    input_ids = torch.full((1, length), pad_id, dtype=torch.int64)
    attention_mask = torch.zeros((1, length), dtype=torch.int64)
    input_ids[0, : len(ids)] = torch.tensor(ids)
    attention_mask[0, : len(ids)] = 1
    return {"sample": sample, "ids": ids, "length": length}, (input_ids, attention_mask)


def smoke_reference(
    model: LoadedModel,
    buckets: list[tuple[int, int]],
    image_size,
    dtype: torch.dtype,
    tolerance: float,
    cache: CompileCache,
) -> SmokeReference:
    described, inputs = _inputs(model, buckets, image_size, dtype)
    key = cache_key(
        {
            "smoke_reference": REFERENCE_FORMAT,
            "model_digest": model.digest,
            "task": model.task,
            "options": model.options,
            "dtype": str(dtype),
            "request": described,
        }
    )

    def build(directory: Path) -> dict:
        with torch.no_grad():
            output = model.module.to(dtype)(*inputs)
        row = (output[0] if isinstance(output, tuple) else output)[0].float().flatten()
        return {"output": [float(f"{value:.{SIGNIFICANT_DIGITS}g}") for value in row.tolist()]}

    entry = cache.get_or_build(key, build).entry
    return SmokeReference(sample=described["sample"], output=entry.metadata["output"], tolerance=tolerance)
