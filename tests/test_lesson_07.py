"""Lesson 07's checks pass the reference and valid alternatives, and fail the mistakes
learners make with accumulation, checkpointing and micro-batch planning, naming the cause."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from check_helpers import fails, failure, not_attempted, status_of
from torch.utils.checkpoint import checkpoint, checkpoint_sequential

from course_utils.lessons import accumulation as lesson
from course_utils.lessons.accumulation import accumulation_check
from course_utils.lessons.accumulation import checks as lesson_checks
from course_utils.lessons.accumulation.planning import Measured

# --- exercise 1: accumulation ----------------------------------------------------------------


def groups_of(loader, k):
    batches = list(loader)
    return [batches[i : i + k] for i in range(0, len(batches), k)]


def sum_reduction_per_sample(model, optimizer, loader, loss_fn, accum_steps):
    """Valid: sum the per-sample losses and divide by the samples in the group."""
    for group in groups_of(loader, accum_steps):
        n = sum(len(y) for _, y in group)
        for x, y in group:
            (F.cross_entropy(model(x), y, reduction="sum") / n).backward()
        optimizer.step()
        optimizer.zero_grad()


def streaming_with_len(model, optimizer, loader, loss_fn, accum_steps):
    """Valid: one pass with `if (i + 1) % k == 0 or last`, dividing by the group's size."""
    n = len(loader)
    for i, (x, y) in enumerate(loader):
        start = i - i % accum_steps
        size = min(accum_steps, n - start)
        (loss_fn(model(x), y) / size).backward()
        if (i + 1) % accum_steps == 0 or i + 1 == n:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)


def scaling_gradients(model, optimizer, loader, loss_fn, accum_steps):
    """Valid: accumulate undivided, then divide the gradients before stepping."""
    for group in groups_of(loader, accum_steps):
        for x, y in group:
            loss_fn(model(x), y).backward()
        for p in model.parameters():
            p.grad /= len(group)
        optimizer.step()
        model.zero_grad()


@pytest.mark.parametrize(
    "answer",
    [
        lesson.reference_accumulate_epoch,
        sum_reduction_per_sample,
        streaming_with_len,
        scaling_gradients,
    ],
)
def test_accumulation_check_passes_the_reference_and_valid_alternatives(answer):
    assert lesson.check_accumulation(answer).status == "passed"


def fixed_k(
    model,
    optimizer,
    loader,
    loss_fn,
    accum_steps,
    *,
    divide=True,
    drop=False,
    zero_inside=False,
    step_each=False,
    zero=True,
):
    """The guide's loop, fixed to `if`, with switches for the usual mistakes."""
    optimizer.zero_grad()
    n = len(loader)
    for i, (x, y) in enumerate(loader):
        if zero_inside:
            optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        (loss / accum_steps if divide else loss).backward()
        if step_each or (i + 1) % accum_steps == 0 or (i + 1 == n and not drop):
            optimizer.step()
            if zero:
                optimizer.zero_grad()


@pytest.mark.parametrize(
    ("mistake", "cause"),
    [
        (dict(), "divided by 3"),
        (dict(divide=False), "divide each micro-batch's loss"),
        (dict(drop=True), "partial group"),
        (dict(zero_inside=True), "zero_grad() runs inside"),
        (dict(step_each=True), "steps on every micro-batch"),
        (dict(zero=False), "previous step's gradient"),
    ],
    ids=[
        "fixed-k-on-partial-group",
        "not-divided",
        "last-group-dropped",
        "zero-grad-inside",
        "step-every-micro-batch",
        "never-zeroed",
    ],
)
def test_accumulation_check_names_the_mistake(mistake, cause):
    def answer(*args):
        return fixed_k(*args, **mistake)

    exc = failure(lesson.check_accumulation, answer)
    assert exc.status == "failed" and cause in str(exc), str(exc)


def test_accumulation_check_reports_not_attempted_and_refuses_the_reference():
    assert fails(lesson.check_accumulation, not_attempted) == "not-attempted"
    assert (
        fails(lesson.check_accumulation, lambda *a: lesson.reference_accumulate_epoch(*a))
        == "failed"
    )


