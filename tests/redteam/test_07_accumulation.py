"""Red team, notebook 07 (accumulation and checkpointing), written from the notebook alone.

Each case is a learner's answer, the verdict it deserves and, for a wrong one, the cause the
message must name (and causes it must not name).
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from redteam_helpers import SLOW, assert_verdict, run_check
from torch.utils.checkpoint import checkpoint, checkpoint_sequential

from course_utils.lessons import accumulation as lesson

# --- 07-accumulation: accumulate_epoch(model, optimizer, loader, loss_fn, accum_steps) -------


def accum_divides_by_accum_steps(model, optimizer, loader, loss_fn, accum_steps):
    batches = list(loader)
    for i, (x, y) in enumerate(batches):
        (loss_fn(model(x), y) / accum_steps).backward()
        if (i + 1) % accum_steps == 0 or i == len(batches) - 1:
            optimizer.step()
            optimizer.zero_grad()


def accum_guide_fixed(model, optimizer, loader, loss_fn, accum_steps):  # no final step
    model.zero_grad()
    for i, (x, y) in enumerate(loader):
        (loss_fn(model(x), y) / accum_steps).backward()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            model.zero_grad()


def accum_zero_inside(model, optimizer, loader, loss_fn, accum_steps):
    batches = list(loader)
    for start in range(0, len(batches), accum_steps):
        group = batches[start : start + accum_steps]
        for x, y in group:
            optimizer.zero_grad()
            (loss_fn(model(x), y) / len(group)).backward()
        optimizer.step()


def accum_no_division(model, optimizer, loader, loss_fn, accum_steps):
    batches = list(loader)
    for start in range(0, len(batches), accum_steps):
        for x, y in batches[start : start + accum_steps]:
            loss_fn(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()


def accum_step_every_micro_batch(model, optimizer, loader, loss_fn, accum_steps):
    for x, y in loader:
        (loss_fn(model(x), y) / accum_steps).backward()
        optimizer.step()
        optimizer.zero_grad()


def accum_zeroes_first_group_only(model, optimizer, loader, loss_fn, accum_steps):
    batches = list(loader)
    for start in range(0, len(batches), accum_steps):
        group = batches[start : start + accum_steps]
        for x, y in group:
            (loss_fn(model(x), y) / len(group)).backward()
        optimizer.step()
        for p in optimizer.param_groups[0]["params"]:  # forgets the other groups
            p.grad = None


def accum_divides_by_samples(model, optimizer, loader, loss_fn, accum_steps):  # mean / n again
    batches = list(loader)
    for start in range(0, len(batches), accum_steps):
        group = batches[start : start + accum_steps]
        n = sum(len(x) for x, _ in group)
        for x, y in group:
            (loss_fn(model(x), y) / n).backward()
        optimizer.step()
        optimizer.zero_grad()


def accum_zero_before_step(model, optimizer, loader, loss_fn, accum_steps):
    batches = list(loader)
    for start in range(0, len(batches), accum_steps):
        group = batches[start : start + accum_steps]
        for x, y in group:
            (loss_fn(model(x), y) / len(group)).backward()
        optimizer.zero_grad()
        optimizer.step()


def accum_modulo(model, optimizer, loader, loss_fn, accum_steps):  # valid: one pass, modulo
    batches = list(loader)
    n = len(batches)
    last_start = (n - 1) // accum_steps * accum_steps
    optimizer.zero_grad()
    for i, (x, y) in enumerate(batches):
        size = accum_steps if i < last_start else n - last_start
        loss = loss_fn(model(x), y) / size
        loss.backward()
        if (i + 1) % accum_steps == 0 or i == n - 1:
            optimizer.step()
            optimizer.zero_grad()


def accum_islice_samples(model, optimizer, loader, loss_fn, accum_steps):  # valid: streaming
    it = iter(loader)
    model.zero_grad(set_to_none=True)
    while group := list(itertools.islice(it, accum_steps)):
        samples = sum(len(y) for _, y in group)
        for x, y in group:
            (loss_fn(model(x), y) * (len(y) / samples)).backward()
        optimizer.step()
        model.zero_grad(set_to_none=True)


ACCUMULATION = [
    pytest.param(
        accum_divides_by_accum_steps,
        "failed",
        r"last|group|accum_steps",
        (),
        id="wrong-divides-by-accum-steps",
    ),
    pytest.param(accum_guide_fixed, "failed", r"step", (), id="wrong-guide-loop-no-last-step"),
    pytest.param(
        accum_zero_inside, "failed", r"gradient", (), id="wrong-zero-grad-per-micro-batch"
    ),
    pytest.param(accum_no_division, "failed", r"gradient|times|divid", (), id="wrong-no-division"),
    pytest.param(
        accum_step_every_micro_batch, "failed", r"step", (), id="wrong-step-every-micro-batch"
    ),
    pytest.param(
        accum_zeroes_first_group_only,
        "failed",
        r"gradient|group",
        (),
        id="wrong-zeroes-first-param-group-only",
    ),
    pytest.param(
        accum_divides_by_samples,
        "failed",
        r"gradient|times|divid",
        (),
        id="wrong-mean-divided-by-samples",
    ),
    pytest.param(
        accum_zero_before_step, "failed", r"gradient|zero", (), id="wrong-zero-before-step"
    ),
    pytest.param(accum_modulo, "passed", None, (), id="valid-modulo-group-size"),
    pytest.param(accum_islice_samples, "passed", None, (), id="valid-islice-sample-weights"),
]


@pytest.mark.parametrize("answer, expected, cause, not_causes", ACCUMULATION)
def test_accumulation(answer, expected, cause, not_causes):
    assert_verdict(run_check(lesson.check_accumulation, answer), expected, cause, not_causes)


# --- 07-checkpointed-forward: checkpointed_forward(blocks, x) --------------------------------


def ckpt_whole_model(blocks, x):
    return checkpoint(blocks, x, use_reentrant=False)


def ckpt_one_segment(blocks, x):
    return checkpoint_sequential(blocks, 1, x, use_reentrant=False)


def ckpt_reentrant(blocks, x):
    return checkpoint_sequential(blocks, 4, x, use_reentrant=True)


def ckpt_no_rng(blocks, x):
    h = x
    for block in blocks:
        h = checkpoint(block, h, use_reentrant=False, preserve_rng_state=False)
    return h


def ckpt_eval_restore_top(blocks, x):  # dropout off "to make recomputation safe"
    was = blocks.training
    blocks.eval()
    out = checkpoint_sequential(blocks, 4, x, use_reentrant=False)
    blocks.training = was  # the children stay in eval
    return out


def ckpt_half(blocks, x):  # only the first half, in one piece
    half = len(blocks) // 2
    h = checkpoint(blocks[:half], x, use_reentrant=False)
    return blocks[half:](h)


def ckpt_detached(blocks, x):
    return checkpoint_sequential(blocks, 4, x, use_reentrant=False).detach()


# Teaching v4 turned exercise 2 into a decision (fit a memory budget with the fewest layers
# rebuilt in backward). The two answers below were valid for the old exercise (any layout
# under 0.35x) and are wrong for the new one: they fit, but rebuild more than the budget
# needs. The cases after them were written by the exercise's author, not blind.


def ckpt_every_block(blocks, x):  # was valid: fits, rebuilds all 16 blocks
    h = x
    for block in blocks:
        h = checkpoint(block, h, use_reentrant=False)
    return h


def ckpt_manual_segments(blocks, x):  # was valid: every segment checkpointed, the last included
    size = math.isqrt(len(blocks))
    h = x
    for start in range(0, len(blocks), size):
        h = checkpoint(blocks[start : start + size], h, use_reentrant=False)
    return h


def ckpt_sqrt_rule(blocks, x):  # the sqrt(n) rule: fits, rebuilds more than needed
    return checkpoint_sequential(blocks, math.isqrt(len(blocks)), x, use_reentrant=False)


def ckpt_last_blocks(blocks, x):  # enough blocks, the wrong ones: plain early activations stay
    start = len(blocks) - 12
    for i, block in enumerate(blocks):
        x = checkpoint(block, x, use_reentrant=False) if i >= start else block(x)
    return x


def ckpt_one_block_too_few(blocks, x):  # 11 blocks: the least recomputation, over the budget
    for i, block in enumerate(blocks):
        x = checkpoint(block, x, use_reentrant=False) if i < 11 else block(x)
    return x


def ckpt_first_blocks_measured(blocks, x):  # valid: the fewest first blocks, found by measuring
    from course_utils.lessons.accumulation.layouts import step_cost

    def first(k):
        def forward(b, h):
            for i, block in enumerate(b):
                h = checkpoint(block, h, use_reentrant=False) if i < k else block(h)
            return h

        return forward

    if not hasattr(ckpt_first_blocks_measured, "k"):
        with torch.enable_grad():
            was = blocks.training
            blocks.train()
            budget = lesson.THRESHOLDS["peak_ratio"].value
            ckpt_first_blocks_measured.k = next(
                k
                for k in range(len(blocks) + 1)
                if step_cost(first(k), blocks, x.detach()).peak_ratio <= budget
            )
            blocks.train(was)
    return first(ckpt_first_blocks_measured.k)(blocks, x)


def ckpt_sequential_fine(blocks, x):  # valid: 13 segments = 12 one-block segments + 4 plain
    return checkpoint_sequential(blocks, 13, x, use_reentrant=False)


CHECKPOINTED = [
    pytest.param(
        ckpt_whole_model, "failed", r"peak", (r"gradients[^;]*not equal",), id="wrong-whole-model"
    ),
    pytest.param(ckpt_one_segment, "failed", r"peak", (), id="wrong-one-segment"),
    pytest.param(ckpt_reentrant, "failed", r"gradient|reentrant", (), id="wrong-reentrant"),
    pytest.param(
        ckpt_no_rng,
        "failed",
        r"gradient|dropout|rng",
        (r"peak memory: [^;]*above",),
        id="wrong-no-rng-state",
    ),
    pytest.param(
        ckpt_eval_restore_top,
        "failed",
        r"dropout|eval|train",
        (),
        id="wrong-eval-restores-top-only",
    ),
    pytest.param(
        ckpt_half, "failed", r"peak", (r"one around everything",), id="wrong-half-checkpointed"
    ),
    pytest.param(ckpt_detached, "failed", r"gradient|grad", (), id="wrong-detached-output"),
    pytest.param(
        ckpt_every_block, "failed", r"re-?run|again in backward", (r"peak",), id="wrong-every-block"
    ),
    pytest.param(
        ckpt_manual_segments,
        "failed",
        r"re-?run|again in backward",
        (r"peak",),
        id="wrong-manual-segments-all-checkpointed",
    ),
    pytest.param(
        ckpt_sqrt_rule, "failed", r"re-?run|again in backward", (r"peak",), id="wrong-sqrt-rule"
    ),
    pytest.param(
        ckpt_last_blocks, "failed", r"peak", (r"gradient", r"nothing was"), id="wrong-last-blocks"
    ),
    pytest.param(
        ckpt_one_block_too_few, "failed", r"peak", (r"gradient",), id="wrong-one-block-too-few"
    ),
    pytest.param(
        ckpt_first_blocks_measured, "passed", None, (), id="valid-first-blocks-measured", marks=SLOW
    ),
    pytest.param(ckpt_sequential_fine, "passed", None, (), id="valid-13-segments", marks=SLOW),
]


@pytest.mark.parametrize("answer, expected, cause, not_causes", CHECKPOINTED)
def test_checkpointed_forward(answer, expected, cause, not_causes):
    assert_verdict(
        run_check(lesson.check_checkpointed_forward, answer), expected, cause, not_causes
    )


# --- 07-plan: plan(effective_batch, budget_bytes, probe) -------------------------------------


def _divisors(n):
    return [m for m in range(1, n + 1) if n % m == 0]


def _best(effective_batch, options):
    best = max(options, key=lambda o: o.samples_per_s)
    return best.micro_batch, effective_batch // best.micro_batch, best.checkpoint


def plan_never_checkpoints(effective_batch, budget_bytes, probe):
    fits = [probe(m, False) for m in _divisors(effective_batch)]
    return _best(effective_batch, [o for o in fits if o.peak_bytes <= budget_bytes])


def plan_largest_fitting(effective_batch, budget_bytes, probe):  # "bigger is faster"
    for m in sorted(_divisors(effective_batch), reverse=True):
        for c in (False, True):
            if probe(m, c).peak_bytes <= budget_bytes:
                return m, effective_batch // m, c
    raise ValueError("nothing fits")


def plan_ignores_budget(effective_batch, budget_bytes, probe):
    return _best(
        effective_batch, [probe(m, c) for m in _divisors(effective_batch) for c in (False, True)]
    )


def plan_strict_budget(effective_batch, budget_bytes, probe):
    options = [probe(m, c) for m in _divisors(effective_batch) for c in (False, True)]
    return _best(effective_batch, [o for o in options if o.peak_bytes < budget_bytes])


def plan_powers_of_two(effective_batch, budget_bytes, probe):
    sizes = [2**i for i in range(effective_batch.bit_length()) if effective_batch % 2**i == 0]
    options = [probe(m, c) for m in sizes for c in (False, True)]
    return _best(effective_batch, [o for o in options if o.peak_bytes <= budget_bytes])


def plan_excludes_full_batch(effective_batch, budget_bytes, probe):  # range stops one short
    sizes = [m for m in range(1, effective_batch) if effective_batch % m == 0]
    options = [probe(m, c) for m in sizes for c in (False, True)]
    return _best(effective_batch, [o for o in options if o.peak_bytes <= budget_bytes])


def plan_float_accum(effective_batch, budget_bytes, probe):
    options = [probe(m, c) for m in _divisors(effective_batch) for c in (False, True)]
    best = max((o for o in options if o.peak_bytes <= budget_bytes), key=lambda o: o.samples_per_s)
    return best.micro_batch, effective_batch / best.micro_batch, best.checkpoint


def plan_least_memory(effective_batch, budget_bytes, probe):
    options = [probe(m, c) for m in _divisors(effective_batch) for c in (False, True)]
    best = min(options, key=lambda o: o.peak_bytes)
    return best.micro_batch, effective_batch // best.micro_batch, best.checkpoint


def plan_descending_tuple_key(effective_batch, budget_bytes, probe):  # valid
    candidates = []
    for m in range(effective_batch, 0, -1):
        accum, rest = divmod(effective_batch, m)
        if rest:
            continue
        for use_ckpt in (True, False):
            r = probe(m, checkpoint=use_ckpt)
            if r.peak_bytes <= budget_bytes:
                candidates.append((r.samples_per_s, m, accum, use_ckpt))
    _, m, accum, use_ckpt = max(candidates)
    return int(m), int(accum), bool(use_ckpt)


def plan_sqrt_divisors(effective_batch, budget_bytes, probe):  # valid: divisors by pairs
    small = [d for d in range(1, math.isqrt(effective_batch) + 1) if effective_batch % d == 0]
    divisors = sorted(set(small + [effective_batch // d for d in small]))
    best = None
    for m in divisors:
        for c in (False, True):
            r = probe(m, c)
            if r.peak_bytes <= budget_bytes and (
                best is None or r.samples_per_s > best.samples_per_s
            ):
                best = r
    return best.micro_batch, effective_batch // best.micro_batch, best.checkpoint


PLAN = [
    pytest.param(plan_never_checkpoints, "failed", r"checkpoint", (), id="wrong-never-checkpoints"),
    pytest.param(
        plan_largest_fitting, "failed", r"samples/s|best|throughput", (), id="wrong-largest-fitting"
    ),
    pytest.param(plan_ignores_budget, "failed", r"budget|fit", (), id="wrong-ignores-budget"),
    pytest.param(plan_strict_budget, "failed", r"budget|fit|best", (), id="wrong-strict-budget"),
    pytest.param(
        plan_powers_of_two, "failed", r"divisor|micro-batch|best", (), id="wrong-powers-of-two-only"
    ),
    pytest.param(
        plan_excludes_full_batch, "failed", r"best|micro-batch", (), id="wrong-excludes-full-batch"
    ),
    pytest.param(plan_float_accum, "failed", r"int|whole", (), id="wrong-float-accum-steps"),
    pytest.param(plan_least_memory, "failed", r"best|samples/s", (), id="wrong-least-memory"),
    pytest.param(plan_descending_tuple_key, "passed", None, (), id="valid-descending-tuple-key"),
    pytest.param(plan_sqrt_divisors, "passed", None, (), id="valid-divisor-pairs"),
]


@pytest.fixture(scope="module")
def probe():
    """One probe for every case: it measures each configuration once and caches it, as the
    check's own does within one call (about 10 s of measuring on a loaded machine)."""
    return lesson.Probe()


@pytest.mark.parametrize("answer, expected, cause, not_causes", PLAN)
def test_plan(probe, answer, expected, cause, not_causes):
    assert_verdict(run_check(lesson.check_plan, answer, probe), expected, cause, not_causes)
