"""Dynamic batching: requests' items queue up and are grouped, up to the largest compiled batch, per replica.

A replica that is idle takes whatever is queued at once, so a lone request waits for nothing. Under load,
items pile up while the replica runs, and the next group is large by itself; the batcher also waits up to
``max_delay`` for a group to reach the size of the previous one, so closed-loop clients whose answers just
went out have time to send the next request. One worker task per replica, each running the model in a
thread (torch releases the GIL), keeps the event loop free for HTTP.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from neurondeploy.serving.runtime import Item


class QueueFull(Exception):
    """More items are waiting than serving.max_queue allows: answer 503 with Retry-After."""


@dataclass
class _Pending:
    item: Item
    future: asyncio.Future
    enqueued: float = field(default_factory=time.perf_counter)


class DynamicBatcher:
    def __init__(
        self,
        run: Callable[[int, list[Item]], list[Any]],
        replicas: int,
        max_batch: int,
        max_delay_s: float,
        max_queue: int,
        observe: Callable[[int, list[float]], None] | None = None,
        group_size: Callable[[int], int] | None = None,
    ) -> None:
        self.run = run
        # How many of n waiting items to run now (the runner knows which compiled batch gives most items/s);
        # the rest wait, first in line, for the next call.
        self.group_size = group_size or (lambda waiting: waiting)
        self.held: deque[_Pending] = deque()
        self.replicas = replicas
        self.max_batch = max_batch
        self.max_delay_s = max_delay_s
        self.max_queue = max_queue
        self.observe = observe  # (batch size, queue seconds of each item) -> metrics
        self.queue: asyncio.Queue[_Pending] = asyncio.Queue()
        self.arrived = asyncio.Event()
        self.workers: list[asyncio.Task] = []
        self.in_flight = 0

    def start(self) -> None:
        self.workers = [asyncio.create_task(self._worker(replica)) for replica in range(self.replicas)]

    async def stop(self) -> None:
        """Finish everything queued, then stop the workers (graceful shutdown drains, it does not drop)."""
        while not self.queue.empty() or self.held or self.in_flight:
            await asyncio.sleep(0.005)
        for worker in self.workers:
            worker.cancel()
        await asyncio.gather(*self.workers, return_exceptions=True)

    async def submit(self, items: list[Item]) -> list[Any]:
        """Queue a request's items; the answers come back in order. A failed model call fails only the requests
        whose items were in that group."""
        waiting = self.queue.qsize() + len(self.held)
        if waiting + len(items) > self.max_queue:
            raise QueueFull(f"{waiting} inputs are queued (serving.max_queue {self.max_queue})")
        loop = asyncio.get_running_loop()
        pending = [_Pending(item, loop.create_future()) for item in items]
        for entry in pending:
            self.queue.put_nowait(entry)
        self.arrived.set()
        return list(await asyncio.gather(*(entry.future for entry in pending)))

    async def _collect(self, target: int) -> list[_Pending]:
        group = []
        while self.held and len(group) < self.max_batch:
            group.append(self.held.popleft())
        if not group:
            group.append(await self.queue.get())
        deadline = time.perf_counter() + self.max_delay_s
        while len(group) < self.max_batch:
            try:
                group.append(self.queue.get_nowait())
                continue
            except asyncio.QueueEmpty:
                pass
            remaining = deadline - time.perf_counter()
            if len(group) >= target or remaining <= 0:
                break
            self.arrived.clear()
            try:
                await asyncio.wait_for(self.arrived.wait(), remaining)
            except asyncio.TimeoutError:
                break
        keep = max(1, min(len(group), self.group_size(len(group))))
        self.held.extendleft(reversed(group[keep:]))
        return group[:keep]

    async def _worker(self, replica: int) -> None:
        loop = asyncio.get_running_loop()
        target = 1
        while True:
            group = await self._collect(target)
            self.in_flight += len(group)
            started = time.perf_counter()
            try:
                outputs = await loop.run_in_executor(None, self.run, replica, [entry.item for entry in group])
            except Exception as exc:  # the model failed: these requests get 500, the others are untouched
                for entry in group:
                    if not entry.future.done():
                        entry.future.set_exception(exc)
            else:
                for entry, output in zip(group, outputs):
                    if not entry.future.done():
                        entry.future.set_result(output)
            finally:
                self.in_flight -= len(group)
            if self.observe:
                self.observe(len(group), [started - entry.enqueued for entry in group])
            # Next time, wait (up to max_delay) for as many items as this group had: under steady load the
            # clients answered just now are about to send again.
            target = len(group)
