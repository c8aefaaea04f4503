"""Lesson 08's check of exercise 4 (08-accum-clip): two accumulated clipped steps against two
clipped steps on the whole batch, the norm returned, one micro-batch per forward and no value
read on the host. The learner's step runs only through a probe (probes.accumulated_steps); a
message names a mistake only where its replay (accum_mistakes.py) ends where the learner's did."""

from __future__ import annotations

import math

import torch

from ...checks import check, correct
from ...probes import observe, specimen_rng
from . import accum_mistakes, accumulation
from .checks import THRESHOLDS
from .diagnosis import as_float
from .expected import expected_whole_batch
from .probes import accumulated_steps

# --- exercise 4: clipping an accumulated gradient -------------------------------------------

# the RNN's seed and its batches' (the seed after it), drawn per run (the first in a notebook),
# and the number of micro-batches per step: the first gradients have norm ~10 (seeds 7, 3, 11),
# so at max_norm 0.5 the first micro-batch's partial sum is already clipped for every k here,
# and at 1000 nothing is (THRESHOLDS["accum_idle"])
ACCUM_SEEDS, ACCUM_K = (7, 3, 11), (4, 8, 2)


def _accum_mistake(got: list, model, batches, max_norm: float) -> str:
    """Name a mistake only if an accumulated step that makes exactly it ends where the
    learner's steps did."""
    atol = THRESHOLDS["accum_atol"].value
    if accumulation.same(got, [p.detach() for p in model.parameters()], atol):
        return "your steps did not move the parameters"
    for step, said, _ in accum_mistakes.ACCUM_MISTAKES.values():
        replay = accumulation.run_steps(step, model, batches, max_norm)["params"]
        if accumulation.same(got, replay, atol):
            return said
    return (
        "parameters differ from one clipped step on the whole batch and from every usual "
        "mistake we replayed: run lesson.accumulation_table on your step to see which cases "
        "differ"
    )


def _accum_norm(norm, model, batches, want: float, max_norm: float) -> object:
    """The returned-norm part: the norm before clipping of the whole batch's gradient, as a
    tensor; a wrong number is named only when a replayed step returns it."""
    g = as_float(norm)
    if g is not None and math.isclose(g, want, rel_tol=THRESHOLDS["norm_rtol"].value):
        if isinstance(norm, torch.Tensor):
            return correct("returned norm", True, "the norm before clipping, as a tensor")
        return correct(
            "returned norm",
            False,
            f"the right norm, but a {getattr(norm, 'type_name', type(norm).__name__)}: .item() "
            "each step waits for the device (a host-device sync); return the tensor",
        )
    what = f"you returned {norm!r}" if g is None else f"you returned {g:.4g}"
    what += f"; the whole batch's gradient norm before clipping is {want:.4g}"
    if g is not None and math.isclose(g, max_norm, rel_tol=1e-3):
        return correct("returned norm", False, what + " (yours is the norm AFTER clipping)")
    for step, _, returns in accum_mistakes.ACCUM_MISTAKES.values():
        theirs = as_float(accumulation.run_steps(step, model, batches[:1], max_norm)["norms"][0])
        if g is not None and theirs is not None and math.isclose(g, theirs, rel_tol=1e-4):
            return correct("returned norm", False, f"{what}: yours is {returns}")
    return correct("returned norm", False, what)


@check(
    "08-accum-clip",
    points=2,  # one diagnosis: when the gradient an accumulated step clips is complete
    hint="Reread the colleague's table in section 3: which rows and columns are right, and "
    "what changes between them? Run lesson.accumulation_table on your step: every cell must "
    "show the same step as the whole batch, and the same norm.",
    in_kernel="the largest batch one forward saw (a forward hook beside the learner's step) and "
    "the values its steps read on the host (course_utils.host_reads, a dispatch mode)",
)
def check_accumulated_clipped_step(accumulated_clipped_step):
    """Two accumulated steps (of k, then another number of micro-batches) against two clipped
    steps on the whole batch, with clipping acting and idle; the norm returned; one
    micro-batch per forward. # CHANGED in issue 34: replaces 08-amp-clip (04 exercise 3's
    fault), with the same points; the second step's count differs after the blind round (b),
    where a loss divided by a typed-in 4 passed."""
    rng = specimen_rng()
    seed, k = rng.choice(ACCUM_SEEDS), rng.choice(ACCUM_K)
    model, batches = accumulation.accum_case(seed, seed + 1, k)
    parts, widest, reads = [], 0, 0
    for name, max_norm in [("clipping acts", THRESHOLDS["accum_acts"].value),
                           ("clipping idle", THRESHOLDS["accum_idle"].value)]:  # fmt: skip
        want = expected_whole_batch(seed, seed + 1, k, max_norm)
        seen = observe(accumulated_steps, accumulated_clipped_step, seed, seed + 1, k, max_norm)
        widest, reads = max(widest, int(seen["widest"])), reads + int(seen["host_reads"])
        ok = accumulation.same(seen["params"], want["params"], THRESHOLDS["accum_atol"].value)
        why = (
            f"after two steps, of {k} and {accumulation.second_k(k)} micro-batches, the "
            "parameters equal two clipped steps on the whole batch"
        )
        if not ok:
            why = _accum_mistake(seen["params"], model, batches, max_norm)
        parts.append(correct(f"{name} (max_norm {max_norm:g})", ok, why))
        if name == "clipping acts":
            first_norm, want_norm = seen["norms"][0] if seen["norms"] else None, want["norms"][0]
            norm_case = max_norm
    parts.append(_accum_norm(first_norm, model, batches, float(want_norm), norm_case))
    parts.append(
        correct(
            "no value read on the host",
            reads == 0,
            "your steps read no tensor's value on the host"
            if reads == 0
            else f"your four steps read a tensor's value on the host {reads} times (.item(), "
            "float(), or a Python `if` on a tensor): on a GPU each read waits for the device. "
            "Clip without reading the norm: clip_grad_norm_ scales by a clamped factor",
            value=reads,
            threshold=0,
            better="lower",
        )
    )
    micro = 64 // min(k, accumulation.second_k(k))  # the larger micro-batches
    parts.append(
        correct(
            "one micro-batch per forward",
            widest <= micro,
            f"the largest forward saw {widest} samples; a micro-batch holds {micro}"
            + (
                ""
                if widest <= micro
                else ": the micro-batches exist because the whole batch "
                "does not fit; run the model on one at a time"
            ),
            value=widest,
            threshold=micro,
        )
    )
    return parts
