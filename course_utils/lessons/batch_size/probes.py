"""Lesson 02's probes for its three exercises: each builds its specimen from plain arguments (a
size, a scenario's name, a seed), runs the learner's answer on it beside the learner's code,
and returns what it saw as data (course_utils.probes). The checks (checks.py) compute what
that data must be; the scenarios live here so that both sides build the same ones."""

from __future__ import annotations

import contextlib
import sys
from unittest import mock

import torch

from ... import device as device_module
from ...errors import ReferenceUsed
from ...measure import Throughput, steady_cpu
from ...probes import probe
from .demo import MiB, SimulatedMemory, known_cost_steps, simulated_steps
from .regression import NoisyRegression

# --- exercise 1: throughput on steps of known cost ------------------------------------------

FIRST_CALL_S = 0.2  # the graded steps' one-off cost in their first call (known_cost_steps)


@probe
def sweep_rates(throughput_sweep, sizes: list, first_call_s: float = FIRST_CALL_S):
    """The learner's sweep of steps of known cost (demo.known_cost_steps). It gets each step as
    a bare callable: the true rates stay with the check. A Throughput it returns is read as its
    samples/s; anything else is sent as it is."""
    make = known_cost_steps(first_call_s=first_call_s)

    def make_step(b: int):
        step = make(b)

        def run() -> None:
            step()

        return run

    got = throughput_sweep(make_step, list(sizes))
    if not isinstance(got, dict):
        return got
    return {k: v.samples_per_s if isinstance(v, Throughput) else v for k, v in got.items()}


# --- exercise 2: the largest batch that fits, on a simulated device ------------------------------


def _OOM(message: str) -> torch.cuda.OutOfMemoryError:  # noqa: N802
    """An OutOfMemoryError worded as CUDA words it, so a probe that reads the words works."""
    return torch.cuda.OutOfMemoryError(f"CUDA out of memory. {message}")


# name: (capacity, parameters+gradients, activations per sample, momentum, error raised, bug)
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


def memory_case(name: str, scale: int = 1) -> tuple[tuple, list[int]]:
    """MEMORY_CASES[name] and its candidates with every batch `scale` times larger and the
    activations per sample `scale` times smaller (a power of 2: exact in MiB): each batch holds
    the same bytes, so what fits, what fits one step only and where the bug starts are the
    same candidates, under other batch sizes."""
    capacity, model, act, state, error, bug = MEMORY_CASES[name]
    case = (capacity, model, act / scale, state, error, None if bug is None else bug * scale)
    return case, [b * scale for b in MEMORY_CANDIDATES[name]]


@contextlib.contextmanager
def releases_into(memory: SimulatedMemory):
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


@probe
def largest_batch_on(largest_batch, name: str, scale: int = 1) -> dict:
    """The learner's probe on memory_case(name, scale): what it returned, or the error that
    escaped it (its type, message, and whether it is an OutOfMemoryError); and the most bytes
    still referenced at one of its cache releases (the simulated device's reading)."""
    (capacity, model, act, state, error, bug), candidates = memory_case(name, scale)
    memory = SimulatedMemory(capacity * MiB, error)
    act_bytes = int(act * MiB)  # exact: MiB is a power of 2, and so is `scale`
    make = simulated_steps(memory, model * MiB, act_bytes, state * MiB, bug_from=bug)
    seen: dict = {"got": None, "escaped": None}
    with releases_into(memory):
        try:
            seen["got"] = largest_batch(make, candidates)
        except (NotImplementedError, ReferenceUsed):
            raise  # not attempted, or the reference called: the check says so
        except Exception as exc:  # what escaped the learner's probe is graded, not reported
            seen["escaped"] = {
                "type": type(exc).__name__,
                "message": str(exc),
                "out_of_memory_error": isinstance(exc, torch.cuda.OutOfMemoryError),
            }
    seen["held"] = max(memory.held_at_release, default=0)
    return seen


# --- exercise 3: gradient noise scale on regressions with a closed form ----------------------


def noise_problem(case: int, seed: int) -> tuple[NoisyRegression, int, int, int]:
    """(problem, B_small, B_big, n) of case 0 or 1, its draws from `seed`. Case 0 has B_big
    below B_simple, so |G_big|^2 taken as |G|^2 is far off; case 1 has B_small near B_simple,
    so B_small |G_small|^2 taken as tr(Sigma) is far off. The unbiased estimator is within a
    few percent on both."""
    if case == 0:
        return NoisyRegression(dim=512, noise_var=1.0, seed=seed), 128, 512, 200
    scales = torch.linspace(0.5, 2.0, 32)
    return NoisyRegression(dim=32, noise_var=1.0, scales=scales, seed=seed), 64, 512, 300


@probe
def noise_scale_on(noise_scale, case: int, seed: int):
    """The learner's estimate on noise_problem(case, seed). It gets the gradient as a bare
    function: the problem, and its closed form, stay with the check."""
    problem, b_small, b_big, n = noise_problem(case, seed)

    def gradient(batch_size: int) -> torch.Tensor:
        return problem.gradient(batch_size)

    with steady_cpu():  # thousands of tiny autograd calls: one thread avoids thread thrash
        return noise_scale(gradient, b_small, b_big, n)