def test_batchnorm_breaks_equality_and_layernorm_does_not():
    gaps = lesson.batchnorm_caveat(lesson.reference_accumulate_epoch)
    assert gaps["none"] < 1e-12 and gaps["layer"] < 1e-12 and gaps["batch"] > 1e-2


def test_the_guides_loop_is_right_for_complete_groups_and_never_steps_a_partial_one():
    """What section 1 measures before exercise 1: the guide's loop (with `if`, valid Python)
    steps every complete group exactly and drops the last, shorter one; the check says so."""
    case = lesson.make_accum_problem(n_micro=7, micro=4, k=3)
    seen = lesson.learner_trajectory(lesson.guide_accumulate_epoch, case)
    whole = lesson.full_batch_trajectory(case)
    assert len(case.groups) == 3 and len(seen.grads) == 2
    assert all(
        lesson.rel_error(g, e) < 1e-12 for g, e in zip(seen.grads, whole.grads, strict=False)
    )
    exc = failure(lesson.check_accumulation, lesson.guide_accumulate_epoch)
    assert "the last, partial group was dropped" in str(exc)


# --- exercise 2: checkpointed forward -------------------------------------------------------


def per_block(blocks, x):
    for block in blocks:
        x = checkpoint(block, x, use_reentrant=False)
    return x


def first_12(blocks, x):
    for i, block in enumerate(blocks):
        x = checkpoint(block, x, use_reentrant=False) if i < 12 else block(x)
    return x


def last_12(blocks, x):
    for i, block in enumerate(blocks):
        x = checkpoint(block, x, use_reentrant=False) if i >= 4 else block(x)
    return x


@pytest.mark.parametrize(
    "answer",
    [
        lesson.reference_checkpointed_forward,
        first_12,
        lambda b, x: checkpoint_sequential(b, 13, x, use_reentrant=False),
    ],
    ids=["reference", "first-12-blocks", "13-segments"],
)
def test_checkpoint_check_passes_the_fewest_blocks_that_fit(answer):
    """12 blocks checkpointed one by one from the first (0.32x, 12 Linear layers re-run) is
    the cheapest layout within the 0.35x budget; checkpoint_sequential with 13 segments is
    the same layout (12 one-block segments and a last, plain one of 4)."""
    assert lesson.check_checkpointed_forward(answer).status == "passed"


def test_step_cost_counts_the_peak_and_the_recomputation_of_a_layout():
    blocks = lesson.make_blocks(depth=16, width=32)
    x = torch.randn(512, 32, device=next(blocks.parameters()).device)
    plain, first, last = (
        lesson.step_cost(f, blocks, x) for f in (lambda b, h: b(h), first_12, last_12)
    )
    assert plain.peak_ratio == 1.0 and plain.reruns == 0
    budget = lesson.THRESHOLDS["peak_ratio"].value
    # the same number of blocks rebuilt; only early ones are rebuilt after the plain blocks'
    # activations are freed, so only they fit
    assert first.reruns == last.reruns == 12
    assert first.peak_ratio <= budget < last.peak_ratio


@pytest.fixture
def no_timing(monkeypatch):
    """The time part does not decide these cases; skip its seconds of measuring."""

    class Fast:
        speedup = 1 / 1.2

    monkeypatch.setattr(lesson_checks, "compare", lambda *a, **k: Fast())


def whole_model(blocks, x):
    return checkpoint(blocks, x, use_reentrant=False)


def input_only(blocks, x):
    return blocks(checkpoint(lambda t: t * 1, x, use_reentrant=False))


def reentrant_per_block(blocks, x):
    for block in blocks:
        x = checkpoint(block, x, use_reentrant=True)
    return x


def reentrant_whole(blocks, x):
    return checkpoint(blocks, x, use_reentrant=True)


def fresh_dropout_masks(blocks, x):
    for block in blocks:
        x = checkpoint(block, x, use_reentrant=False, preserve_rng_state=False)
    return x


