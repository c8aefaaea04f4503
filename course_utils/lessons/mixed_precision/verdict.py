"""The verdict on one AMP-step scenario (`scenarios.ScenarioRun`): passed, or what differs
from float32, with a cause named only where a measurement of that run confirms it.

What confirms what: the forward's output dtype (autocast around the forward); autocast's
state as backward reached the output (backward inside autocast); nonzero .grad at that moment
(gradients left from the previous step); the GradScalers made during the steps (one per
step); the order of scaler calls in a step (update() before step()); each optimizer.step()
with the gradients it was handed (finite or not, inside scaler.step or not, their norm); the
norm each clip_grad_norm_ call was handed (scaled or not); the gradient reaching the output
(the loss scaled or not).
"""

from __future__ import annotations

import math

import torch

from ...checks import Part, Threshold, correct
from .scenarios import MAX_NORM, STEPS, ScenarioRun

# A norm the learner's step produced "equals" float32's (or the scale times it) within this:
# a 16-bit forward moves the gradients' norm 0.002-0.05% from float32's in these scenarios
# (fp16 early/late, bf16 early, seed 2, cpu-bf16, torch 2.14), while the causes it tells apart
# differ by the scale, 2**16 at first.
NORM_MATCH = 0.05
# An output gradient more than this many times float32's was scaled (the scale is 2**16 at
# first and never below 2**13 in 6 steps); unscaled ones measure 0.99-1.01x.
SCALED = 8


def judge(run: ScenarioRun, thresholds: dict[str, Threshold]) -> Part:
    """Passed, or failed with what was measured and, where confirmed, why."""
    tol = thresholds["update_error"].value
    name, want = run.name, run.want
    if run.out_dtypes != {want}:
        return correct(
            name,
            False,
            f"the model's output was {', '.join(sorted(run.out_dtypes)) or 'never computed'}, "
            f"not {want}: run model(x) and the loss under torch.autocast(device.type, "
            "dtype=dtype)",
        )
    if run.backward_autocast:
        return correct(
            name,
            False,
            "backward ran inside autocast: leave the `with` block after "
            "the loss; backward uses the dtypes chosen in the forward by itself",
        )
    if run.refused:
        return correct(name, False, _refused(run))
    unskipped = _unskipped_on_inf(run)
    if unskipped:
        return correct(name, False, unskipped)
    if run.skipped == len(run.returned) == STEPS:
        return correct(name, False, _all_skipped(run))
    loss_part = returned_loss(name, run.returned, thresholds["loss_error"].value)
    if loss_part is not None:
        return loss_part
    error = run.update_error
    message = (
        f"worst layer's parameter change after {STEPS} steps ({run.skipped} skipped by the "
        f"scaler) differs from float32 by {error:.3g} (allowed {tol})"
    )
    if error <= tol:
        if run.dtype == torch.bfloat16 and run.grad_scale > SCALED:
            message += (
                f"; your bf16 gradients were scaled ({run.grad_scale:.3g}x), which bf16 does "
                "not need (float32's range): harmless, but each step pays the scaler's inf check"
            )
        return correct(name, True, message, value=error, threshold=tol, better="lower")
    return correct(
        name, False, message + "; " + _why_update(run), value=error, threshold=tol, better="lower"
    )


def _refused(run: ScenarioRun) -> str:
    said = f"PyTorch refused step {len(run.returned) + 1} of {STEPS}: {run.refused!r}"
    for i in range(len(run.returned) + 1):
        order = run.calls.order(i)
        if "update" in order and "step" in order and order.index("update") < order.index("step"):
            return (
                f"{said}. In step {i + 1} your scaler.update() ran before scaler.step(optimizer): "
                "update() closes the step (so step() unscaled the gradients again, and the next "
                "unscale_ found a step never closed). Call update() last, after step()"
            )
    if not run.calls.of("update"):
        return f"{said}. scaler.update() was never called: call it once per step, after step()"
    return said


def _unskipped_on_inf(run: ScenarioRun) -> str | None:
    """Name optimizer.step() calls made directly on inf/NaN gradients, if any were."""
    bad = [e for e in run.calls.of("optimizer.step") if not e.finite and not e.inside]
    if not bad:
        return None
    return (
        f"in step {bad[0].step + 1} optimizer.step() ran on inf/NaN gradients: it was called "
        "directly, not through scaler.step(optimizer), which would have skipped that step, so "
        "the overflow changed the parameters. Use scaler.step(optimizer)"
    )


def _stale(run: ScenarioRun) -> str | None:
    stale = [i for i, s in enumerate(run.stale) if s]
    if not stale:
        return None
    return (
        f"when backward began in step {stale[0] + 1}, .grad still held the previous step's "
        "gradients: they accumulate across steps (and an inf, once there, stays). Clear them "
        "once per step (optimizer.zero_grad)"
    )


