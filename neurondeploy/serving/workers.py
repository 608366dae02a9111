"""The server's worker threads: a fixed set, where the most recently idle thread takes the next job.

torch runs a model's intra-op work on an OpenMP team that belongs to the calling thread, and a forward leaves the
calling core's caches full of weights. ThreadPoolExecutor wakes whichever thread has waited longest, so at a
lone client's pace every request lands on another thread, with another team to wake and colder caches for the
tokenizer and the answer's conversion. Here, below saturation, the same thread takes every job; under load the
jobs that find no idle thread wait in arrival order and are taken by whichever thread finishes first.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from collections.abc import Callable
from functools import partial

log = logging.getLogger(__name__)
Job = Callable[[], None]


class WorkerPool:
    def __init__(self, threads: int, name: str, initializer: Callable[[], None] | None = None) -> None:
        self.lock = threading.Lock()
        self.backlog: deque[Job] = deque()  # jobs that found every thread busy
        self.idle: list[queue.SimpleQueue[Job | None]] = []  # a stack: the last thread to finish is woken first
        self.closed = False
        self.initializer = initializer
        self.threads = [
            threading.Thread(target=self._work, name=f"{name}_{index}", daemon=True) for index in range(threads)
        ]
        for thread in self.threads:
            thread.start()

    def submit(self, function: Callable[..., None], *args: object) -> None:
        """Run ``function(*args)`` on a worker; its exceptions are its own to handle (they are only logged)."""
        job = partial(function, *args)
        with self.lock:
            if self.closed:
                raise RuntimeError("the worker pool is shut down")
            if not self.idle:
                self.backlog.append(job)
                return
            inbox = self.idle.pop()
        inbox.put(job)

    def shutdown(self) -> None:
        """Let the workers finish every job already submitted, then stop them."""
        with self.lock:
            self.closed = True
            idle, self.idle = self.idle, []
        for inbox in idle:
            inbox.put(None)
        for thread in self.threads:
            thread.join()

    def _work(self) -> None:
        if self.initializer:
            self.initializer()
        inbox: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        while True:
            with self.lock:
                job = self.backlog.popleft() if self.backlog else None
                if job is None:
                    if self.closed:
                        return
                    self.idle.append(inbox)
            if job is None:
                job = inbox.get()
                if job is None:
                    return
            try:
                job()
            except Exception:  # a job answers its own errors; one that escapes must not kill the thread
                log.exception("a server worker job failed")
