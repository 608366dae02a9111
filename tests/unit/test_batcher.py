"""The batcher with real threads: a lone request runs in the thread that submitted it, at once, alone; under load
the next group is what piled up while the model ran, cut to the best size; a failing call fails only its group."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from neurondeploy.serving.batcher import DynamicBatcher
from neurondeploy.serving.runtime import Item


class Model:
    """Doubles token ids; records who ran each call and how big it was; can be held inside a call."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []  # (thread id, group size)
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()

    def forward(self, replica: int, items: list[Item]) -> list:
        self.calls.append((threading.get_ident(), len(items)))
        self.entered.set()
        assert self.gate.wait(10)
        if any(item.token_ids[0] < 0 for item in items):
            raise ValueError("negative token")
        return [[2 * token for token in item.token_ids] for item in items]


def submit(batcher: DynamicBatcher, values: list[int]) -> Future:
    answer: Future = Future()

    def done(outputs, error):
        answer.set_exception(error) if error else answer.set_result(outputs)

    batcher.submit([Item(token_ids=[value]) for value in values], done)
    return answer


def test_a_lone_request_runs_at_once_in_the_submitting_thread():
    model = Model()
    batcher = DynamicBatcher(model.forward, 1, 16, max_delay_s=1.0)
    started = time.perf_counter()
    answer = submit(batcher, [3])
    assert answer.done() and answer.result() == [[6]]  # answered before submit returned: no hop, no wait
    assert time.perf_counter() - started < 0.5  # not the 1 s max delay
    assert model.calls == [(threading.get_ident(), 1)]


def test_under_load_the_next_group_is_what_piled_up_cut_to_the_best_size():
    model = Model()
    best_of = lambda waiting: min(len(waiting), 8)  # noqa: E731 (the runner's bucket choice, here: 8 is best)
    batcher = DynamicBatcher(model.forward, 1, 32, max_delay_s=0.0, group_size=best_of)
    model.gate.clear()
    with ThreadPoolExecutor(4) as pool:
        first = pool.submit(submit, batcher, [0])  # takes the replica and is held inside the model
        assert model.entered.wait(5)
        waiting = [submit(batcher, [value]) for value in range(1, 21)]  # 20 pile up meanwhile, from this thread
        assert not any(answer.done() for answer in waiting)
        model.gate.set()
        first.result(10)
    assert [answer.result(10) for answer in waiting] == [[[2 * value]] for value in range(1, 21)]
    assert [size for _, size in model.calls] == [1, 8, 8, 4]
    assert len({thread for thread, _ in model.calls}) == 1  # the thread that held the replica ran them all


def test_a_failing_call_fails_only_the_requests_in_its_group():
    model = Model()
    batcher = DynamicBatcher(model.forward, 1, 2, max_delay_s=0.0)
    model.gate.clear()
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(submit, batcher, [1])
        assert model.entered.wait(5)
        poisoned = [submit(batcher, [-1]), submit(batcher, [2])]  # one group of 2
        healthy = submit(batcher, [5])  # the next group
        model.gate.set()
        assert first.result(10).result(10) == [[2]]
    for answer in poisoned:
        with pytest.raises(ValueError, match="negative token"):
            answer.result(10)
    assert healthy.result(10) == [[10]]


def test_with_nothing_waiting_the_replica_is_free_before_the_answer_goes_out():
    # a closed-loop client's next request can arrive while the thread that ran its last one is still answering:
    # it must find the replica idle and run at once, not wait for that thread to come back for it
    model = Model()
    batcher = DynamicBatcher(model.forward, 1, 16, max_delay_s=0.0)
    idle_when_answered = []
    batcher.submit([Item(token_ids=[1])], lambda outputs, error: idle_when_answered.append(list(batcher.idle)))
    assert idle_when_answered == [[0]]
