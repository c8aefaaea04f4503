"""Lesson 00's checks pass the reference answers and valid alternatives, and fail the
mistakes a learner who half-understands makes, with a message naming the cause."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import pytest
import torch
from check_helpers import cells_of, edition_attack, failure, not_attempted, status_of
from judge_helpers import remote_verdict
from torch import nn
from torch.profiler import ProfilerActivity, profile

import course_utils as cu
from course_utils.lessons import measuring as lesson

# --- exercise 1: step timer -----------------------------------------------------------------


def timer(*, warm=True, sync=True, median=True, scale=1.0):
    """The reference timer with one mistake switched on."""

    def time_step(step, synchronize, warmup=3, repeats=10):
        for _ in range(warmup) if warm else ():
            step()
        synchronize()
        samples = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            step()
            if sync:
                synchronize()
            samples.append(time.perf_counter() - t0)
        synchronize()
        value = statistics.median(samples) if median else sum(samples) / len(samples)
        return scale * value

    return time_step


def total_over_repeats(step, synchronize, warmup=3, repeats=10):
    """One timed block of `repeats` calls, divided (as timeit does): the mean of the calls, so
    the check's slow call after the warm-up pulls it up as it does a mean of samples."""
    for _ in range(warmup):
        step()
    synchronize()
    t0 = time.perf_counter()
    for _ in range(repeats):
        step()
    synchronize()
    return (time.perf_counter() - t0) / repeats


def test_step_timer_check_passes_the_reference():
    assert lesson.check_step_timer(lesson.reference_time_step).status == "passed"


def test_step_timer_check_fails_one_timed_block_divided_by_repeats_as_a_mean():
    exc = failure(lesson.check_step_timer, total_over_repeats)
    assert exc.status == "failed" and "a mean (or a sum) counts an outlier" in exc.summary


@pytest.mark.parametrize(
    ("wrong", "cause"),
    [
        (timer(sync=False), "measured the launch, not the work"),
        (timer(warm=False), "one-off cost of the first 4 calls"),
        (timer(warm=False, median=False), "before timing"),
        (timer(scale=1e3), "that is milliseconds"),
    ],
    ids=["no-sync", "no-warm-up-median", "no-warm-up-mean", "ms"],
)
def test_step_timer_check_fails_and_names_the_mistake(wrong, cause):
    exc = failure(lesson.check_step_timer, wrong)
    assert exc.status == "failed"
    assert cause in exc.summary


def no_sync_after_warmup(step, synchronize, warmup=3, repeats=10):
    """The warm-up only queues its calls; the first timed sample waits for them too. With 7
    repeats the median hides that one slow sample; with 3 and a slow call, it cannot."""
    for _ in range(warmup):
        step()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        step()
        synchronize()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def test_step_timer_check_fails_a_warm_up_left_queued_and_names_it():
    exc = failure(lesson.check_step_timer, no_sync_after_warmup)
    assert exc.status == "failed" and "warm-up calls' queued work" in exc.summary


def test_step_timer_short_run_passes_a_timer_that_syncs_before_each_sample():
    """A sync before every clock reading drains the warm-up's queue: valid, and passes."""

    def sync_first(step, synchronize, warmup=3, repeats=10):
        for _ in range(warmup):
            step()
        samples = []
        for _ in range(repeats):
            synchronize()
            t0 = time.perf_counter()
            step()
            synchronize()
            samples.append(time.perf_counter() - t0)
        return statistics.median(samples)

    assert lesson.check_step_timer(sync_first).status == "passed"


def _samples_timer(*, warmup_calls=None, repeat_calls=None, time_warmup=False, stat=None):
    """The reference timer with a fixed warm-up or sample count, timed warm-up calls, or
    another statistic (the blind red team's v4 cases)."""

    def time_step(step, synchronize, warmup=3, repeats=10):
        warm = warmup if warmup_calls is None else warmup_calls
        for _ in range(0 if time_warmup else warm):
            step()
        synchronize()
        samples = []
        for _ in range((warm if time_warmup else 0) + (repeat_calls or repeats)):
            t0 = time.perf_counter()
            step()
            synchronize()
            samples.append(time.perf_counter() - t0)
        return (stat or statistics.median)(samples)

    return time_step


