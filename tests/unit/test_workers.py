"""The server's worker pool with real threads: one thread takes every job below saturation, jobs that find every
thread busy run in arrival order, shutdown finishes what was submitted, and a job's escaped error kills nothing."""

from __future__ import annotations

import threading

import pytest

from neurondeploy.serving.workers import WorkerPool


def run_and_wait(pool: WorkerPool, job) -> None:
    finished = threading.Event()
    pool.submit(lambda: (job(), finished.set()))
    assert finished.wait(5)


def test_below_saturation_the_most_recently_idle_thread_takes_every_job():
    pool = WorkerPool(3, "test")
    try:
        ran_on = []
        for _ in range(20):  # one job at a time, as a lone client's requests arrive
            run_and_wait(pool, lambda: ran_on.append(threading.current_thread().name))
        # the first job may go to any thread that was ready; after that, the one that just finished takes the next
        assert len(set(ran_on[1:])) == 1, ran_on
    finally:
        pool.shutdown()


def test_jobs_that_find_every_thread_busy_run_in_arrival_order_and_shutdown_finishes_them():
    pool = WorkerPool(1, "test", initializer=lambda: threading.current_thread().__setattr__("ready", True))
    gate, entered, order = threading.Event(), threading.Event(), []

    def hold():
        entered.set()
        gate.wait(5)
        order.append("held")

    pool.submit(hold)
    assert entered.wait(5)  # the only thread is busy now
    for tag in range(10):
        pool.submit(order.append, tag)  # queued behind it
    gate.set()
    pool.shutdown()  # returns once every submitted job ran
    assert order == ["held", *range(10)]
    assert pool.threads[0].ready  # the initializer ran on the thread
    with pytest.raises(RuntimeError, match="shut down"):
        pool.submit(order.append, "late")


def test_an_escaped_exception_is_logged_and_the_thread_goes_on(caplog):
    pool = WorkerPool(1, "test")
    try:
        pool.submit(lambda: 1 / 0)
        after = []
        run_and_wait(pool, lambda: after.append(threading.current_thread().name))
        assert after == ["test_0"]
        assert "a server worker job failed" in caplog.text
    finally:
        pool.shutdown()
