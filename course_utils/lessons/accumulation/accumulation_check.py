"""Lesson 07's check of exercise 1: an accumulated epoch whose every optimizer step equals one
step on the whole group of micro-batches it covers (float64, so equal means equal to rounding),
the mistake behind a wrong step named from the gradients the probe recorded."""

from __future__ import annotations

import torch

from ...checks import check, correct
from ...probes import observe, specimen_rng
from . import demo
from .checks import THRESHOLDS
from .probes import accumulated_grads

# Two scenarios of (micro-batches, samples each, accumulation steps): a last group of 1 of 3
# micro-batches, then groups that all divide evenly. The judge draws each from its options
# (probes.specimen_rng: the first in a notebook, where the evidence was measured), and the
# data's seed: the partial group of 1 of 3 that sized grad_rel_error is in every draw
SCENARIOS = ([(7, 4, 3), (10, 4, 3), (7, 5, 3)], [(6, 5, 2), (8, 5, 2), (6, 4, 2)])
SEEDS = (0, 1, 2, 3)


def _count_mistake(got: demo.Trajectory, want: demo.Trajectory, problem) -> str:
    """Name the mistake behind a wrong number of optimizer steps ('' if it is right)."""
    n_micro, k, steps = len(problem.micro_batches), problem.k, len(want.grads)
    if len(got.grads) == steps:
        return ""
    if len(got.grads) == n_micro:
        why = "it steps on every micro-batch; step once per group of accum_steps"
    elif len(got.grads) == steps - 1 and len(problem.groups[-1]) < k:
        why = "the last, partial group was dropped: step it too"
    else:
        why = "expected one optimizer.step() per group of accum_steps micro-batches"
    return (
        f"optimizer.step() ran {len(got.grads)} times for {n_micro} micro-batches and "
        f"accum_steps={k}; expected {steps}: {why}"
    )


def _gradient_mistake(i: int, got: demo.Trajectory, want: demo.Trajectory, problem) -> str:
    """Name the mistake behind a wrong gradient at optimizer step i."""
    g, e, k, size = got.grads[i], want.grads[i], problem.k, len(problem.groups[i])
    where = (
        f"at optimizer step {i + 1} the gradient is off by {demo.rel_error(g, e):.2g} (relative)"
    )
    scale = float(g @ e / (e @ e))
    if demo.rel_error(g, scale * e) <= 1e-6:  # the right direction, the wrong size
        if abs(scale - size) < 1e-6 * size:
            fix = "divide each micro-batch's loss by the number of micro-batches in its group"
        elif size < k and abs(scale - size / k) < 1e-6:
            fix = f"this last group has {size} micro-batch(es) but the loss was divided by {k}"
        else:
            fix = "the loss is scaled wrongly"
        return f"{where}: it is {scale:.3g}x the full-batch gradient; {fix}"
    if any(demo.rel_error(g, want.last_micro[i] / d) <= 1e-6 for d in (k, size, 1)):
        return (
            f"{where}: it equals the last micro-batch's gradient alone; zero_grad() runs "
            "inside the micro-batch loop and wipes the earlier ones"
        )
    if i > 0 and demo.rel_error(g - got.grads[i - 1], e) <= 1e-6:
        return (
            f"{where}: it still holds the previous step's gradient; zero the gradients after "
            "each optimizer.step()"
        )
    return f"{where}; expected the gradient of one step on the whole group"


def _diagnose(got: demo.Trajectory, want: demo.Trajectory, problem) -> str:
    """'' when every step matches the full-batch one, else the first mistake, named."""
    if why := _count_mistake(got, want, problem):
        return why
    tol = THRESHOLDS["grad_rel_error"].value
    for i, (g, e) in enumerate(zip(got.grads, want.grads, strict=True)):
        if demo.rel_error(g, e) > tol:
            return _gradient_mistake(i, got, want, problem)
    return ""


def _as_trajectory(grads, want: demo.Trajectory) -> demo.Trajectory:
    """What the probe saw as a Trajectory: float64 vectors of the model's size, one per step."""
    size = want.grads[0].numel()
    if not isinstance(grads, list) or not all(
        isinstance(g, torch.Tensor) and g.shape == (size,) for g in grads
    ):
        raise TypeError(f"the probe returned {type(grads).__name__}, not gradients of {size}")
    return demo.Trajectory([g.to(torch.float64) for g in grads])


@check(
    "07-accumulation",
    points=3,
    hint="Set each optimizer.step() beside one step on the whole group of micro-batches it "
    "covers: how many groups does the loader make, and which mean must the last, shorter "
    "group's gradient be? Reread section 1 and the guide's loop measured there.",
    in_kernel="the gradient each optimizer.step() call sees, recorded by a step pre-hook on "
    "the optimizer handed to the learner's epoch",
)
def check_accumulation(accumulate_epoch):
    parts, rng = [], specimen_rng()
    seed = rng.choice(SEEDS)
    for options in SCENARIOS:
        n_micro, micro, k = rng.choice(options)
        problem = demo.make_accum_problem(n_micro, micro, k, seed=seed)
        want = demo.full_batch_trajectory(problem)
        grads = observe(accumulated_grads, accumulate_epoch, n_micro, micro, k, seed)
        got = _as_trajectory(grads, want)
        why = _diagnose(got, want, problem)
        worst = max(
            (demo.rel_error(g, e) for g, e in zip(got.grads, want.grads, strict=False)), default=1.0
        )
        ok = not why
        msg = (
            f"{len(want.grads)} optimizer steps, each gradient equal to a full-batch step within "
            f"{worst:.1g} (float64, tolerance {THRESHOLDS['grad_rel_error'].value:g})"
            if ok
            else why
        )
        parts.append(
            correct(
                f"{n_micro} micro-batches of {micro}, accum_steps={k}",
                ok,
                msg,
                value=worst,
                threshold=THRESHOLDS["grad_rel_error"].value,
                better="lower",
            )
        )
    return parts
