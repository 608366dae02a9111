"""What the server does with a compiled artifact: parse request payloads into items, pick the smallest bucket
that fits a group of items, pad, run one replica's module, and split the outputs back per item.

Payloads follow the Hugging Face inference containers: ``{"inputs": "a text"}`` or ``{"inputs": ["t1", "t2"]}``
for text models with a tokenizer; token-id lists for text models without one; nested lists ``[3][H][W]`` (or a
list of them) for image models.

All of it runs in the server's worker threads, never on the event loop: text goes straight to the Rust tokenizer's
``encode_batch`` (it releases the GIL, so a large body does not stall the other threads), tensors are built in
NumPy, and feature outputs stay float32 NumPy rows that orjson writes without a Python float per value.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from neurondeploy.compiler.artifact import LoadedArtifact, Manifest, load_artifact
from neurondeploy.manifest import smallest_first
from neurondeploy.specs.inference import ServingSpec

GROUP_RATE_SLACK = 0.05
# What a model call costs beyond its bucket's timing (padding the tensors, waking the OpenMP threads, splitting the
# outputs): bench/serve.py measures the server's whole CPU per request outside the model at 0.95-0.97 ms at c=1,
# HTTP included, so a call costs at most about this much
CALL_OVERHEAD_S = 0.001


class BadRequest(ValueError):
    """The request is wrong (400): the message says what and how to fix it."""


@dataclass
class Item:
    """One input of a request, ready for batching: token ids (text) or a pixel tensor (images)."""

    token_ids: list[int] | None = None
    pixels: torch.Tensor | None = None

    @property
    def length(self) -> int:
        return len(self.token_ids) if self.token_ids is not None else self.pixels.shape[1]


class ModelRunner:
    """One artifact, one or more loaded replicas of its modules, and the request <-> tensor conversions."""

    def __init__(self, artifact_dir: Path, serving: ServingSpec, replicas: int = 1, runtime: str | None = None) -> None:
        self.serving = serving
        self.replicas: list[LoadedArtifact] = [load_artifact(artifact_dir, runtime=runtime) for _ in range(replicas)]
        self.manifest: Manifest = self.replicas[0].manifest
        self.buckets = smallest_first(self.replicas[0].modules)
        self.max_batch = max(batch for batch, _ in self.buckets)
        self.max_length = max(length for _, length in self.buckets)
        self.image = self.manifest.input_names == ["pixel_values"]
        self.tokenizer = None
        self.encode: Callable[[list[str]], list[list[int]]] | None = None
        if self.manifest.preprocessor and not self.image:
            self.tokenizer, self.encode = self._load_tokenizer(artifact_dir / self.manifest.preprocessor)
        self.pad_id = getattr(self.tokenizer, "pad_token_id", None) or 0
        self.bucket_seconds: dict[tuple[int, int], float] = {}
        self.input_buffers: dict[tuple[int, int, int], tuple[np.ndarray, np.ndarray, tuple[torch.Tensor, ...]]] = {}
        # Entered around every model forward: the server counts the CPU spent inside the model with it.
        self.forward_context: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext

    def _load_tokenizer(self, path: Path):
        """The tokenizer, and ``encode(texts) -> token ids``: the Rust tokenizer's own batch encode when there is
        one (what transformers calls underneath, minus its Python layers), the transformers call otherwise. With
        ``on_long_input: truncate`` the Rust side truncates (keeping the closing special token, as
        ``truncation=True`` does), so a megabyte of text never becomes a Python list of a quarter million ids."""
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        # Parallelism comes from the server's worker threads; rayon threads would fight torch's for the cores.
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        backend = getattr(tokenizer, "backend_tokenizer", None)
        if backend is None:
            return tokenizer, lambda texts: tokenizer(texts, truncation=False, add_special_tokens=True)["input_ids"]
        rust = type(backend).from_str(backend.to_str())  # our own copy: its truncation and padding are ours to set
        rust.no_padding()
        if self.serving.on_long_input == "truncate":
            rust.enable_truncation(self.max_length)
        else:
            rust.no_truncation()
        encode_batch = getattr(rust, "encode_batch_fast", rust.encode_batch)  # no character offsets: we need none
        return tokenizer, lambda texts: [encoding.ids for encoding in encode_batch(texts, add_special_tokens=True)]

    # --- requests -> items -------------------------------------------------------------------------------------

    def parse(self, payload: Any) -> tuple[list[Item], bool]:
        """Items of a request and whether it was a single input (answer unwrapped) or a list."""
        if not isinstance(payload, dict) or "inputs" not in payload:
            raise BadRequest('the body must be a JSON object with "inputs", e.g. {"inputs": ["some text"]}')
        inputs = payload["inputs"]
        if self.image:
            single = _depth(inputs) == 3
            samples = [inputs] if single else inputs
            items = [self._image_item(sample) for sample in self._as_list(samples)]
        elif self.encode is not None:
            if not isinstance(inputs, (str, list)):
                raise BadRequest("inputs must be a string or a list of strings")
            single = isinstance(inputs, str)
            texts = self._as_list([inputs] if single else inputs)
            if not all(isinstance(text, str) for text in texts):
                raise BadRequest("inputs must be a string or a list of strings")
            items = self._tokenize(texts)
        else:
            single = _depth(inputs) == 1
            items = [self._token_item(ids) for ids in self._as_list([inputs] if single else inputs)]
        return items, single

    def _as_list(self, values: Any) -> list:
        if not isinstance(values, list) or not values:
            raise BadRequest("inputs must be one input or a non-empty list of inputs")
        if len(values) > self.serving.max_items_per_request:
            raise BadRequest(f"{len(values)} inputs in one request; at most {self.serving.max_items_per_request}")
        return values

    def _tokenize(self, texts: list[str]) -> list[Item]:
        encoded = self.encode(texts)
        items = []
        for ids in encoded:
            if len(ids) > self.max_length:
                if self.serving.on_long_input == "refuse":
                    raise BadRequest(
                        f"an input has {len(ids)} tokens; the longest compiled bucket takes {self.max_length} "
                        "(shorten it, or deploy with serving.on_long_input: truncate)"
                    )
                ids = ids[: self.max_length - 1] + ids[-1:]  # keep the closing special token, as truncation=True would
            items.append(Item(token_ids=ids))
        return items

    def _token_item(self, ids: Any) -> Item:
        if not isinstance(ids, list) or not ids or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            raise BadRequest("this model takes token ids: a list of integers, or a list of such lists")
        if len(ids) > self.max_length:
            if self.serving.on_long_input == "refuse":
                raise BadRequest(f"an input has {len(ids)} tokens; the longest compiled bucket takes {self.max_length}")
            ids = ids[: self.max_length]
        return Item(token_ids=ids)

    def _image_item(self, sample: Any) -> Item:
        height, width = self.manifest.buckets[0].image_size
        try:
            pixels = torch.tensor(sample, dtype=torch.float32)
        except (TypeError, ValueError, RuntimeError):
            raise BadRequest(f"an image must be nested lists of numbers shaped [3][{height}][{width}]") from None
        if tuple(pixels.shape) != (3, height, width):
            raise BadRequest(f"an image has shape {list(pixels.shape)}; this model takes [3, {height}, {width}]")
        return Item(pixels=pixels)

    # --- items -> tensors -> outputs -----------------------------------------------------------------------------

    def pick_bucket(self, count: int, length: int) -> tuple[int, int]:
        for batch, bucket_length in self.buckets:  # sorted by size: the first that fits pads the least
            if batch >= count and bucket_length >= length:
                return batch, bucket_length
        raise BadRequest(f"no bucket holds {count} inputs of length {length}")  # the batcher never asks for one

    def tensors(
        self, items: list[Item], batch: int, length: int, replica: int | None = None
    ) -> tuple[torch.Tensor, ...]:
        """The bucket's input tensors for these items. With ``replica``, text inputs are written into that replica's
        own buffers for the bucket (it runs one group at a time), not new arrays: after a forward has flushed the
        CPU caches, every allocation and tensor wrapper costs tens of microseconds."""
        if self.image:
            pixels = torch.zeros((batch, *items[0].pixels.shape), dtype=items[0].pixels.dtype)
            pixels[: len(items)] = torch.stack([item.pixels for item in items])
            return (pixels.to(_dtype(self.manifest.buckets[0].inputs[0].dtype)),)
        buffers = self.input_buffers.get((replica, batch, length)) if replica is not None else None
        if buffers is None:
            input_ids = np.empty((batch, length), dtype=np.int64)
            attention_mask = np.empty((batch, length), dtype=np.int64)
            buffers = input_ids, attention_mask, (torch.from_numpy(input_ids), torch.from_numpy(attention_mask))
            if replica is not None:
                self.input_buffers[(replica, batch, length)] = buffers
        input_ids, attention_mask, tensors = buffers
        input_ids.fill(self.pad_id)
        attention_mask.fill(0)
        for row, item in enumerate(items):
            input_ids[row, : len(item.token_ids)] = item.token_ids
            attention_mask[row, : len(item.token_ids)] = 1
        attention_mask[len(items) :, 0] = 1  # padding rows attend to one token: no division by an empty mask
        return tensors

    def forward(self, replica: int, items: list[Item]) -> torch.Tensor:
        """One group of items (≤ the largest batch) through the smallest bucket that holds it, on one replica: the
        bucket's float32 output, one row per item first, then the padding rows."""
        started = time.perf_counter()
        bucket = self.pick_bucket(len(items), max(item.length for item in items))
        module = self.replicas[replica].modules[bucket]
        tensors = self.tensors(items, *bucket, replica=replica)
        # The server's workers run with autograd off for good (set once per thread); other callers get no_grad here.
        with _no_grad_unless_off(), self.forward_context():
            output = module(*tensors)
        output = output[0] if isinstance(output, tuple) else output
        self.record_bucket_time(bucket, time.perf_counter() - started)
        return output if output.dtype == torch.float32 else output.float()

    def outputs(self, output: torch.Tensor, count: int) -> list[Any]:
        """One answer for each of the first ``count`` rows: a float32 NumPy vector (features: orjson writes it as a
        JSON list, each value the shortest text that reads back as the same float32), or the top-5
        ``{"label", "score"}`` (classifiers)."""
        if self.manifest.task == "feature-extraction":
            rows = output.numpy()  # sliced in NumPy: a torch slice costs more than this whole conversion
            return [rows[row] for row in range(count)]
        probabilities = torch.softmax(output[:count], dim=-1)
        top = probabilities.topk(min(5, probabilities.shape[-1]), dim=-1)
        labels = self.manifest.labels
        return [
            [{"label": labels.get(index, str(index)), "score": score} for score, index in zip(scores, indices)]
            for scores, indices in zip(top.values.tolist(), top.indices.tolist())
        ]

    def run(self, replica: int, items: list[Item]) -> list[Any]:
        """forward, then one answer per item."""
        return self.outputs(self.forward(replica, items), len(items))

    def warm_up(self) -> None:
        """One inference per bucket and replica (/ping turns healthy only after every module has run), then timed
        runs per bucket: the first estimates of what each bucket costs, which live forwards then keep current."""
        for replica in range(len(self.replicas)):
            for batch, length in self.buckets:
                self._run_padding(replica, batch, length)
        for bucket in self.buckets:  # the fastest of 3: other work on the machine only ever adds time
            spent = []
            for _ in range(3):
                start = time.perf_counter()
                self._run_padding(0, *bucket)
                spent.append(time.perf_counter() - start)
            self.bucket_seconds[bucket] = min(spent)

    def _run_padding(self, replica: int, batch: int, length: int) -> None:
        if self.image:
            items = [Item(pixels=torch.zeros(3, *self.manifest.buckets[0].image_size))]
        else:
            items = [Item(token_ids=[self.pad_id] * length)]
        with torch.no_grad():
            self.replicas[replica].modules[(batch, length)](*self.tensors(items, batch, length))

    def record_bucket_time(self, bucket: tuple[int, int], seconds: float) -> None:
        """Fold one live forward's time into the bucket's estimate (a moving average), so group sizes follow what
        the buckets cost now (a load generator on the same cores, a busier host), not one warm-up moment. A single
        stall (a page fault, the scheduler) counts at most double the estimate, so it cannot flip the choice."""
        previous = self.bucket_seconds.get(bucket)
        if previous is None:
            self.bucket_seconds[bucket] = seconds
        else:
            self.bucket_seconds[bucket] = 0.8 * previous + 0.2 * min(seconds, 2 * previous)

    def group_size(self, waiting: Sequence[Item]) -> int:
        """How many of the ``waiting`` items (the head of the queue, in order) to run now: the count whose bucket
        (the smallest holding that many items of their longest length) gives the most items per second. Padding
        to a larger batch costs time, and so does a long item joining short ones. Within ``GROUP_RATE_SLACK`` of
        the best rate the largest count wins: every group also costs what the bucket timings do not see (waking
        the worker and OpenMP threads, handing the answers to the event loop), and bench/serve.py measured groups
        of 16 at 0.93 of the raw ceiling against 0.81 for groups of 8, where the raw forwards differ by 3%.
        Without timings: all."""
        if not self.bucket_seconds:
            return len(waiting)
        rates: dict[int, float] = {}
        longest = 0
        candidates = {batch for batch, _ in self.buckets} | {len(waiting)}
        for count, item in enumerate(waiting, start=1):
            longest = max(longest, item.length)
            seconds = self.bucket_seconds.get(self.pick_bucket(count, longest)) if count in candidates else None
            if seconds:
                rates[count] = count / seconds
        if not rates:
            return len(waiting)
        good_enough = (1 - GROUP_RATE_SLACK) * max(rates.values())
        return max(count for count, rate in rates.items() if rate >= good_enough)

    def split(self, items: Sequence[Item]) -> list[int]:
        """Group sizes for running all of ``items`` now, in order, in the least estimated time (the bucket timings
        and ``CALL_OVERHEAD_S`` per call): a batch handed over whole, where nothing more will join the queue.
        Without timings: the largest compiled batch at a time."""
        largest = max(batch for batch, _ in self.buckets)
        if not self.bucket_seconds:
            return [min(largest, len(items) - start) for start in range(0, len(items), largest)]
        # best[i]: (seconds, calls, first group's size) to run items[i:]; filled from the end
        best: list[tuple[float, int, int]] = [(0.0, 0, 0)] * (len(items) + 1)
        for start in range(len(items) - 1, -1, -1):
            choices = []
            longest = 0
            for count in range(1, min(largest, len(items) - start) + 1):
                longest = max(longest, items[start + count - 1].length)
                seconds, calls, _ = best[start + count]
                bucket = self.bucket_seconds.get(self.pick_bucket(count, longest))
                if bucket is not None:
                    choices.append((seconds + bucket + CALL_OVERHEAD_S, calls + 1, count))
            best[start] = min(choices, key=lambda choice: (choice[0], choice[1], -choice[2]))
        sizes, start = [], 0
        while start < len(items):
            sizes.append(best[start][2])
            start += best[start][2]
        return sizes


def _no_grad_unless_off() -> contextlib.AbstractContextManager:
    return torch.no_grad() if torch.is_grad_enabled() else contextlib.nullcontext()


def without_autograd() -> None:
    """A worker thread's initializer: grad mode is per thread, and a server's threads never need it."""
    torch.set_grad_enabled(False)


def _depth(value: Any) -> int:
    depth = 0
    while isinstance(value, list) and value:
        depth, value = depth + 1, value[0]
    return depth


def _dtype(name: str) -> torch.dtype:
    return getattr(torch, name.removeprefix("torch."))
