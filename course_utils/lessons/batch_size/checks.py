"""Lesson 02's checks. Each grades behaviour against a quantity the scenario fixes: samples/s
of steps whose cost is known, the batch that fits a device of known size, and the noise scale
of a problem with a closed form. The LR per step is graded in lr_check.py, LARS in lars_check.py."""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Callable
from unittest import mock

import torch

from ... import device as device_module
from ...checks import Threshold, at_most, check, correct, retry_measure
from ...errors import ReferenceUsed
from ...measure import Throughput, steady_cpu
from .demo import MiB, SimulatedMemory, known_cost_steps, simulated_steps
from .regression import NoisyRegression

THRESHOLDS = {
    "throughput_factor": Threshold(
        1.3,
        "samples/s of steps of known cost (sleeps of 25-51 ms) by the reference sweep: worst "
        "batch 1.007-1.079x off the true rate in 10 runs at load average 10 on 2 cores "
        "(cpu-bf16); with 8-28 ms sleeps it reached 1.51x, hence the longer steps. The "
        "mistakes are 2x (samples miscounted) to 60x (steps/s) off",
        measured_on=("cpu-bf16",),
    ),
    "noise_scale_error": Threshold(
        0.20,
        "relative error of the unbiased estimator on the two problems: sd 4%, worst 7.8% over "
        "12 seeds at n=300 (x1.2 at n=200) (cpu-bf16); |G_big|^2 as |G|^2 is 66% off on the "
        "first, B_small|G_small|^2 as tr(Sigma) 99-140% off on the second (5 seeds each)",
        measured_on=("cpu-bf16",),
    ),
}

# --- exercise 1: throughput ------------------------------------------------------------------


def _rate(value) -> float:
    return value.samples_per_s if isinstance(value, Throughput) else float(value)


@check(
    "02-throughput-sweep",
    points=2,
    hint="Compare your samples/s with the true rates the message lists: what does one call of "
    "a step at batch b process, and which of its calls are typical? Reread notebook 00's timing "
    "rules and exercise 1's hints.",
)
def check_throughput_sweep(throughput_sweep: Callable) -> list:
    sizes = [8, 64, 512]
    make = known_cost_steps()
    factor = THRESHOLDS["throughput_factor"].value
    last: dict = {}

    def worst() -> float:
        got = throughput_sweep(make, list(sizes))
        if not isinstance(got, dict) or sorted(int(k) for k in got) != sizes:
            keys = sorted(got) if isinstance(got, dict) else type(got).__name__
            raise TypeError(f"expected a dict with one entry per batch size {sizes}, got {keys}")
        last.update({int(k): _rate(v) for k, v in got.items()})
        ratios = [last[b] / make.samples_per_s(b) for b in sizes]
        return max(max(r, 1 / r) if r > 0 and math.isfinite(r) else math.inf for r in ratios)

    value = retry_measure(worst, ok=lambda w: w <= factor)
    table = ", ".join(f"b={b}: {last[b]:,.0f} vs {make.samples_per_s(b):,.0f}" for b in sizes)
    part = at_most(
        "samples/s",
        value,
        factor,
        f"steps of known cost, your samples/s vs the true rate ({table}); worst factor off",
        unit="x",
    )
    if value > factor:
        part.message += _why_throughput(last, make, sizes, throughput_sweep, factor)
    return [part]


def _why_throughput(got: dict, make, sizes: list[int], sweep: Callable, factor: float) -> str:
    """A suffix naming the mistake the numbers or a probe confirm (empty when none does)."""
    true = {b: make.samples_per_s(b) for b in sizes}
    r = [got[b] / true[b] for b in sizes]
    if all(abs(x * b - 1) < 0.3 for x, b in zip(r, sizes, strict=True)):
        return " (these are steps/s: multiply by the batch size)"
    if all(abs(got[b] * true[b] - 1) < 0.3 for b in sizes):
        return " (these are seconds per sample: samples/s is batch size / seconds per step)"
    if all(abs(x - 2) < 0.4 for x in r) or all(abs(x - 0.5) < 0.1 for x in r):
        return " (off by 2x at every size: count the samples of one step once)"
    first = make(sizes[0]).seconds
    if all(abs(got[b] * first / b - 1) < 0.3 for b in sizes):
        return " (every size ran the first size's step: call make_step(b) for each b)"
    steady = known_cost_steps(first_call_s=0.0)  # the same steps without a slow first call
    rates = sweep(steady, list(sizes))
    if isinstance(rates, dict) and all(
        b in rates and 1 / factor <= _rate(rates[b]) / steady.samples_per_s(b) <= factor
        for b in sizes
    ):
        return (
            " (on the same steps without their slow first call your sweep is right: it times "
            "the first call; warm up before timing, take the median)"
        )
    return ""


