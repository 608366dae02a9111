"""Continuous batching over a KV cache per sequence, as vLLM's scheduler does on a Neuron-compiled model.

At most ``max_batch`` sequences decode at once (the batch size the spec compiles for); the rest queue. Between
two decode steps (a token boundary) finished and cancelled sequences leave and queued ones join: a newcomer's
prompt is prefilled once into its own cache, which is then stacked into the batch's cache, left-padded to a
common length with an attention mask hiding the padding. Each step feeds one token per sequence (no prompt is
ever recomputed), and the model runs once for the whole batch. The engine runs in its own thread (torch
releases the GIL); tokens reach the HTTP side through each sequence's ``emit`` callback.
"""

from __future__ import annotations

import inspect
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from neurondeploy.serving.llm.protocol import SamplingParams

ERROR = "error"  # the finish reason of a sequence whose model call failed; emitted with the error's text
REPLACEMENT = "\ufffd"  # what a partial UTF-8 sequence decodes to: held back until the next token completes it


class QueueFull(Exception):
    """More sequences wait than serving.max_queue allows: 503 with Retry-After."""


@dataclass
class Sequence:
    prompt_ids: list[int]
    params: SamplingParams
    budget: int  # tokens it may generate (max_tokens, or what the compiled length leaves)
    emit: Callable[[str, str | None], None]  # (new text, finish reason or None), called from the engine thread
    generated: list[int] = field(default_factory=list)
    text: str = ""  # visible text sent so far
    full_text: str = ""  # decoded so far (sent, or held back while it may be the start of a stop string)
    prefix_offset: int = 0  # incremental detokenization offsets into generated
    read_offset: int = 0
    finish_reason: str | None = None
    cancelled: bool = False
    generator: torch.Generator | None = None
    next_token: int | None = None  # sampled, not yet fed to the model
    cache: object = None  # its own cache between prefill and joining the batch

    @property
    def stop_hold(self) -> int:
        """Characters held back while they may be the start of a stop string."""
        return max((len(stop) - 1 for stop in self.params.stop), default=0)

    @property
    def fed(self) -> int:
        """Tokens whose keys and values are in the cache."""
        return len(self.prompt_ids) + len(self.generated) - 1


@dataclass
class EngineStats:
    running: int = 0
    waiting: int = 0
    peak_running: int = 0
    # The most requests ever left queued with every decode slot taken: they waited for a slot, none was refused.
    peak_queued_behind_full_batch: int = 0
    generated_tokens: int = 0
    prompt_tokens: int = 0
    decode_steps: int = 0
    finished: int = 0
    failed: int = 0


def choose_token(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None) -> int:
    """One token from a row of logits: greedy under vLLM's temperature epsilon, else temperature, top-k, top-p."""
    if params.greedy:
        return int(torch.argmax(logits))
    logits = logits.float() / params.temperature
    if 0 < params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if params.top_p < 1.0:
        ordered, order = torch.sort(logits, descending=True)
        probabilities = torch.softmax(ordered, dim=-1)
        beyond = probabilities.cumsum(-1) - probabilities > params.top_p  # keep the smallest set reaching top_p
        logits = logits.index_fill(0, order[beyond], float("-inf"))
    return int(torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator))


