"""CPU the server spends, in and out of the model, from its own counters (exposed on /metrics).

The process's CPU minus the model's is what serving costs per request whatever else shares the cores (a load
generator, a sidecar): the figure `bench/serve.py` reports. The model's CPU is the CPU of the thread that calls each
forward, during the forward, plus every thread that Python did not start: torch's intra-op (OpenMP) and inter-op
pools, which run nothing but the model (the tokenizer's own pool is off: TOKENIZERS_PARALLELISM=false).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

TASKS = Path("/proc/self/task")


class CpuAccount:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.forward_seconds = 0.0

    @contextlib.contextmanager
    def forward(self) -> Iterator[None]:
        started = time.thread_time()
        try:
            yield
        finally:
            spent = time.thread_time() - started
            with self.lock:
                self.forward_seconds += spent

    def model_seconds(self) -> float:
        return self.forward_seconds + native_threads_cpu_seconds()

    @staticmethod
    def process_seconds() -> float:
        return time.process_time()


def native_threads_cpu_seconds() -> float:
    """user + system CPU of this process's threads that Python did not start (Linux; 0 elsewhere)."""
    if not TASKS.is_dir():
        return 0.0
    python_threads = {str(thread.native_id) for thread in threading.enumerate()}
    ticks = 0
    for task in TASKS.iterdir():
        if task.name in python_threads:
            continue
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # the thread ended meanwhile
        ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")
