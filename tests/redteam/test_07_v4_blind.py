"""Red team v4 (blind) for 07-checkpointed-forward, written from notebook 07 alone.

Exercise 2: `checkpointed_forward(blocks, x)` for the 16-block stack (width 32, batch 512,
dropout on; `x` is data, no grad) must peak within the budget (THRESHOLDS["peak_ratio"],
0.35x the plain step), give the plain step's gradients, and re-run no more Linear layers
than the cheapest layout within the budget. The notebook's layout table (section 2, "What
we found") shows the learner: first 11 blocks 0.37x (over), first 12 0.32x (fits, 12
re-runs), last 12 over, sqrt(16)=4 segments fits with 21 re-runs. A learner reads K = 12
off that table and writes it in; the wrong answers are what a half-understanding learner
writes around it. Each case: the verdict it deserves and, for a wrong answer, the cause the
failing parts must name and causes they must not name.
"""

from __future__ import annotations

import pytest
from redteam_helpers import assert_verdict, in_ci, open_holes, run_check
from torch.utils.checkpoint import checkpoint, checkpoint_sequential

from course_utils.lessons import accumulation as lesson

K = 12  # the fewest first blocks that fit, read off the notebook's layout table

# --- valid alternatives -------------------------------------------------------------------


def valid_first_k_loop(blocks, x):
    """The first K blocks checkpointed one by one, the rest run as they are."""
    for i, block in enumerate(blocks):
        x = checkpoint(block, x, use_reentrant=False) if i < K else block(x)
    return x


def valid_sequential_same_layout(blocks, x):
    """checkpoint_sequential with 13 segments of a 16-block stack: 12 segments of one block
    each are checkpointed, the last segment (4 blocks) is not: the same layout as first 12."""
    return checkpoint_sequential(blocks, K + 1, x, use_reentrant=False)


def valid_sliced_sequential(blocks, x):
    """The first K+1 blocks through checkpoint_sequential in K+1 one-block segments (the
    last, block K, plain), then the remaining blocks as a plain Sequential."""
    h = checkpoint_sequential(blocks[: K + 1], K + 1, x, use_reentrant=False)
    return blocks[K + 1 :](h)


def valid_closure_per_block(blocks, x):
    """A closure per block (a learner who wraps the call) and explicit preserve_rng_state."""
    h = x
    for i in range(len(blocks)):
        if i < K:
            h = checkpoint(
                lambda t, b=blocks[i]: b(t), h, use_reentrant=False, preserve_rng_state=True
            )
        else:
            h = blocks[i](h)
    return h


def valid_net_inside_residual(blocks, x):
    """Checkpoints each early block's branch (block.net) and adds the residual outside: the
    residual add keeps nothing for backward, so this is the first-K layout."""
    for i, block in enumerate(blocks):
        x = x + checkpoint(block.net, x, use_reentrant=False) if i < K else block(x)
    return x


# --- wrong answers ------------------------------------------------------------------------


def wrong_sqrt_segments(blocks, x):
    """Chen et al.'s sqrt(n): 4 segments. Fits, but re-runs 21 Linear layers against 12."""
    return checkpoint_sequential(blocks, 4, x, use_reentrant=False)


def wrong_every_block(blocks, x):
    """Every block checkpointed: the lowest peak, the most recomputation (16)."""
    for block in blocks:
        x = checkpoint(block, x, use_reentrant=False)
    return x


def wrong_sixteen_segments(blocks, x):
    """checkpoint_sequential with one segment per block: 15 checkpointed."""
    return checkpoint_sequential(blocks, len(blocks), x, use_reentrant=False)


def wrong_one_block_more(blocks, x):
    """First K+1: fits comfortably, one block's re-run more than needed (integer slack)."""
    for i, block in enumerate(blocks):
        x = checkpoint(block, x, use_reentrant=False) if i < K + 1 else block(x)
    return x


def wrong_last_k(blocks, x):
    """The last K blocks instead of the first: same re-runs, but over the budget."""
    start = len(blocks) - K
    for i, block in enumerate(blocks):
        x = checkpoint(block, x, use_reentrant=False) if i >= start else block(x)
    return x


