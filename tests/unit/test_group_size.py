"""The batcher runs as many waiting items as the compiled bucket with the best items/s allows."""

from __future__ import annotations

from types import SimpleNamespace

from neurondeploy.serving.runtime import ModelRunner


def runner(seconds: dict[int, float]):
    buckets = [(batch, 64) for batch in sorted(seconds)]
    return SimpleNamespace(
        buckets=buckets,
        max_batch=max(seconds),
        max_length=64,
        bucket_seconds={(batch, 64): value for batch, value in seconds.items()},
    )


def test_prefers_the_bucket_with_the_most_items_per_second():
    # the CPU figures measured by bench/serve.py: batch 16 gives the most items/s, 32 a little fewer
    fake = runner({1: 0.0137, 4: 0.038, 8: 0.072, 16: 0.140, 32: 0.304})
    assert ModelRunner.group_size(fake, 30) == 16  # run 16 now, 14 wait first in line
    assert ModelRunner.group_size(fake, 3) == 3  # fewer than a bucket: run them all (padded to 4)
    assert ModelRunner.group_size(fake, 1) == 1


def test_all_waiting_items_when_bigger_batches_are_cheaper_per_item():
    fake = runner({1: 0.010, 8: 0.012, 32: 0.020})  # accelerator-like: batches nearly free
    assert ModelRunner.group_size(fake, 30) == 30
    assert ModelRunner.group_size(SimpleNamespace(bucket_seconds={}), 7) == 7  # no timings: everything