def _all_skipped(run: ScenarioRun) -> str:
    said = f"all {STEPS} optimizer steps were skipped (the parameters never changed)"
    made = run.calls.of("scaler")
    in_steps = {e.step for e in made if e.step >= 0}
    if len(in_steps) == STEPS:
        return (
            f"{said}: a new GradScaler was made in each of the {STEPS} steps, so each began "
            "again at the initial scale 2**16 and overflowed again. The scale is state: make "
            "one GradScaler, outside step(), and keep it for the run"
        )
    stale = _stale(run)
    if stale:
        return f"{said}; {stale}"
    if not run.calls.of("optimizer.step"):
        return f"{said}: optimizer.step() never ran, neither directly nor through scaler.step"
    scales = [e.scale for e in run.calls.of("step")]
    if scales:
        return (
            f"{said}: scaler.step found inf/NaN gradients every time; the scale it used went "
            f"{' -> '.join(f'{s:g}' for s in scales)}"
        )
    return said


def _first_taken(run: ScenarioRun):
    """The first optimizer.step() the learner's run took (it used the first step's weights
    and batch: a skipped step changes nothing)."""
    taken = [e for e in run.calls.of("optimizer.step") if e.finite]
    return taken[0] if taken else None


def _why_update(run: ScenarioRun) -> str:
    """Why the parameters moved differently from float32's, from what the optimizer was handed."""
    stale = _stale(run)
    if stale:
        return stale
    ratio, scaled = run.update_ratio, run.grad_scale
    if ratio < 0.5 and run.dtype == torch.float16 and scaled < SCALED:
        taken = _first_taken(run)
        zeros = (
            f"; {taken.zeros:.0%} of the gradient entries the optimizer got were exactly zero "
            f"(float32: {run.fp32_zeros:.0%})"
            if taken is not None
            else ""
        )
        return (
            f"that update is {ratio:.2g}x float32's, and the gradient reaching the output was "
            f"{scaled:.3g}x float32's: the loss was not scaled{zeros}. fp16's small gradients "
            "underflow unless a GradScaler scales the loss (see 'Baseline')"
        )
    clipped = min(run.fp32_norm, MAX_NORM)  # the norm float32's clipped step used
    taken = _first_taken(run)
    if taken is None:
        return f"that update is {ratio:.2g}x float32's"
    step, used = taken.step, taken.norm
    said = (
        f"the first gradients optimizer.step() used had norm {used:.3g}, float32's clipped "
        f"step used {clipped:.3g}"
    )
    clips, order = run.calls.of("clip", step), run.calls.order(step)
    scale = next((e.scale for e in run.calls.of("step", step)), math.nan)
    if len(clips) == 1 and math.isclose(clips[0].norm, run.fp32_norm * scale, rel_tol=NORM_MATCH):
        late = "unscale_" in order and order.index("unscale_") > order.index("clip")
        return (
            f"{said}. clip_grad_norm_ was handed gradients of norm {clips[0].norm:.3g}, "
            f"{scale:g} (the scale) times float32's {run.fp32_norm:.3g}: it clipped them while "
            "still multiplied by the scale, "
            + ("and your scaler.unscale_ came after it" if late else "before any unscale_")
            + ": scaler.unscale_(optimizer) must come before clip_grad_norm_"
        )
    twice = math.isclose(used * scale, clipped, rel_tol=NORM_MATCH)
    if twice and len(clips) == 1 and math.isclose(clips[0].norm, run.fp32_norm, rel_tol=NORM_MATCH):
        return (
            f"{said}, 1/{scale:g} (the scale) of it. clip_grad_norm_ was handed gradients "
            f"already divided by the scale (norm {clips[0].norm:.3g}, as float32's), and they "
            "were divided by the scale again before optimizer.step: scaler.step divides them "
            "unless scaler.unscale_(optimizer) did it first"
        )
    if twice:
        return f"{said}, 1/{scale:g} (the scale) of it: the gradients were divided by it once more"
    if used > MAX_NORM * (1 + NORM_MATCH):
        if clips and order.index("clip") > order.index("optimizer.step"):
            return (
                f"{said}: your clip_grad_norm_ ran after the optimizer step, clipping did not act"
            )
        if len(clips) > 1:
            return (
                f"{said}, above max_norm {MAX_NORM}: clip_grad_norm_ was called {len(clips)} "
                "times in one step, each on part of the parameters; clipping did not act on "
                "their total norm"
            )
        return f"{said}, above max_norm {MAX_NORM}: clipping did not act on those gradients"
    return f"{said} (a factor {used / clipped:.3g}); that update is {ratio:.2g}x float32's"


def returned_loss(name: str, returned: list[tuple[object, float]], tol: float) -> Part | None:
    """A failed part if any step returned something other than its loss (float32 value of the
    same weights, within `tol`: the forward ran in 16 bits), else None."""
    for i, (got, want) in enumerate(returned):
        try:
            value = float(torch.as_tensor(got).detach().float().reshape(()))
        except (TypeError, RuntimeError, ValueError):
            return correct(name, False, f"step {i} returned {got!r}, not the loss: return it")
        ratio = value / want if want else float("inf")
        if not abs(ratio - 1) <= tol:
            said = f"step {i} returned {value:.4g} for a loss of {want:.4g} ({ratio:.3g}x)"
            if ratio >= 2**8 and float(ratio).is_integer() and (int(ratio) & int(ratio) - 1) == 0:
                said += ": a power of two, the scaler's scale: return loss, not scaler.scale(loss)"
            return correct(name, False, said + "; step(x, y) returns the loss of that step")
    return None
