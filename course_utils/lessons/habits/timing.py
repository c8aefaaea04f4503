"""How 10-fast-train times the learner's loop: from the check's side, in interleaved rounds
against slow_train and the lesson's fix, both run there (the learner's code can slow neither),
each timed run of the learner's loop returning the parameters it trained, which must be the
fix's of the same round. Nothing here runs in the learner's kernel but through its probe."""

from __future__ import annotations

import secrets
import time

import torch

from ...device import get_device, synchronize
from ...measure import steady_cpu
from ...mode import pick
from ...probes import observe_timed
from . import demo, loop
from .probes import timed_run


def worst_difference(params, ref_params) -> float:
    """The largest difference between two lists of parameters (inf if they do not pair up)."""
    if len(params) != len(ref_params) or not all(
        isinstance(p, torch.Tensor) and p.shape == q.shape
        for p, q in zip(params, ref_params, strict=True)
    ):
        return float("inf")
    return max(
        (
            (p.detach().cpu() - q.detach().cpu()).abs().max().item()
            for p, q in zip(params, ref_params, strict=True)
        ),
        default=0.0,
    )


def all_fixed(model, data, steps: int, device, eval_every: int = 10):
    """slow_train with every habit fixed (the ablation's loop keeping none): the speed-up the
    learner's loop is measured against. As fast as reference_fast_train: reference / this
    1.03, slow_train / each 14.2 and 13.4 (median of 7 interleaved rounds, quick mode, one
    thread, cpu-bf16 2-core machine). Run here, never in the learner's kernel (whose harness
    withholds variant_train: with keep=() it is exercise 1's answer)."""
    return loop.variant_train(model, data, steps, device, (), eval_every)


class OtherWork(Exception):
    """Raised when a timed run of the learner's loop trained other parameters than the fix."""


def rounds(
    fast_train, steps: int, n_rounds: int, eval_every: int, atol: float
) -> dict[str, list[float]]:
    """Seconds per run of slow_train, the fix and the learner's loop, interleaved as
    demo.time_runs interleaves them (each round runs all three, in a rotating order, each on
    a fresh model, one thread). slow_train and the fix run here; the learner's loop runs in
    its probe, timed from here. Each round's runs train on a data set whose seed is drawn as
    the round starts, built inside each timed run, and the learner's run must return the
    parameters the fix trained (the work timed is the work asked, and no earlier run fits)."""
    device, names, draw = get_device(), ["slow", "reference", "yours"], secrets.SystemRandom()
    samples: dict[str, list[float]] = {n: [] for n in names}
    with steady_cpu():
        for r in range(n_rounds):
            seed, fixed, work = draw.randrange(2**31), None, None
            for name in names[r % 3 :] + names[: r % 3]:
                if name == "yours":
                    work, seconds = observe_timed(timed_run, fast_train, steps, eval_every, seed)
                    samples[name].append(seconds)
                    continue
                synchronize(device)
                t0 = time.perf_counter()
                model = loop.make_model().to(device)
                train = loop.slow_train if name == "slow" else all_fixed
                loop.quiet(train, model, loop.make_data(seed=seed), steps, device, eval_every)
                synchronize(device)
                samples[name].append(time.perf_counter() - t0)
                if name == "reference":
                    fixed = list(model.parameters())
            if worst_difference(work["params"], fixed) > atol:
                raise OtherWork(f"{worst_difference(work['params'], fixed):.2g}")
    return samples


def speed(fast_train, steps: int, eval_every: int, atol: float) -> tuple[float, float, float]:
    """(learner speed-up, the fix's speed-up, learner / fix) over slow_train; `atol`: how far
    the learner's timed runs may train from the fix's (OtherWork beyond)."""
    samples = rounds(fast_train, steps, pick(quick=5, full=7), eval_every, atol)
    yours, ref = demo.ratio(samples, "slow", "yours"), demo.ratio(samples, "slow", "reference")
    return yours, ref, demo.ratio(samples, "reference", "yours")