# --- exercise 2: the largest batch that fits -----------------------------------------------------


# name: (capacity, parameters+gradients, activations per sample, momentum, error raised, bug)
def _OOM(message: str) -> torch.cuda.OutOfMemoryError:  # noqa: N802
    """An OutOfMemoryError worded as CUDA words it, so a probe that reads the words works."""
    return torch.cuda.OutOfMemoryError(f"CUDA out of memory. {message}")


MEMORY_CASES = {
    "CUDA out of memory": (1000, 100, 10, 100, _OOM, None),
    "cuBLAS allocation failure": (
        600,
        50,
        4,
        50,
        lambda m: RuntimeError(
            f"CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)` ({m})"
        ),
        None,
    ),
    "the previous try still in memory": (1100, 400, 1, 400, _OOM, None),
    "nothing fits": (300, 200, 5, 200, _OOM, None),
    "a bug, not memory": (100_000, 10, 1, 10, _OOM, 64),
}
MEMORY_CANDIDATES = {
    "CUDA out of memory": [25, 50, 75, 82, 88, 100],
    "cuBLAS allocation failure": [16, 32, 64, 112, 128],
    "the previous try still in memory": [64, 128, 256, 512],
    "nothing fits": [16, 32, 64],
    "a bug, not memory": [16, 32, 64, 128],
}


def _fits_alone(case: tuple, b: int, steps: int = 2) -> bool:
    capacity, model, act, state = case[:4]
    return model + act * b + (state if steps > 1 else 0) <= capacity


def _answer(case: tuple, candidates: list[int], steps: int = 2) -> int | None:
    fits = [b for b in candidates if _fits_alone(case, b, steps)]
    return max(fits) if fits else None


@check(
    "02-largest-batch",
    points=2,
    hint="Reread exercise 2's four requirements and its hints: which errors mean 'does not "
    "fit' and which are bugs, what a training step allocates only once it has run, and what "
    "still holds memory while the next try is built.",
)
def check_largest_batch(largest_batch: Callable) -> list:
    parts = []
    for name, case in MEMORY_CASES.items():
        capacity, model, act, state, error, bug = case
        memory = SimulatedMemory(capacity * MiB, error)
        make = simulated_steps(memory, model * MiB, act * MiB, state * MiB, bug_from=bug)
        candidates = MEMORY_CANDIDATES[name]
        with _releases_into(memory):
            parts.append(
                _grade_probe(
                    name, case, candidates, lambda m=make, c=candidates: largest_batch(m, c), memory
                )
            )
    return parts


@contextlib.contextmanager
def _releases_into(memory: SimulatedMemory):
    """Route the learner's cache releases (lesson.release_cached_memory, torch.cuda.empty_cache)
    to the simulated device, which records what was still referenced at each."""

    def release(*_args, **_kwargs) -> None:
        memory.release_cache()

    package = sys.modules[__package__]
    with (
        mock.patch.object(package, "release_cached_memory", release),
        mock.patch.object(device_module, "release_cached_memory", release),
        mock.patch.object(torch.cuda, "empty_cache", release),
    ):
        yield


def _grade_probe(
    name: str, case: tuple, candidates: list[int], probe: Callable, memory: SimulatedMemory
):
    bug = case[5]
    try:
        got = probe()
    except (NotImplementedError, ReferenceUsed):
        raise  # not attempted, or the reference called: the check says so
    except Exception as exc:  # what escaped the learner's probe
        if bug is not None and "shapes cannot be multiplied" in str(exc):
            return correct(name, True, "the shape error of a real bug reached you, as it should")
        return correct(
            name,
            False,
            f"your probe let {type(exc).__name__}('{str(exc)[:90]}...') escape: "
            + (
                "an allocation failure reported as a RuntimeError still means 'does not fit'"
                if not isinstance(exc, torch.cuda.OutOfMemoryError)
                else "torch.cuda.OutOfMemoryError means 'does not fit'"
            ),
        )
    if bug is not None:
        return correct(
            name,
            False,
            f"your probe returned {got} although batch {bug} raised a shape error, not an "
            "out-of-memory error: re-raise errors that are not about memory, or a bug hides",
        )
    want = _answer(case, candidates)
    ok = got == want
    why = "" if ok else _why_probe(name, case, candidates, got, want)
    held = max(memory.held_at_release, default=0)
    if ok and held:
        return correct(
            name,
            False,
            f"largest batch that fits: yours {got}, right; but when your probe released the "
            f"cache, {held / MiB:.0f} MiB of a try were still referenced, which a cache release "
            "cannot free (inside `except`, the exception's traceback holds the failed try's "
            "frame; or a variable still holds its step): release after the except block, once "
            "nothing refers to the try",
        )
    return correct(name, ok, f"largest batch that fits: yours {got}, the device's {want}{why}")