@pytest.mark.parametrize(
    ("wrong", "causes"),
    [
        (_samples_timer(stat=min), ["fastest sample (the minimum)"]),
        (_samples_timer(repeat_calls=5), ["ignores `repeats`"]),
        (
            _samples_timer(warmup_calls=3),
            ["ignores `warmup`", "in 4 calls to step(), not 5: a call that pays the one-off"],
        ),
        (_samples_timer(time_warmup=True), ["the warm-up calls were timed as samples"]),
    ],
    ids=["minimum", "fixed-repeats", "fixed-warmup", "warm-up-timed"],
)
def test_step_timer_check_names_ignored_arguments_and_the_statistic(wrong, causes):
    exc = failure(lesson.check_step_timer, wrong)
    assert exc.status == "failed"
    for cause in causes:
        assert cause in exc.summary
    assert "queued work" not in exc.summary and "the launch" not in exc.summary


def _no_sync_after_warmup(statistic):
    """A timer whose warm-up is left queued, with a statistic that hides the spilled sample on
    an even count (issue 34's fresh blind set: the lower median of two passed)."""

    def time_step(step, synchronize, warmup=3, repeats=10):
        for _ in range(warmup):
            step()
        samples = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            step()
            synchronize()
            samples.append(time.perf_counter() - t0)
        return statistic(samples)

    return time_step