class GenerationEngine:
    def __init__(
        self,
        model,
        tokenizer,
        *,
        max_batch: int,
        max_model_len: int,
        max_queue: int,
        eos_token_ids: set[int],
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.max_batch = max_batch
        self.max_model_len = max_model_len
        self.max_queue = max_queue
        self.eos_token_ids = eos_token_ids
        self.stats = EngineStats()
        self.waiting: deque[Sequence] = deque()
        self.active: list[Sequence] = []
        self.cache = None  # the batch's cache: one row per active sequence, left-padded
        self.mask: torch.Tensor | None = None  # (rows, cached length): 1 for real tokens
        self.wake = threading.Condition()
        self.stopping = False
        self.thread: threading.Thread | None = None
        self.sampler = torch.Generator().manual_seed(int(time.time_ns() % 2**63))
        # transformers 5 calls the cache argument `cache`, 4.x `past_key_values`.
        parameters = inspect.signature(model.forward).parameters
        self.cache_arg = "cache" if "cache" in parameters else "past_key_values"
        self.admitting: Sequence | None = None  # popped from the queue, not yet in the batch

    # --- the HTTP side ------------------------------------------------------------------------------------------

    def submit(self, sequence: Sequence) -> None:
        with self.wake:
            if len(self.waiting) >= self.max_queue:
                raise QueueFull(f"{len(self.waiting)} requests are queued (serving.max_queue {self.max_queue})")
            if sequence.params.seed is not None:
                sequence.generator = torch.Generator().manual_seed(sequence.params.seed)
            self.waiting.append(sequence)
            self.stats.waiting = len(self.waiting)
            self.wake.notify()

    def cancel(self, sequence: Sequence) -> None:
        """The client went away: the sequence leaves at the next token boundary."""
        sequence.cancelled = True
        with self.wake:
            self.wake.notify()

    def start(self) -> None:
        self.stopping = False
        self.thread = threading.Thread(target=self._run, name="neurondeploy-llm-engine", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        with self.wake:
            self.stopping = True
            self.wake.notify()
        if self.thread:
            self.thread.join(timeout=30)

    # --- the engine thread --------------------------------------------------------------------------------------

    def _run(self) -> None:
        with torch.inference_mode():
            while True:
                with self.wake:
                    while not self.stopping and not self.waiting and not self.active:
                        self.wake.wait()
                    if self.stopping:
                        break
                try:
                    self._admit()
                    if len(self.active) >= self.max_batch:
                        with self.wake:
                            queued = len(self.waiting)
                        self.stats.peak_queued_behind_full_batch = max(self.stats.peak_queued_behind_full_batch, queued)
                    if self.active:
                        self._decode_step()
                except Exception as exc:  # a failed model call fails the sequences in it, not the engine
                    self._fail_batch(f"{type(exc).__name__}: {exc}")
                self._retire()

    def _forward(self, input_ids: torch.Tensor, mask: torch.Tensor, cache, positions: torch.Tensor | None = None):
        kwargs = {self.cache_arg: cache, "use_cache": True, "attention_mask": mask, "logits_to_keep": 1}
        if positions is not None:
            kwargs["position_ids"] = positions
        output = self.model(input_ids=input_ids, **kwargs)
        cache = output.cache if hasattr(output, "cache") else output.past_key_values
        return output.logits[:, -1, :], cache

    def _admit(self) -> None:
        """Queued sequences join while the batch has room: prefill, first token, then into the batch cache."""
        while len(self.active) < self.max_batch:
            with self.wake:
                if not self.waiting:
                    break
                sequence = self.waiting.popleft()
                self.stats.waiting = len(self.waiting)
            if sequence.cancelled:
                continue
            from transformers import DynamicCache

            self.admitting = sequence
            prompt = torch.tensor([sequence.prompt_ids], dtype=torch.long)
            logits, sequence.cache = self._forward(prompt, torch.ones_like(prompt), DynamicCache())
            self.stats.prompt_tokens += len(sequence.prompt_ids)
            self._accept(sequence, logits[0])
            if sequence.finish_reason is None:
                self._join(sequence)
            self.admitting = None

    def _join(self, sequence: Sequence) -> None:
        own_length = len(sequence.prompt_ids)
        own_mask = torch.ones((1, own_length), dtype=torch.long)
        if self.cache is None:
            self.cache, self.mask = sequence.cache, own_mask
        else:
            batch_length = self.mask.shape[1]
            width = max(batch_length, own_length)
            for batch_layer, own_layer in zip(self.cache.layers, sequence.cache.layers):
                batch_layer.keys = torch.cat(
                    [_pad_left(batch_layer.keys, width), _pad_left(own_layer.keys, width)], dim=0
                )
                batch_layer.values = torch.cat(
                    [_pad_left(batch_layer.values, width), _pad_left(own_layer.values, width)], dim=0
                )
            self.mask = torch.cat(
                [F.pad(self.mask, (width - batch_length, 0)), F.pad(own_mask, (width - own_length, 0))]
            )
        sequence.cache = None
        self.active.append(sequence)
        self.stats.running = len(self.active)
        self.stats.peak_running = max(self.stats.peak_running, len(self.active))

    def _decode_step(self) -> None:
        rows = self.active
        inputs = torch.tensor([[sequence.next_token] for sequence in rows], dtype=torch.long)
        positions = torch.tensor([[sequence.fed] for sequence in rows], dtype=torch.long)
        self.mask = torch.cat([self.mask, torch.ones((len(rows), 1), dtype=torch.long)], dim=1)
        logits, self.cache = self._forward(inputs, self.mask, self.cache, positions)
        self.stats.decode_steps += 1
        for row, sequence in enumerate(rows):
            self._accept(sequence, logits[row])

    def _accept(self, sequence: Sequence, logits: torch.Tensor) -> None:
        """Sample the next token and decide whether the sequence ends here (EOS, a stop string, its budget)."""
        token = choose_token(logits, sequence.params, sequence.generator or self.sampler)
        sequence.generated.append(token)
        sequence.next_token = token
        self.stats.generated_tokens += 1
        if token in self.eos_token_ids and not sequence.params.ignore_eos:
            self._finish(sequence, sequence.full_text + self._pending_text(sequence, exclude_last=True), "stop")
            return
        searched_from = max(0, len(sequence.full_text) - sequence.stop_hold)
        sequence.full_text += self._new_text(sequence)
        for stop in sequence.params.stop:
            at = sequence.full_text.find(stop, searched_from)
            if at != -1:
                self._finish(sequence, sequence.full_text[:at], "stop")
                return
        if len(sequence.generated) >= sequence.budget:
            self._finish(sequence, sequence.full_text + self._pending_text(sequence), "length")
            return
        visible = sequence.full_text[: len(sequence.full_text) - sequence.stop_hold]
        if len(visible) > len(sequence.text):
            sequence.emit(visible[len(sequence.text) :], None)
            sequence.text = visible

    def _new_text(self, sequence: Sequence) -> str:
        """Incremental detokenization (vLLM's prefix/read offsets): decode a few tokens around the new one, not
        the whole answer, and only once they make whole characters (a partial UTF-8 sequence waits)."""
        ids = sequence.generated
        before = self.tokenizer.decode(ids[sequence.prefix_offset : sequence.read_offset], skip_special_tokens=True)
        after = self.tokenizer.decode(ids[sequence.prefix_offset :], skip_special_tokens=True)
        if len(after) > len(before) and not after.endswith(REPLACEMENT):
            sequence.prefix_offset, sequence.read_offset = sequence.read_offset, len(ids)
            return after[len(before) :]
        return ""

    def _pending_text(self, sequence: Sequence, exclude_last: bool = False) -> str:
        """What the incremental decode still holds back (an incomplete character), flushed as the answer ends."""
        ids = sequence.generated[:-1] if exclude_last else sequence.generated
        before = self.tokenizer.decode(ids[sequence.prefix_offset : sequence.read_offset], skip_special_tokens=True)
        after = self.tokenizer.decode(ids[sequence.prefix_offset :], skip_special_tokens=True)
        return after[len(before) :]

    def _finish(self, sequence: Sequence, text: str, reason: str) -> None:
        sequence.finish_reason = reason
        sequence.emit(text[len(sequence.text) :], reason)
        sequence.text = text
        self.stats.finished += 1

    def _fail_batch(self, message: str) -> None:
        """The batch's cache may be half-updated: every sequence in it (and one being admitted) ends with the
        error; the queue goes on with a fresh batch."""
        failed = [sequence for sequence in self.active if not sequence.finish_reason]
        if self.admitting is not None and not self.admitting.finish_reason:
            failed.append(self.admitting)
        for sequence in failed:
            sequence.finish_reason = ERROR
            sequence.emit(message, ERROR)
        self.stats.failed += len(failed)
        self.admitting = None
        self.active, self.cache, self.mask = [], None, None
        self.stats.running = 0

    def _retire(self) -> None:
        """Finished and cancelled sequences leave the batch; columns that are padding in every row go too."""
        keep = [
            row for row, sequence in enumerate(self.active) if not sequence.finish_reason and not sequence.cancelled
        ]
        if len(keep) == len(self.active):
            return
        self.active = [self.active[row] for row in keep]
        self.stats.running = len(self.active)
        if not keep:
            self.cache = self.mask = None
            return
        index = torch.tensor(keep, dtype=torch.long)
        mask = self.mask.index_select(0, index)
        start = int(mask.any(dim=0).nonzero()[0])
        self.mask = mask[:, start:]
        for layer in self.cache.layers:
            layer.keys = layer.keys.index_select(0, index)[:, :, start:]
            layer.values = layer.values.index_select(0, index)[:, :, start:]


def _pad_left(tensor: torch.Tensor, width: int) -> torch.Tensor:
    missing = width - tensor.shape[-2]
    return F.pad(tensor, (0, 0, missing, 0)) if missing else tensor
