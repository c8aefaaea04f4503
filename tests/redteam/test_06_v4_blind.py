"""Red team v4 (blind), notebook 06: 06-no-sync (`accumulate_gradients` in accumulate.py).

Written from the learner and solution notebooks, `course_utils/checks.py`, `protocol.py` and
`redteam_helpers.py` only, never the lesson's checks or their tests. Each case is the file a
learner writes with `%%writefile {workdir}/accumulate.py`, mixing a right step with a wrong one
(or a valid alternative); the check launches it under torchrun on 2 processes (~10 s a case).
"""

from __future__ import annotations

import os
import textwrap

import pytest
from redteam_helpers import FULL, assert_verdict, run_check

from course_utils.lessons import distributed as lesson

# torchrun cases: outside CI's budget; COURSE_REDTEAM=all (or COURSE_REDTEAM_SLOW=1) runs them.
SLOW = pytest.mark.skipif(
    not (FULL or os.environ.get("COURSE_REDTEAM_SLOW") == "1"),
    reason="torchrun red-team case (~10 s): COURSE_REDTEAM=all or COURSE_REDTEAM_SLOW=1 runs it",
)

HEAD = '''"""Gradient accumulation under DDP (imported by the check's worker processes)."""
import contextlib

import torch
import torch.distributed as dist
import torch.nn.functional as F

'''

# The colleague's loop with only the size fixed: the forward stays outside no_sync.
FORWARD_OUTSIDE = """
def accumulate_gradients(model, micro_batches):
    k = len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        loss = F.cross_entropy(model(x), y) / k
        if i < k - 1:
            with model.no_sync():
                loss.backward()
        else:
            loss.backward()
"""

# no_sync right (forward inside), but the k micro-batch means are summed, not averaged.
NO_DIVIDE = """
def accumulate_gradients(model, micro_batches):
    k = len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        with contextlib.nullcontext() if i == k - 1 else model.no_sync():
            F.cross_entropy(model(x), y).backward()
"""

# A manual collective instead of DDP's: everything local, then one all_reduce per parameter.
MANUAL_ALLREDUCE = """
def accumulate_gradients(model, micro_batches):
    k = len(micro_batches)
    with model.no_sync():
        for x, y in micro_batches:
            (F.cross_entropy(model(x), y) / k).backward()
    world = dist.get_world_size()
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)
            p.grad /= world
"""

# Every micro-batch inside no_sync, the last one too: nothing is ever averaged over ranks.
ALL_IN_NO_SYNC = """
def accumulate_gradients(model, micro_batches):
    k = len(micro_batches)
    with model.no_sync():
        for x, y in micro_batches:
            (F.cross_entropy(model(x), y) / k).backward()
"""

# The synchronising micro-batch is the first, not the last: one all-reduce, of 1/k of the sum.
SYNC_FIRST = """
def accumulate_gradients(model, micro_batches):
    k = len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        with contextlib.nullcontext() if i == 0 else model.no_sync():
            (F.cross_entropy(model(x), y) / k).backward()
"""

# "DDP sums over ranks", so the loss is divided by k * world_size: half the gradient.
DIVIDES_BY_WORLD = """
def accumulate_gradients(model, micro_batches):
    k, world = len(micro_batches), dist.get_world_size()
    for i, (x, y) in enumerate(micro_batches):
        with contextlib.nullcontext() if i == k - 1 else model.no_sync():
            (F.cross_entropy(model(x), y) / (k * world)).backward()
"""

# zero_grad inside the loop (where a plain training loop has it): only the last micro-batch.
ZERO_GRAD_INSIDE = """
def accumulate_gradients(model, micro_batches):
    k = len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        model.zero_grad(set_to_none=True)
        with contextlib.nullcontext() if i == k - 1 else model.no_sync():
            (F.cross_entropy(model(x), y) / k).backward()
"""

# One extra all_reduce "to be sure" after DDP's own sync: the count doubles, the mean is kept.
EXTRA_ALLREDUCE = """
def accumulate_gradients(model, micro_batches):
    k = len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        with contextlib.nullcontext() if i == k - 1 else model.no_sync():
            (F.cross_entropy(model(x), y) / k).backward()
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)
            p.grad /= dist.get_world_size()
"""