def reentrant_input_requires_grad(blocks, x):
    """Right blocks, reentrant variant: each rebuild runs its block whole (24 re-runs)."""
    x = x.detach().requires_grad_()
    for i, block in enumerate(blocks):
        x = checkpoint(block, x, use_reentrant=True) if i < 12 else block(x)
    return x


def first_12_in_pairs(blocks, x):
    """Right blocks, two per checkpoint: the first of each pair re-runs both Linears (18)."""
    for start in range(0, len(blocks), 2):
        seg = blocks[start : start + 2]
        x = checkpoint(seg, x, use_reentrant=False) if start < 12 else seg(x)
    return x


def dropout_off(blocks, x):
    blocks.eval()
    return first_12(blocks, x)


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize(
    ("answer", "cause"),
    [
        (whole_model, "peak memory"),
        (input_only, "peak memory"),
        (lambda blocks, x: blocks(x), "peak memory"),
        (lambda b, x: checkpoint_sequential(b, 2, x, use_reentrant=False), "peak memory"),
        (lambda b, x: checkpoint_sequential(b, 4, x, use_reentrant=False), "21 Linear layers"),
        (per_block, "16 Linear layers run again"),
        (last_12, "peak memory"),
        (reentrant_per_block, "all 16 blocks got no gradient"),
        (reentrant_whole, "got no gradient"),
        (fresh_dropout_masks, "preserve_rng_state=True"),
        (reentrant_input_requires_grad, "12 checkpoints use use_reentrant=True"),
        (first_12_in_pairs, "backward rebuilds 12 blocks in 6 rebuilds"),
        (dropout_off, "left 16 of the 16 dropout layers in eval mode"),
    ],
    ids=[
        "whole-model",
        "input-only",
        "none",
        "two-segments",
        "sqrt-segments-rebuild-more-than-needed",
        "every-block-rebuilds-more-than-needed",
        "last-blocks-over-budget",
        "reentrant-per-block",
        "reentrant-whole",
        "rng-not-preserved",
        "reentrant-rebuilds-whole-blocks",
        "pairs-rebuild-two-blocks-at-once",
        "eval-mode-trains-without-dropout",
    ],
)
def test_checkpoint_check_names_the_mistake(no_timing, answer, cause):
    exc = failure(lesson.check_checkpointed_forward, answer)
    assert exc.status == "failed" and cause in str(exc), str(exc)


@pytest.mark.parametrize("device_class", ["cpu", "cpu-bf16", "cuda-tensorcore"])
@pytest.mark.parametrize(("ratio", "status"), [(2.0, "passed"), (3.5, "failed")])
def test_checkpoint_time_limit_follows_the_device_class(monkeypatch, device_class, ratio, status):
    """Recomputing the check's small blocks costs ~2x on a CPU (GELU, LayerNorm, dropout) and
    on a GPU (launch-bound: 1.8-2.7x measured on an H200); 3.5x means something recomputes
    far too much."""

    class Slow:
        speedup = 1 / ratio

    monkeypatch.setattr(lesson_checks, "compare", lambda *a, **k: Slow())
    monkeypatch.setattr(lesson_checks, "device_class", lambda: device_class)
    assert (
        status_of(lesson.check_checkpointed_forward, lesson.reference_checkpointed_forward)
        == status
    )


def test_checkpoint_check_reports_not_attempted_and_refuses_the_reference():
    assert fails(lesson.check_checkpointed_forward, not_attempted) == "not-attempted"
    assert (
        fails(
            lesson.check_checkpointed_forward,
            lambda b, x: lesson.reference_checkpointed_forward(b, x),
        )
        == "failed"
    )


# --- exercise 3: plan for a memory budget ----------------------------------------------------


class FakeProbe:
    """Synthetic, exact measurements. `saturate`: plain throughput stops growing past this
    micro-batch (a CPU); None: it keeps growing (a big GPU), so checkpointing a larger
    micro-batch can beat a small one without checkpointing."""

    def __init__(self, saturate: int | None):
        self.saturate = saturate

    def __call__(self, micro_batch, checkpoint=False):
        per_sample = 30 if checkpoint else 100
        speed = min(micro_batch, self.saturate or micro_batch) * 100 * (0.7 if checkpoint else 1)
        return Measured(micro_batch, bool(checkpoint), 1000 + per_sample * micro_batch, speed)