def _why_probe(name: str, case: tuple, candidates: list[int], got, want) -> str:
    one_step = _answer(case, candidates, steps=1)
    after = candidates[0] if want is None else next((b for b in candidates if b > want), None)
    if got == after and got != one_step:
        return " (that is the first batch that does not fit: return the one before it)"
    if got == after:  # both mistakes give this answer here
        return (
            " (the first batch that does not fit, or what fits one step only: return the "
            "batch before the first failure, and run two steps since the first "
            "optimizer.step() allocates the momentum)"
        )
    if got == one_step:
        return (
            " (one step fits it, the second does not: the first optimizer.step() allocates "
            "the momentum buffers; run two steps)"
        )
    if want is None:
        return " (not even the first candidate fits: return None)"
    if got is not None and got < want and "previous" in name:
        return (
            f" (batch {want} fits when tried alone: the previous try's model and optimizer "
            "were still referenced while the next was built; drop them first)"
        )
    return ""


# --- exercise 4: gradient noise scale --------------------------------------------------------------


def noise_problems() -> list[tuple[NoisyRegression, int, int, int]]:
    """(problem, B_small, B_big, n). The first has B_big below B_simple, so |G_big|^2 taken as
    |G|^2 is far off; the second has B_small near B_simple, so B_small |G_small|^2 taken as
    tr(Sigma) is far off. The unbiased estimator is within a few percent on both."""
    return [
        (NoisyRegression(dim=512, noise_var=1.0, seed=1), 128, 512, 200),
        (
            NoisyRegression(dim=32, noise_var=1.0, scales=torch.linspace(0.5, 2.0, 32), seed=2),
            64,
            512,
            300,
        ),
    ]


@check(
    "02-noise-scale",
    points=2,
    hint="Section 4's identity for E|G_B|^2 holds at each of the two batch sizes: what does "
    "that let you solve for? Reread exercise 4's hints on when to average and when to divide.",
)
def check_noise_scale(noise_scale: Callable) -> list:
    limit = THRESHOLDS["noise_scale_error"].value
    parts = []
    with steady_cpu():  # thousands of tiny autograd calls: one thread avoids thread thrash
        for problem, b_small, b_big, n in noise_problems():
            value = float(noise_scale(problem.gradient, b_small, b_big, n))
            truth = problem.b_simple
            err = abs(value - truth) / truth if math.isfinite(value) else math.inf
            what = f"your B_simple {value:.4g} against the true {truth:.4g}"
            part = at_most(
                f"B_small={b_small}, B_big={b_big}", err, limit, f"relative error of {what}"
            )
            if err > limit:
                part.message += _why_noise(value, problem, b_small, b_big)
            parts.append(part)
    return parts


def _why_noise(value: float, problem: NoisyRegression, b_small: int, b_big: int) -> str:
    """Name the mistake whose expected value lies nearest the learner's, if one is close."""
    g2, tr = problem.grad_sq_norm, problem.trace_sigma
    mistakes = {
        "|G_big|^2 used as |G|^2 (it still holds tr(Sigma)/B_big)": tr / (g2 + tr / b_big),
        "B_small |G_small|^2 used as tr(Sigma) (it still holds B_small |G|^2)": (b_small * g2 + tr)
        / g2,
        "each norm paired with the other batch size": -tr
        / (g2 + tr * (b_big / b_small - b_small / b_big) / (b_big - b_small)),
    }
    name, expected = min(mistakes.items(), key=lambda kv: abs(kv[1] - value))
    return (
        f" (close to what {name} gives: {expected:.4g})"
        if abs(expected - value) < 0.15 * abs(expected)
        else ""
    )