def wrong_too_few(blocks, x):
    """First K-1 (11): one block short, 0.37x against the 0.35x budget."""
    for i, block in enumerate(blocks):
        x = checkpoint(block, x, use_reentrant=False) if i < K - 1 else block(x)
    return x


def wrong_reentrant_omitted(blocks, x):
    """use_reentrant omitted (torch's default still the reentrant one): x needs no grad, so
    the checkpointed blocks get no gradient."""
    for i, block in enumerate(blocks):
        x = checkpoint(block, x) if i < K else block(x)
    return x


def wrong_reentrant_true(blocks, x):
    for i, block in enumerate(blocks):
        x = checkpoint(block, x, use_reentrant=True) if i < K else block(x)
    return x


def wrong_no_rng_state(blocks, x):
    """preserve_rng_state=False "to save time": dropout draws new masks in the rebuild."""
    for i, block in enumerate(blocks):
        x = (
            checkpoint(block, x, use_reentrant=False, preserve_rng_state=False)
            if i < K
            else block(x)
        )
    return x


def wrong_whole_model(blocks, x):
    """One checkpoint around everything: keeps nothing in forward, rebuilds it all at once."""
    return checkpoint(blocks, x, use_reentrant=False)


def wrong_one_segment(blocks, x):
    """checkpoint_sequential with 1 segment: its last segment is never checkpointed."""
    return checkpoint_sequential(blocks, 1, x, use_reentrant=False)


def wrong_reentrant_grad_input(blocks, x):
    """'Fixes' the reentrant cut-off by making x require grad: the reentrant rebuild runs a
    whole block (no early stop), so more Linear layers are re-run than the cheapest layout's."""
    x = x.detach().requires_grad_()
    for i, block in enumerate(blocks):
        x = checkpoint(block, x, use_reentrant=True) if i < K else block(x)
    return x


def wrong_pairs(blocks, x):
    """The first K blocks checkpointed two at a time (6 segments of 2): same blocks, but a
    segment of two is rebuilt at once and re-runs its first block's second Linear too."""
    for start in range(0, len(blocks), 2):
        seg = blocks[start : start + 2]
        x = checkpoint(seg, x, use_reentrant=False) if start < K else seg(x)
    return x


def wrong_eval_to_avoid_dropout(blocks, x):
    """'Dropout makes the rebuild differ: put the blocks in eval mode first.' The step no
    longer trains with dropout (and the mode leaks to the caller)."""
    blocks.eval()
    for i, block in enumerate(blocks):
        x = checkpoint(block, x, use_reentrant=False) if i < K else block(x)
    return x


REUSE = r"no gradient|use_reentrant|nothing was checkpointed|rebuilt at once"
RERUN = r"re-?run|recomput|rebuil|Linear"
PEAK = r"peak|budget|memory"

