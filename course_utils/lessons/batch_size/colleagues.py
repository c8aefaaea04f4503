"""A colleague's throughput sweep, which lesson 02's exercise 1 diagnoses and fixes. The
notebook shows it with `cu.show_source` and runs it on the real step; check 02-throughput-sweep
grades the learner's fixed sweep, and the tests hold that it names the faults of this one."""

from __future__ import annotations

import time


def colleague_sweep(make_step, batch_sizes):
    """A colleague's sweep: {batch size: samples per second} of one training step each."""
    step = make_step(batch_sizes[0])  # build the model, optimizer and batch once
    rates = {}
    for b in batch_sizes:
        start = time.perf_counter()
        step()
        rates[b] = b / (time.perf_counter() - start)
    return rates