# Valid: forward (which decides) inside no_sync, backward after leaving it.
VALID_BACKWARD_AFTER = """
def accumulate_gradients(model, micro_batches):
    k = len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        if i < k - 1:
            with model.no_sync():
                loss = F.cross_entropy(model(x), y)
        else:
            loss = F.cross_entropy(model(x), y)
        (loss / k).backward()
"""

# Valid: all but the last under one no_sync, then the last, explicitly.
VALID_SPLIT_LOOP = """
def accumulate_gradients(model, micro_batches):
    *first, last = list(micro_batches)
    k = len(first) + 1
    with model.no_sync():
        for x, y in first:
            F.cross_entropy(model(x), y).div(k).backward()
    x, y = last
    F.cross_entropy(model(x), y).div(k).backward()
"""

# Valid: ExitStack, and the mean kept by scaling each loss by 1/k via mul.
VALID_EXITSTACK = """
def accumulate_gradients(model, micro_batches):
    k = len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        with contextlib.ExitStack() as stack:
            if i != k - 1:
                stack.enter_context(model.no_sync())
            loss = F.cross_entropy(model(x), y, reduction="mean")
            loss.mul(1.0 / k).backward()
"""

NOT_FORWARD = r"forward"
NOT_SIZE = r"divide|mean of|k times|\b4x|sum of"
NO_SYNC = [
    pytest.param(
        FORWARD_OUTSIDE, "failed", r"forward", (NOT_SIZE,), id="wrong-forward_outside_no_sync"
    ),
    pytest.param(
        NO_DIVIDE,
        "failed",
        r"sum|divid|mean|/ ?k|\b4(\.0)?x|times",
        (NOT_FORWARD,),
        id="wrong-sums_micro_batch_means",
    ),
    pytest.param(
        MANUAL_ALLREDUCE,
        "failed",
        r"all.?reduce|no_sync|hook|DDP",
        (NOT_SIZE, r"never average"),  # its gradient is the right mean: only the count is wrong
        id="wrong-manual_allreduce_per_param",
    ),
    pytest.param(
        ALL_IN_NO_SYNC,
        "failed",
        r"\b0 all.?reduce|no all.?reduce|never|rank",
        (NOT_SIZE,),
        id="wrong-last_inside_no_sync",
    ),
    pytest.param(
        SYNC_FIRST,
        "failed",
        r"rank|first|last|differ",
        (NOT_FORWARD,),
        id="wrong-syncs_first_not_last",
    ),
    pytest.param(
        DIVIDES_BY_WORLD,
        "failed",
        r"half|0\.5x|world.?size|divid|\b2x",
        (NOT_FORWARD,),
        id="wrong-divides_by_world_size",
    ),
    pytest.param(
        ZERO_GRAD_INSIDE,
        "failed",
        r"zero_grad|last micro|only (the )?(last|one)",
        (NOT_FORWARD,),
        id="wrong-zero_grad_inside_loop",
    ),
    pytest.param(
        EXTRA_ALLREDUCE,
        "failed",
        r"all.?reduce",
        (NOT_FORWARD, NOT_SIZE),
        id="wrong-extra_manual_allreduce",
    ),
    pytest.param(VALID_BACKWARD_AFTER, "passed", None, (), id="valid-backward_after_no_sync"),
    pytest.param(VALID_SPLIT_LOOP, "passed", None, (), id="valid-split_loop"),
    pytest.param(VALID_EXITSTACK, "passed", None, (), id="valid-exitstack"),
]
NO_SYNC = [pytest.param(*p.values, marks=SLOW, id=p.id) for p in NO_SYNC]


@pytest.mark.parametrize("source, expected, cause, not_causes", NO_SYNC)
def test_no_sync(tmp_path, source, expected, cause, not_causes):
    path = tmp_path / "accumulate.py"
    path.write_text(HEAD + textwrap.dedent(source))
    assert_verdict(run_check(lesson.check_no_sync, path), expected, cause, not_causes)
