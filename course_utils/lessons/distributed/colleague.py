"""Exercise 2's starting point: a colleague's gradient accumulation under DDP, to diagnose.

It means to all-reduce once per optimizer step and to leave the mean gradient of the whole
batch, and it runs without an error. The notebook prints its source, and the benchmark launch
(bench.py) measures it beside the course's own: all-reduces counted by the communication
hook, and the size of the gradient it leaves against the full-batch mean.
"""

from __future__ import annotations

import torch.nn.functional as F


def colleague_accumulate(model, micro_batches) -> None:
    """Accumulate the gradients of `micro_batches` in `model` (DDP-wrapped), syncing once."""
    for i, (x, y) in enumerate(micro_batches):
        loss = F.cross_entropy(model(x), y)
        if i < len(micro_batches) - 1:
            with model.no_sync():  # no all-reduce for these micro-batches
                loss.backward()
        else:
            loss.backward()  # the last one synchronises the accumulated gradients