def _sorted_lower(samples):
    return sorted(samples)[(len(samples) - 1) // 2]


def _torch_median(samples):
    return torch.tensor(samples).median().item()  # the lower of the two middle values


def _unsorted_middle(samples):
    return samples[len(samples) // 2]


def _without_first(samples):
    return statistics.median(samples[1:])


@pytest.mark.parametrize(
    ("wrong", "causes"),
    [
        (_no_sync_after_warmup(statistics.median_low), ["warm-up calls' queued work"]),
        (_no_sync_after_warmup(_torch_median), ["warm-up calls' queued work"]),
        (_no_sync_after_warmup(_sorted_lower), ["warm-up calls' queued work"]),
        (_no_sync_after_warmup(_without_first), ["raised StatisticsError", "1 included"]),
        (_samples_timer(stat=_unsorted_middle), ["the middle of the run, not the middle value"]),
        (_samples_timer(stat=max), ["the slowest sample (the maximum)"]),
        (_samples_timer(warmup_calls=None, stat=_without_first), ["raised StatisticsError"]),
    ],
    ids=[
        "median-low",
        "torch-median",
        "sorted-lower",
        "drops-first-sample",
        "unsorted-middle",
        "maximum",
        "drops-first-synced",
    ],
)
def test_step_timer_check_closes_issue_34s_holes_and_names_the_cause(wrong, causes):
    """Holes a fresh blind set found: a lower median of two hid a warm-up left queued (the
    short run now takes one sample), the middle sample in time order read the right value
    (the slow call is now that sample), and a timer that drops its first sample."""
    exc = failure(lesson.check_step_timer, wrong)
    assert exc.status == "failed"
    for cause in causes:
        assert cause in exc.summary
    assert "a mean (or a sum)" not in exc.summary


def test_step_timer_check_fails_one_warm_up_call_short_and_names_it():
    """`warmup - 1` warm-up calls: the count follows both arguments one for one, yet is one
    short; the short run (warmup=4, its 4 slow calls) times the 4th, slow call."""

    def one_short(step, synchronize, warmup=3, repeats=10):
        return _samples_timer()(step, synchronize, warmup - 1, repeats)

    exc = failure(lesson.check_step_timer, one_short)
    assert "1 call(s) short of warmup + repeats" in exc.summary
    assert "in 4 calls to step(), not 5" in exc.summary


def test_step_timer_check_passes_a_sample_dropped_among_repeats_plus_one():
    """Valid: repeats + 1 samples with the first (holding the queued warm-up) dropped."""

    def extra_sample(step, synchronize, warmup=3, repeats=10):
        return _no_sync_after_warmup(_without_first)(step, synchronize, warmup, repeats + 1)

    assert lesson.check_step_timer(extra_sample).status == "passed"


def test_step_timer_check_passes_a_fixed_extra_call():
    """One untimed calibration call beyond warmup + repeats: the count follows both
    arguments one for one, and the figure is right."""

    def calibrated(step, synchronize, warmup=3, repeats=10):
        step()  # a calibration call, untimed
        return _samples_timer()(step, synchronize, warmup, repeats)

    assert lesson.check_step_timer(calibrated).status == "passed"


def test_step_timer_check_reports_not_attempted():
    assert failure(lesson.check_step_timer, not_attempted).status == "not-attempted"


def test_step_timer_check_fails_a_timer_that_calls_the_reference():
    def delegating(step, synchronize, warmup=3, repeats=10):
        return lesson.reference_time_step(step, synchronize, warmup, repeats)

    exc = failure(lesson.check_step_timer, delegating)
    assert exc.status == "failed" and "reference answer" in exc.summary


def test_naive_timer_misses_queued_work():
    step, synchronize = lesson.make_async_step(step_s=0.02, slow_calls=0)
    assert lesson.naive_time(step, repeats=3) < 0.005
    synchronize()


# --- exercise 2: bytes saved for backward -------------------------------------------------


def counter(*, params=False, dedup="storage", size="storage", skip_scalars=False):
    """saved_tensors_hooks counting with one choice switched."""

    def saved_bytes(forward):
        seen, total = {}, 0

        def pack(t):
            nonlocal total
            base = t if t._base is None else t._base
            is_param = (
                (t.is_leaf and t.requires_grad)
                if params == "leaf-only"
                else (base.is_leaf and base.requires_grad)
            )
            if (params is True or not is_param) and not (skip_scalars and t.dim() == 0):
                nbytes = t.untyped_storage().nbytes() if size == "storage" else t.nbytes
                key = t.untyped_storage().data_ptr() if dedup == "storage" else t.data_ptr()
                seen[key] = nbytes
                total += nbytes
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            forward()
        return sum(seen.values()) if dedup else total

    return saved_bytes


@pytest.mark.parametrize(
    "valid",
    [lesson.reference_saved_bytes, counter(skip_scalars=True)],
    ids=["storage-once", "ignores-autograds-saved-scalar"],
)
def test_activation_check_passes_valid_counts(valid):
    assert lesson.check_activation_bytes(valid).status == "passed"


@pytest.mark.parametrize(
    ("wrong", "cause"),
    [
        (counter(dedup=None, size="tensor"), "counted twice"),
        (counter(dedup=None), "counted twice"),
        (counter(params=True), "parameters were counted"),
        (counter(params="leaf-only"), "parameters were counted"),
        (counter(dedup="tensor", size="tensor"), "too few bytes"),
        (counter(dedup="tensor"), "counted twice"),
    ],
    ids=[
        "every-save-counted",
        "every-save-counted-as-storage",
        "parameters-counted",
        "transposed-weight-views-counted",
        "keyed-by-tensor-address",
        "storage-size-keyed-by-tensor-address",
    ],
)
def test_activation_check_fails_and_names_the_mistake(wrong, cause):
    exc = failure(lesson.check_activation_bytes, wrong)
    assert exc.status == "failed"
    assert cause in exc.summary


def test_activation_check_reports_error_and_not_attempted():
    assert failure(lesson.check_activation_bytes, lambda forward: 1 / 0).status == "error"
    assert failure(lesson.check_activation_bytes, not_attempted).status == "not-attempted"


def test_activation_scenarios_separate_the_counting_strategies():
    """Each scenario must make the mistakes visible: views, double saves, parameters."""
    for name, forward in lesson.activation_cases().items():
        right = lesson.reference_saved_bytes(forward)
        assert counter(dedup=None, size="tensor")(forward) >= 1.15 * right, name
    mlp, attention = lesson.activation_cases().values()
    assert counter(params=True)(mlp) > 5 * lesson.reference_saved_bytes(mlp)
    assert counter(dedup="tensor", size="tensor")(attention) < 0.9 * lesson.reference_saved_bytes(
        attention
    )


# --- exercise 3: FLOPs of a training step ---------------------------------------------------


def test_flops_check_passes_the_exact_count():
    assert lesson.check_train_flops(lesson.reference_train_flops).status == "passed"


def layers(d):
    return list(zip(d[:-1], d[1:], strict=True))


@pytest.mark.parametrize(
    ("wrong", "cause"),
    [
        (lambda b, d: sum(6 * b * x * y for x, y in layers(d)), "first layer's input gradient"),
        (lambda b, d: sum(4 * b * x * y for x, y in layers(d)), "it runs two"),
        (lambda b, d: sum(2 * b * x * y for x, y in layers(d)), "forward only"),
        (
            lambda b, d: (
                lesson.reference_train_flops.__wrapped__(b, d) + sum(b * y for _, y in layers(d))
            ),
            "biases were counted",
        ),
    ],
    ids=["first-layer-input-grad", "backward-equals-forward", "forward-only", "biases"],
)
def test_flops_check_fails_and_names_the_miscount(wrong, cause):
    exc = failure(lesson.check_train_flops, wrong)
    assert exc.status == "failed" and cause in exc.summary


def test_step_timer_check_refuses_the_courses_own_timer_wrapped_as_the_answer():
    """The edition's blind red team's timer: cu.time_fn around step + sync (2/2 before)."""
    exc = failure(lesson.check_step_timer, edition_attack("TIMER", "time_step"))
    assert exc.status == "failed" and "your code called `time_fn`" in exc.summary, exc.summary


def test_slowest_op_check_refuses_the_lessons_own_profiler_as_the_answer():
    """The edition's blind red team's answer: lesson.profile_step + the largest self time."""
    attack = edition_attack("SLOWEST", "slowest_op", lesson=lesson)
    exc = failure(lesson.check_slowest_op, attack)
    assert exc.status == "failed" and "your code called `profile_step`" in exc.summary


def counted_on_meta(batch, dims):
    """The count, not a prediction: the stack run on the meta device under FlopCounterMode."""
    model = nn.Sequential(*[nn.Linear(a, b) for a, b in zip(dims, dims[1:], strict=False)]).to(
        "meta"
    )
    x = torch.empty(batch, dims[0], device="meta")
    return cu.flops(lambda: model(x).sum().backward())


def test_flops_check_fails_a_count_made_by_running_the_model_and_says_so():
    exc = failure(lesson.check_train_flops, counted_on_meta)
    assert "dispatched aten.addmm" in exc.summary and "ran a model" in exc.summary, exc.summary


def test_flops_check_passes_a_formula_written_with_torch_arithmetic():
    def with_torch(batch, dims):
        d = torch.tensor(dims)
        products = d[:-1] * d[1:]
        return int(2 * batch * (3 * products.sum() - products[0]))

    assert lesson.check_train_flops(with_torch).status == "passed"


def test_flops_check_reports_not_attempted():
    assert failure(lesson.check_train_flops, not_attempted).status == "not-attempted"


# --- exercise 4: where the time goes --------------------------------------------------------


def profiled(step):
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    return prof


def by_self_time_table(step):
    """A valid alternative: warm up, read the first row of the table sorted by self time."""
    step()
    table = profiled(step).key_averages().table(sort_by="self_cpu_time_total", row_limit=1)
    return table.splitlines()[3].split()[0]


def by_total_time(step):
    return max(profiled(step).key_averages(), key=lambda e: e.cpu_time_total).key


def slowest_single_call(step):
    return max(profiled(step).events(), key=lambda e: e.self_cpu_time_total).name


def by_total_time_of_aten_ops(step):
    """Leaves out the ranges (`train_step`), then ranks by total time: a wrapper (argsort,
    around sort) comes first."""
    step()
    rows = [e for e in profiled(step).key_averages() if e.key.startswith("aten::")]
    return max(rows, key=lambda e: e.cpu_time_total).key


def test_hidden_op_steps_have_a_wrapper_whose_total_holds_the_top_operator():
    torch.set_num_threads(1)
    step = lesson.hidden_op_steps()["hard examples by argsort"]
    step()
    rows = {e.key: e for e in profiled(step).key_averages()}
    top = max(rows.values(), key=lambda e: e.self_cpu_time_total)
    assert top.key == "aten::sort"
    assert rows["aten::argsort"].cpu_time_total >= top.cpu_time_total
    assert rows["aten::argsort"].self_cpu_time_total < 0.1 * top.self_cpu_time_total


def first_row(step):
    return profiled(step).key_averages()[0].key


@pytest.mark.parametrize("valid", [lesson.reference_slowest_op, by_self_time_table])
def test_slowest_op_check_passes_self_time_answers(valid):
    assert lesson.check_slowest_op(valid).status == "passed"


@pytest.mark.parametrize(
    ("wrong", "cause"),
    [
        (by_total_time, "total* time includes everything"),
        (by_total_time_of_aten_ops, "ranks by total (inclusive) time"),
        (slowest_single_call, "one by one"),
        (lambda step: "aten::addmm", "measure rather than guess"),
        (first_row, "self time"),
        (lambda step: "matmul", "no operator named"),
    ],
    ids=[
        "sorted-by-total-time",
        "aten-ops-by-total-time",
        "slowest-single-call",
        "guessed-matmul",
        "first-row",
        "not-a-key",
    ],
)
def test_slowest_op_check_fails_and_names_the_mistake(wrong, cause):
    exc = failure(lesson.check_slowest_op, wrong)
    assert exc.status == "failed" and cause in exc.summary


def test_slowest_op_check_rejects_a_row_object_and_reports_not_attempted():
    assert (
        "a string"
        in failure(lesson.check_slowest_op, lambda s: profiled(s).key_averages()[0]).summary
    )
    assert status_of(lesson.check_slowest_op, not_attempted) == "not-attempted"


def test_cuda_event_timing_warms_up_before_the_first_recorded_event(monkeypatch):
    """The first calls pay cuBLAS/cuDNN set-up; no event may be recorded before a warm-up
    call has run and been synchronised (CUDA faked: events and sync are spies)."""
    events = []

    class Event:
        def __init__(self, enable_timing: bool):
            assert enable_timing

        def record(self):
            events.append("record")

        def elapsed_time(self, end) -> float:
            return 1.0

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: events.append("sync"))
    assert lesson.cuda_event_ms(lambda: events.append("call"), repeats=2) == [1.0, 1.0]
    first = events.index("record")
    assert "call" in events[:first] and events[first - 1] == "sync"
    assert events[first:] == ["record", "call", "record"] * 2 + ["sync"]


def test_slowest_op_check_fails_the_notebooks_colleague_naming_both_faults():
    """Exercise 4 is a diagnosis (issue 34): the colleague's function in the notebook profiles
    the first call and ranks by total time; the check names both faults."""
    colleague = cells_of("00_measuring", "00_measuring-ex4-colleague", lesson=lesson)[
        "colleagues_slowest_op"
    ]
    exc = failure(lesson.check_slowest_op, colleague)
    assert "ranks by total" in exc.summary or "*total* time includes" in exc.summary
    assert "ran only in the first call" in exc.summary


# --- judged as `course grade` judges: the learner's side in another process --------------------

REFERENCE = "course_utils.lessons.measuring.reference"
median_low_no_sync = _no_sync_after_warmup(statistics.median_low)


def colleagues_slowest_op(step):
    """The notebook's colleague (cell 00_measuring-ex4-colleague), importable by the child."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    return max(prof.key_averages(), key=lambda row: row.cpu_time_total).key


@pytest.mark.parametrize(
    "check_id, reference, wrong, cause",
    [
        ("00-step-timer", "reference_time_step", "median_low_no_sync", "queued work"),
        ("00-slowest-op", "reference_slowest_op", "colleagues_slowest_op", "first call"),
    ],
    ids=["00-step-timer", "00-slowest-op"],
)
def test_judged_remotely_the_reference_passes_and_a_mistake_fails(
    monkeypatch, check_id, reference, wrong, cause
):
    """The check body in this process (the judge), every call to the answer in a child (the
    kernel) through probes: the reference passes; a wrong answer fails, told its cause."""
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parent))
    judged = remote_verdict(check_id, f"{REFERENCE}:{reference}")
    assert judged["status"] == "passed", judged["message"]
    judged = remote_verdict(check_id, f"test_lesson_00:{wrong}")
    assert judged["status"] == "failed" and cause in judged["message"], judged["message"]