E = lesson.EFFECTIVE_BATCH


def largest_fitting(ckpt_options):
    def plan(effective_batch, budget, probe):
        for m in sorted(
            (m for m in range(1, effective_batch + 1) if effective_batch % m == 0), reverse=True
        ):
            for c in ckpt_options:
                if probe(m, c).peak_bytes <= budget:
                    return m, effective_batch // m, c
        raise ValueError

    return plan


def powers_of_two_search(effective_batch, budget, probe):
    """Only powers of two: right for 256, whose divisors they are, wrong for any other
    effective batch (the check's made-up probe has 12: 8 does not divide it)."""
    options = [(2**i, c) for i in range(int(math.log2(effective_batch)) + 1) for c in (False, True)]
    fits = [probe(m, c) for m, c in options if probe(m, c).peak_bytes <= budget]
    best = max(fits, key=lambda r: r.samples_per_s)
    return best.micro_batch, effective_batch // best.micro_batch, best.checkpoint


@pytest.mark.parametrize("saturate", [64, None], ids=["cpu-like", "gpu-like"])
@pytest.mark.parametrize("answer", [lesson.reference_plan])
def test_plan_check_passes_measured_choices(answer, saturate):
    assert lesson.check_plan(answer, probe=FakeProbe(saturate)).status == "passed"


def test_plan_check_fails_a_powers_of_two_search_on_an_effective_batch_of_12():
    exc = failure(lesson.check_plan, powers_of_two_search, FakeProbe(64))
    assert "8 does not divide 12" in exc.summary


def test_plan_check_passes_the_reference_on_this_machine():
    assert lesson.check_plan(lesson.reference_plan).status == "passed"


@pytest.mark.parametrize(
    ("answer", "saturate", "cause"),
    [
        (lambda e, b, p: (e, 1, False), 64, "over the budget"),
        (largest_fitting([True]), 64, "of the best fitting plan"),
        (largest_fitting([False]), None, "of the best fitting plan"),
        (lambda e, b, p: (1, e, False), 64, "of the best fitting plan"),
        (
            lambda e, b, p: (largest_fitting([False])(e, b, p)[0], 1, False),
            64,
            "must equal the effective batch",
        ),
        (lambda e, b, p: (64, 4), 64, "expected (micro_batch, accum_steps, checkpoint)"),
    ],
    ids=[
        "ignores-budget",
        "always-checkpoint",
        "never-checkpoint",
        "micro-batch-1",
        "changes-effective-batch",
        "wrong-shape",
    ],
)
def test_plan_check_names_the_mistake(answer, saturate, cause):
    exc = failure(lesson.check_plan, answer, FakeProbe(saturate))
    assert exc.status == "failed" and cause in str(exc), str(exc)


def test_plan_check_reports_not_attempted_and_refuses_the_reference():
    probe = FakeProbe(64)
    assert fails(lesson.check_plan, not_attempted, probe) == "not-attempted"
    assert fails(lesson.check_plan, lambda *a: lesson.reference_plan(*a), probe) == "failed"


def test_tensor_peak_bytes_sees_recomputation_that_saved_tensor_hooks_miss():
    blocks = lesson.make_blocks(depth=4, width=16)  # on the course's device
    x = torch.randn(64, 16, device=next(blocks.parameters()).device)
    from course_utils.memory import activation_bytes, tensor_peak_bytes

    def step(forward):
        return lambda: forward(blocks, x).sum().backward()

    assert (
        activation_bytes(lambda: whole_model(blocks, x)) < activation_bytes(lambda: blocks(x)) / 4
    )
    assert tensor_peak_bytes(step(whole_model)) >= 0.9 * tensor_peak_bytes(step(lambda b, h: b(h)))