CASES = [
    pytest.param(valid_first_k_loop, "passed", None, (), id="valid-first_k_loop"),
    pytest.param(
        valid_sequential_same_layout, "passed", None, (), id="valid-sequential_same_layout"
    ),
    pytest.param(valid_sliced_sequential, "passed", None, (), id="valid-sliced_sequential"),
    pytest.param(valid_closure_per_block, "passed", None, (), id="valid-closure_per_block"),
    pytest.param(valid_net_inside_residual, "passed", None, (), id="valid-net_inside_residual"),
    # "preserve_rng_state" added after the run (tightened, as 05 compile_if_faster was): this
    # answer keeps the default preserve_rng_state=True; its step runs without dropout at all
    pytest.param(
        wrong_eval_to_avoid_dropout,
        "failed",
        r"dropout|eval|train",
        (
            r"no gradient|use_reentrant|nothing was checkpointed|holds it all again",
            r"preserve_rng_state",
        ),
        id="wrong-eval_to_avoid_dropout",
    ),
    pytest.param(
        wrong_sqrt_segments, "failed", RERUN, (REUSE, r"gradients differ"), id="wrong-sqrt_segments"
    ),
    pytest.param(
        wrong_every_block, "failed", RERUN, (REUSE, r"gradients differ"), id="wrong-every_block"
    ),
    pytest.param(
        wrong_sixteen_segments,
        "failed",
        RERUN,
        (REUSE, r"gradients differ"),
        id="wrong-sixteen_segments",
    ),
    pytest.param(
        wrong_one_block_more,
        "failed",
        RERUN,
        (REUSE, r"gradients differ"),
        id="wrong-one_block_more",
    ),
    pytest.param(
        wrong_last_k,
        "failed",
        PEAK,
        (r"no gradient|use_reentrant|nothing was checkpointed", r"gradients differ"),
        id="wrong-last_k",
    ),
    # not-cause narrowed after the run (the case was wrong): "rebuilt at once" was meant to
    # exclude the whole-model diagnosis, but also matched a hedge ("too much is kept, or
    # rebuilt at once") whose first half is this answer's cause
    pytest.param(
        wrong_too_few,
        "failed",
        PEAK,
        (
            r"no gradient|use_reentrant|nothing was checkpointed|holds it all again",
            r"gradients differ",
        ),
        id="wrong-too_few",
    ),
    pytest.param(
        wrong_reentrant_omitted,
        "failed",
        r"use_reentrant|no gradient",
        (r"nothing was checkpointed|rebuilt at once",),
        id="wrong-reentrant_omitted",
    ),
    pytest.param(
        wrong_reentrant_true,
        "failed",
        r"use_reentrant|no gradient",
        (r"nothing was checkpointed|rebuilt at once",),
        id="wrong-reentrant_true",
    ),
    pytest.param(
        wrong_no_rng_state,
        "failed",
        r"gradient|dropout|rng|random",
        (r"no gradient|use_reentrant|nothing was checkpointed|rebuilt at once",),
        id="wrong-no_rng_state",
    ),
    pytest.param(
        wrong_whole_model,
        "failed",
        r"at once|whole|everything",
        (r"no gradient|use_reentrant|nothing was checkpointed",),
        id="wrong-whole_model",
    ),
    pytest.param(
        wrong_one_segment,
        "failed",
        r"nothing|last segment",
        (r"no gradient|use_reentrant|rebuilt at once",),
        id="wrong-one_segment",
    ),
    # tightened after the run (as 05 compile_if_faster was): both checkpoint exactly the K
    # blocks the budget needs; their extra re-runs come from how each checkpoint rebuilds
    # (reentrant: a whole block; a pair: the first block's last Linear), so "checkpoints more
    # than the budget needs" is a cause they do not have
    pytest.param(
        wrong_reentrant_grad_input,
        "failed",
        RERUN,
        (r"no gradient|nothing was checkpointed|gradients differ", r"checkpoints more than"),
        id="wrong-reentrant_grad_input",
    ),
    pytest.param(
        wrong_pairs,
        "failed",
        RERUN + "|" + PEAK,
        (
            r"no gradient|use_reentrant|nothing was checkpointed",
            r"gradients differ",
            r"checkpoints more than",
        ),
        id="wrong-pairs",
    ),
]


# each case measures a few training steps (~8 s on the loaded 2-core machine): CI runs three,
# COURSE_REDTEAM=all runs every one
CI_CASES = {"valid-first_k_loop", "wrong-sqrt_segments", "wrong-last_k"}


# Open holes (id: reason). The three this round found (issue 26 follow-up) are closed: the
# recomputation message now says how the layout rebuilds (blocks rebuilt, rebuilds, reentrant
# checkpoint nodes in the graph), and a step whose gradients equal the plain model's in eval
# mode is told it trained without dropout.
HOLES: dict[str, str] = {}


@pytest.mark.parametrize("fn, expect, cause, not_causes", open_holes(in_ci(CASES, CI_CASES), HOLES))
def test_checkpointed_forward(fn, expect, cause, not_causes):
    assert_verdict(run_check(lesson.check_checkpointed_forward, fn), expect, cause, not_causes)
