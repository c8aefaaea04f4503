"""Lesson 00's probes: each runs the learner's answer on a specimen it builds from plain
arguments, beside the learner's code, and returns what it saw as data (course_utils.probes).
The checks (checks.py, slowest_op.py) decide; diagnosis.py names a mistake from what these
return. The scenario's constants live here, so both sides build the same steps."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from ...guards import refusing
from ...model_runs import ModelRuns
from ...probes import probe
from .demo import activation_cases, hidden_op_steps, make_async_step, single_call_probe
from .demo import with_one_off as _with_one_off

# the timer scenario: 4 slow first calls, so a timer without warm-up has 4 slow samples of 7,
# one slow call after the warm-up and two fast ones (the 5th and 7th samples: a smaller last
# batch), so the samples spread both ways around the median: a mean reads
# (4 x 30 + 230 + 2 x 1) / 7 = 50 ms, the fastest sample 1 ms. The slow call is the 4th sample,
# the middle one in time order: a timer that takes samples[len // 2] without sorting reads it
# (230 ms), while the median of the sorted samples is 30 ms (issue 34: the middle sample in
# time order passed when the slow call was the 3rd)
STEP_S, SLOW_CALLS, SLOW_S, TIMER_WARMUP, TIMER_REPEATS = 0.03, 4, 0.15, 6, 7
OUTLIER_AT, OUTLIER_S = TIMER_WARMUP + 4, 0.2
FAST_AT, FAST_S = (TIMER_WARMUP + 5, TIMER_WARMUP + 7), 0.001
# the short run: the step with its slow first calls only, timed with warmup=4 (exactly its slow
# calls) and ONE repeat. A timer that does not wait for the warm-up's queued work (4 x 180 =
# 720 ms) before its first clock reading has that work in its only sample (750 ms, 25x), whatever
# statistic it takes: with 2 repeats the lower median (torch.median, statistics.median_low)
# picked the clean sample and passed (issue 34). A timer that drops its first sample has none
# left (it raises), and one that warms up `warmup - 1` times times the 4th, slow call (180 ms)
SHORT_WARMUP, SHORT_REPEATS = SLOW_CALLS, 1
# the count probe's runs: fewer repeats (COUNT_REPEATS), then a shorter warm-up (PROBE_WARMUP)
# than TIMER_REPEATS and TIMER_WARMUP: a fixed count of calls gives the same number for both
COUNT_REPEATS = 2
PROBE_WARMUP = 2
# the minimum's probe: a synchronous step whose timed calls take 30 ms, but for two of 7 that
# take nothing. A median reads 30 ms; the fastest sample reads ~0, whatever the load (load only
# adds delay to a sleep, and there is none here to delay). A timer that reads the launch reads
# the whole call here (the work is done inside step()), so this tells the two apart
NO_WORK_AT = (TIMER_WARMUP + 2, TIMER_WARMUP + 5)
REAL_STEP_SIZE = 1024  # the real step: a matmul of ~25 ms on a 2-core CPU, so the round trip (a few ms) is small beside 6 calls


# --- steps described by plain data, so the judge and the kernel build the same ones ----------


def async_recipe(
    step_s: float = STEP_S,
    slow_calls: int = SLOW_CALLS,
    slow_s: float = SLOW_S,
    *,
    outlier_at: int | None = None,
    outlier_s: float = 0.0,
    fast_at: tuple[int, ...] = (),
    fast_s: float = 0.0,
) -> dict:
    """A step on a simulated asynchronous device (demo.make_async_step), as data."""
    return {
        "kind": "async",
        "args": [step_s, slow_calls, slow_s],
        "kwargs": {
            "outlier_at": outlier_at,
            "outlier_s": outlier_s,
            "fast_at": list(fast_at),
            "fast_s": fast_s,
        },
    }


def sync_recipe(seconds: float, per_call: dict[int, float] | None = None) -> dict:
    """A synchronous step (its work done inside the call, nothing queued) sleeping `seconds`,
    or per_call[k] on call k (from 1)."""
    return {"kind": "sync", "seconds": seconds, "per_call": per_call or {}}


def matmul_recipe(size: int = REAL_STEP_SIZE) -> dict:
    return {"kind": "matmul", "size": size}


def graded_recipe(step_s: float = STEP_S) -> dict:
    """The graded scenario at a step of `step_s`: its one-off, outlier and fast calls scaled
    with it (5x, 6.7x and 1/30 of the step, as 150, 200 and 1 ms are of 30 ms), so every ratio
    a wrong timer reads (6x, 1.7x, 25x, ...) is the same at any step the check draws."""
    scale = step_s / STEP_S
    return async_recipe(
        step_s,
        SLOW_CALLS,
        SLOW_S * scale,
        outlier_at=OUTLIER_AT,
        outlier_s=OUTLIER_S * scale,
        fast_at=FAST_AT,
        fast_s=FAST_S * scale,
    )


GRADED = graded_recipe(STEP_S)


def queued_seconds(recipe: dict, calls: int) -> float:
    """The seconds of work the first `calls` calls of an async recipe's step queue: a lower
    bound on the wall time of any run that made them (each launch sleeps at least that long on
    the simulated device, and timer_reading waits for the queue before it returns)."""
    step_s, slow_calls, slow_s = recipe["args"]
    kwargs = recipe["kwargs"]
    total = 0.0
    for k in range(1, calls + 1):
        if k in kwargs["fast_at"]:
            total += kwargs["fast_s"]
            continue
        total += step_s + (slow_s if k <= slow_calls else 0.0)
        total += kwargs["outlier_s"] if k == kwargs["outlier_at"] else 0.0
    return total


def real_step(size: int) -> Callable[[], None]:
    """A real step of this machine: a matmul and a ReLU on fixed random matrices."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(size, size, generator=generator)
    w = torch.randn(size, size, generator=generator)

    def step() -> None:
        (x @ w).relu_().sum()

    return step