def test_cuda_peak_probe_warms_up_before_its_first_measurement(monkeypatch):
    """The first CUDA matmul allocates cuBLAS's workspace (8-32 MiB) and the first backward
    the gradients: a warm-up call must come before the peak is read, or the first
    configuration probed is charged for them (CUDA faked: the peak reader is a spy)."""
    from course_utils.lessons.accumulation import planning as demo

    events = []

    def fake_peak(fn, device=None):
        events.append("measure")
        fn()
        return SimpleNamespace(extra_bytes=1)

    monkeypatch.setattr(demo, "cuda_peak_memory", fake_peak)
    assert demo.step_peak_bytes(lambda: events.append("step"), torch.device("cuda")) == 1
    assert events == ["step", "measure", "step"]


# --- judged as `course grade` judges: the check body here, the learner's side in a child ------

JUDGED_REFERENCES = [
    ("07-accumulation", "course_utils.lessons.accumulation.reference:reference_accumulate_epoch"),
    (
        "07-checkpointed-forward",
        "course_utils.lessons.accumulation.reference:reference_checkpointed_forward",
    ),
    ("07-plan", "course_utils.lessons.accumulation.reference:reference_plan"),
]
# a wrong answer of the red team per check, its verdict in a notebook and in the judge
JUDGED_WRONG = [
    ("07-accumulation", "check_accumulation", "accum_guide_fixed"),  # the last group dropped
    ("07-checkpointed-forward", "check_checkpointed_forward", "ckpt_sqrt_rule"),  # rebuild probe
    ("07-plan", "check_plan", "plan_strict_budget"),  # a made-up budget exactly on a peak
]


@pytest.fixture
def redteam_importable(monkeypatch):
    """The red team's module, importable here and in the judged child (tests/ and
    tests/redteam/ on its path)."""
    import os
    from pathlib import Path

    here = Path(__file__).parent
    paths = [str(here), str(here / "redteam")]
    for path in paths:
        monkeypatch.syspath_prepend(path)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([*paths, os.environ.get("PYTHONPATH", "")]))
    import test_07_accumulation

    return test_07_accumulation


@pytest.mark.parametrize(
    "check_id, answer", JUDGED_REFERENCES, ids=[c for c, _ in JUDGED_REFERENCES]
)
def test_the_reference_passes_when_judged_outside_the_learners_process(check_id, answer):
    from judge_helpers import remote_verdict

    verdict = remote_verdict(check_id, answer)
    assert verdict["status"] == "passed", verdict["message"]


@pytest.mark.parametrize(
    "check_id, check, answer", JUDGED_WRONG, ids=[c for c, _, _ in JUDGED_WRONG]
)
def test_a_wrong_answer_gets_the_same_verdict_judged_as_in_a_notebook(
    redteam_importable, check_id, check, answer
):
    from judge_helpers import remote_verdict

    here = status_of(getattr(lesson, check), getattr(redteam_importable, answer))
    verdict = remote_verdict(check_id, f"test_07_accumulation:{answer}")
    assert here == verdict["status"] == "failed", verdict["message"]


def test_a_stand_in_probe_sent_to_the_judge_is_refused():
    """The locked cell passes no probe; under the judge a second answer (a stand-in probe the
    kernel would measure with) is refused, so a plan cannot be judged on made-up figures."""
    from judge_helpers import remote_verdict

    verdict = remote_verdict(
        "07-plan",
        "course_utils.lessons.accumulation.reference:reference_plan",
        "course_utils.lessons.accumulation.planning:MadeUpProbe",
    )
    assert verdict["status"] == "failed" and "its own probe" in verdict["message"]


class _Pick:
    """A specimen_rng stand-in that draws the i-th option of every choice (the last where
    there are fewer): each option the judge may draw, in turn."""

    def __init__(self, i: int):
        self.i = i

    def choice(self, options):
        return options[min(self.i, len(options) - 1)]


@pytest.mark.parametrize("i", range(4))
def test_every_drawn_accumulation_specimen_passes_the_reference_and_fails_the_guide(monkeypatch, i):
    monkeypatch.setattr(accumulation_check, "specimen_rng", lambda: _Pick(i))
    assert lesson.check_accumulation(lesson.reference_accumulate_epoch).status == "passed"
    exc = failure(lesson.check_accumulation, lesson.guide_accumulate_epoch)
    assert "the last, partial group was dropped" in str(exc)
