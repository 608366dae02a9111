"""Dynamic batching in the server's worker threads: requests' items queue up and are grouped, up to the compiled
batch that gives the most items/s, per replica.

There is no batching thread. The worker thread that queues items and finds a replica idle runs the model itself,
at once: a lone request costs what it costs on a batch-1 server (one thread, no wait, the smallest bucket that
holds it). Under load, items pile up while the replica runs, and the thread that ran it goes on with the next
group as soon as it has answered the last one; it also waits up to ``max_delay`` for a group to reach the size of
the previous one, so closed-loop clients whose answers just went out have time to send the next request. Answers
go back through each request's ``done`` callback, from whichever thread ran its last item; when nothing is waiting
the replica is released first, so a client's next request never finds it held by a thread that is only answering.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from neurondeploy.serving.runtime import Item

Done = Callable[[list[Any] | None, BaseException | None], None]


@dataclass
class _Request:
    outputs: list[Any]
    remaining: int
    done: Done
    failed: bool = False


@dataclass
class _Pending:
    item: Item
    request: _Request
    index: int
    enqueued: float = field(default_factory=time.perf_counter)


class DynamicBatcher:
    def __init__(
        self,
        forward: Callable[[int, list[Item]], list[Any]],
        replicas: int,
        max_batch: int,
        max_delay_s: float,
        observe: Callable[[int, list[float]], None] | None = None,
        group_size: Callable[[Sequence[Item]], int] | None = None,
    ) -> None:
        self.forward = forward  # (replica, items) -> one answer per item
        # How many of the waiting items (the head of the queue, at most max_batch) to run now: the runner knows
        # which compiled bucket gives the most items/s; the rest wait, first in line, for the next call.
        self.group_size = group_size or len
        self.max_batch = max_batch
        self.max_delay_s = max_delay_s
        self.observe = observe  # (batch size, queue seconds of each item) -> metrics
        self.lock = threading.Lock()
        self.arrived = threading.Condition(self.lock)
        self.waiting: deque[_Pending] = deque()
        self.idle: list[int] = list(range(replicas))
        self.target = 1  # the last group's size: how many to wait for next time

    def submit(self, items: list[Item], done: Done) -> None:
        """Queue a request's items; ``done(answers, None)`` gets the answers in order, ``done(None, error)`` the
        failure of a model call that held one of them (only the requests in that group fail). If a replica is
        idle, the calling thread runs groups until nothing is waiting."""
        request = _Request([None] * len(items), len(items), done)
        with self.lock:
            self.waiting.extend(_Pending(item, request, index) for index, item in enumerate(items))
            replica = self.idle.pop() if self.idle else None
            if replica is None:
                self.arrived.notify()  # a runner waiting for its group to fill
        if replica is not None:
            self._run_while_waiting(replica)

    def _run_while_waiting(self, replica: int) -> None:
        while True:
            with self.lock:
                group = self._collect()
                if not group:  # another replica took them meanwhile
                    self.idle.append(replica)
                    return
            finished = self._run(replica, group)
            with self.lock:  # nothing waiting: the replica is free before the answers go out, not after
                released = not self.waiting
                if released:
                    self.idle.append(replica)
            for request, outputs, error in finished:
                request.done(outputs, error)
            if released:
                return

    def _collect(self) -> list[_Pending]:
        """The next group (lock held): the head of the queue, waiting up to max_delay for it to reach the last
        group's size, cut to the size with the most items/s."""
        if not self.waiting:
            return []
        if len(self.waiting) < self.target and self.max_delay_s > 0:
            deadline = time.perf_counter() + self.max_delay_s
            while len(self.waiting) < min(self.target, self.max_batch):
                remaining = deadline - time.perf_counter()
                if remaining <= 0:
                    break
                self.arrived.wait(remaining)
        head = [entry.item for entry in itertools.islice(self.waiting, self.max_batch)]
        count = max(1, min(len(head), self.group_size(head)))
        group = [self.waiting.popleft() for _ in range(count)]
        self.target = count
        return group

    def _run(
        self, replica: int, group: list[_Pending]
    ) -> list[tuple[_Request, list[Any] | None, BaseException | None]]:
        """One model call; the requests it completed (or failed), for the caller to answer."""
        started = time.perf_counter()
        finished: list[tuple[_Request, list[Any] | None, BaseException | None]] = []
        try:
            answers = self.forward(replica, [entry.item for entry in group])
        except Exception as exc:  # the model failed: these requests get the error, the others are untouched
            with self.lock:  # another replica may hold other items of the same request
                for entry in group:
                    if not entry.request.failed:
                        entry.request.failed = True
                        finished.append((entry.request, None, exc))
        else:
            with self.lock:
                for entry, answer in zip(group, answers):
                    request = entry.request
                    request.outputs[entry.index] = answer
                    request.remaining -= 1
                    if request.remaining == 0 and not request.failed:
                        finished.append((request, request.outputs, None))
        if self.observe:
            self.observe(len(group), [started - entry.enqueued for entry in group])
        return finished