def build_step(recipe: dict) -> tuple[Callable[[], None], Callable[[], None], list[int]]:
    """(step, synchronize, its call count) for a recipe above."""
    kind, calls = recipe["kind"], [0]
    if kind == "async":
        kwargs = dict(recipe["kwargs"])
        kwargs["fast_at"] = tuple(kwargs["fast_at"])
        inner, synchronize = make_async_step(*recipe["args"], **kwargs)
    elif kind == "sync":
        seconds, per_call = recipe["seconds"], recipe["per_call"]

        def inner() -> None:
            time.sleep(per_call.get(calls[0], seconds))

        def synchronize() -> None:
            return None
    else:
        inner, synchronize = real_step(recipe["size"]), lambda: None

    def step() -> None:
        calls[0] += 1
        inner()

    return step, synchronize, calls


# --- the probes ----------------------------------------------------------------------------

# the lesson's own tools that are exercises 1's and 4's answers (guards.lesson_tool)
TIMER = "the course's timer (warm-up, sync, median), which exercise 1 builds"
SAMPLE = "one synchronised sample of the course's timer, the sync that exercise 1 asks about"
PROFILER = "the lesson's profiler of one warmed-up call, which exercise 4's fix is"


@probe
def timer_reading(
    time_step, recipe: dict, warmup: int, repeats: int, tolerate: bool = False
) -> dict:
    """The learner's timer on one step: what it returned, and how many times it called
    step(). `tolerate`: an exception is a reading (None), for probes that only count calls."""
    step, synchronize, calls = build_step(recipe)
    try:
        with refusing(time_fn=TIMER, timed=SAMPLE):
            seconds = time_step(step, synchronize, warmup=warmup, repeats=repeats)
    except Exception:
        if not tolerate:
            raise
        seconds = None
    finally:
        synchronize()  # let the queued work finish before the next probe
    return {"seconds": seconds, "calls": calls[0]}


@probe
def saved_bytes_of(saved_bytes, case: str, sizes: dict):
    """What the learner's function counts for one forward of demo.activation_cases(**sizes)."""
    return saved_bytes(activation_cases(**sizes)[case])


@probe
def train_flops_of(mlp_train_flops, batch: int, dims: list[int]) -> dict:
    """The learner's count, and the ops it ran to get it (course_utils.model_runs)."""
    with ModelRuns() as runs:
        value = mlp_train_flops(batch, list(dims))
    return {"value": value, "ran": dict(runs.ops)}


@probe
def slowest_op_named(
    slowest_op, scenario: str, one_off_times: float | None, sizes: list[int] | None = None
):
    """The learner's answer on one hidden-op step (its two candidates sized by `sizes`, the
    notebook's when None), warmed up, on one thread (steady timings on a shared machine);
    with `one_off_times`, the step handed over pays a one-off cost in its first call."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        step = hidden_op_steps({scenario: list(sizes)} if sizes else None)[scenario]
        step()
        with refusing(profile_step=PROFILER):
            return slowest_op(_with_one_off(step, one_off_times) if one_off_times else step)
    finally:
        torch.set_num_threads(threads)


@probe
def slowest_op_on_single_call_step(slowest_op):
    """The learner's answer on a step whose slowest single call is not its top operator."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        step, _ = single_call_probe()
        step()
        with refusing(profile_step=PROFILER):
            return slowest_op(step)
    finally:
        torch.set_num_threads(threads)
