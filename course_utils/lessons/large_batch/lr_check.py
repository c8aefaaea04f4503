"""Check 02b-lr-scaling: the learner's scheduler drives an optimizer with two param groups (each
its own initial LR) for several batches and warm-ups, and every step's LR of every group is
compared with Goyal et al.'s two rules. A fault is named only when the rules with that fault
reproduce every LR of the group in every case and no other variant with as few faults does:
the variants combine a scale rule, where the warm-up starts, when the ramp moves and its
shape. The cases tell them apart: k = 4 (a whole number), 1.5 and 2.5, base batches 256 and 64,
warm-ups of 5, 10 and 4 steps.

The learner's scheduler runs in a probe (probes.lr_traces); everything here reads the LRs it
sent and computes the rules' own, so the verdict is the same in a notebook and in the judge.
`factor` computes the rules' LR for any step: it is withheld from the grading kernel
(ANSWERS_ELSEWHERE)."""

from __future__ import annotations

import functools
import itertools
import math
from typing import NamedTuple

from ...checks import check, correct
from ...probes import observe, specimen_rng
from .probes import lr_traces

# (initial LR of each param group, batch, warm-up steps, base batch): k = 4, 1.5 and 2.5, so
# that integer division shows on two cases and not on the third (an unscaled peak shows on all);
# base batch 64 on the last, so that a hard-coded 256 shows; two groups, so that a scheduler
# that reaches the first group only shows
LR_CASES = [((0.1, 0.02), 1024, 5, 256), ((0.05, 0.3), 384, 10, 256), ((0.2, 0.015), 160, 4, 64)]
# each case's initial LRs are drawn per run in the judge (probes.specimen_rng), the first (those
# of LR_CASES) in a notebook: the faults are told apart by the factor over the initial LR, which
# the batches, warm-ups and base batches fix; the groups' LRs differ in every option
LR_GROUP_OPTIONS = [
    ((0.1, 0.02), (0.08, 0.03), (0.12, 0.04)),
    ((0.05, 0.3), (0.04, 0.25), (0.06, 0.2)),
    ((0.2, 0.015), (0.15, 0.01), (0.25, 0.02)),
]
# steps compared after the warm-up, for "then hold it": a cosine decay over 1000 steps moves
# the LR by 6e-5 in 5 steps (within REL_TOL), by 21% in 300; one over 10,000 steps by 0.2%
LR_STEPS_AFTER = 300
REL_TOL = 1e-4  # float rounding of any scheduler's arithmetic is ~1e-15 relative


class Variant(NamedTuple):
    """The two rules with some parts done another way (all "right": the rules themselves)."""

    scale: str = "linear"  # the peak factor: linear k, floor, sqrt, unscaled, base_256
    start: str = "base"  # where the warm-up starts: base LR, zero, base LR / k
    timing: str = "right"  # the ramp: right, ahead (step + 1), behind (step - 1), short, long, none
    shape: str = "linear"  # a constant amount per step, or geometric (a constant factor)

    @property
    def faults(self) -> int:
        return sum(a != b for a, b in zip(self, RULES, strict=True))


RULES = Variant()
VARIANTS = [
    Variant(scale, start, timing, shape)
    for scale, start, timing, shape in itertools.product(
        ("linear", "floor", "sqrt", "unscaled", "base_256"),
        ("base", "zero", "base/k"),
        ("right", "ahead", "behind", "short", "long", "none"),
        ("linear", "geometric"),
    )
    if not (timing == "none" and (start, shape) != ("base", "linear"))
    and not (shape == "geometric" and start == "zero")
]


def factor(v: Variant, t: int, batch: int, base_batch: int, warmup: int) -> float:
    """The LR at step t over the group's initial LR, under variant `v`."""
    k = batch / base_batch
    peak = {
        "linear": k,
        "floor": batch // base_batch,
        "sqrt": math.sqrt(k),
        "unscaled": 1.0,
        "base_256": batch / 256,
    }[v.scale]
    if v.timing == "none":
        return peak
    start = {"base": 1.0, "zero": 0.0, "base/k": 1 / k}[v.start]
    phase = {
        "right": t / warmup,
        "ahead": (t + 1) / warmup,
        "behind": max(t - 1, 0) / warmup,
        "short": t / max(warmup - 1, 1),
        "long": t / (warmup + 1),
    }[v.timing]
    r = min(max(phase, 0.0), 1.0)
    if v.shape == "geometric":
        return start * (peak / start) ** r
    return start + (peak - start) * r


@functools.cache
def _factors(v: Variant, case: int) -> tuple[float, ...]:
    _, batch, warmup, base_batch = LR_CASES[case]
    return tuple(factor(v, t, batch, base_batch, warmup) for t in range(warmup + LR_STEPS_AFTER))


def expected(case: int, cases: list = LR_CASES) -> list[list[float]]:
    """What the two rules give each group at each step of case `case` (of `cases`: LR_CASES,
    their initial LRs perhaps drawn again)."""
    return [[lr * f for f in _factors(RULES, case)] for lr in cases[case][0]]


def drawn_cases() -> list:
    """LR_CASES with each case's initial LRs drawn from LR_GROUP_OPTIONS (specimen_rng)."""
    rng = specimen_rng()
    return [
        (rng.choice(lrs), *case[1:]) for lrs, case in zip(LR_GROUP_OPTIONS, LR_CASES, strict=True)
    ]


def _same(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=1e-12)


def _reproduces(v: Variant, traces: list, group: int, cases: list) -> bool:
    return all(
        all(
            _same(got, lrs[group] * f)
            for got, f in zip(traces[c][group], _factors(v, c), strict=True)
        )
        for c, (lrs, *_) in enumerate(cases)
    )


def variant_of(traces: list, group: int, cases: list = LR_CASES) -> Variant | None:
    """The variant that reproduces the group's LRs in every case, with fewer faults than every
    other that does; None when none does or two with as few faults do."""
    found = [v for v in VARIANTS if _reproduces(v, traces, group, cases)]
    fewest = [v for v in found if v.faults == min((f.faults for f in found), default=0)]
    return fewest[0] if len(fewest) == 1 else None


def _copies_first(traces: list, group: int) -> bool:
    return all(
        all(_same(a, b) for a, b in zip(case[group], case[0], strict=True)) for case in traces
    )


def _example(scale: str) -> str:
    """A case where the scale rule `scale` and the linear rule differ, in numbers."""
    for _, batch, _, base in LR_CASES:
        k = batch / base
        if scale == "floor" and batch % base:
            return f"{batch} // {base} = {batch // base}, but {batch} / {base} = {k:g}"
        if scale == "base_256" and base != 256:
            return f"{batch} / 256 = {batch / 256:g}, but {batch} / {base} = {k:g}"
    return ""


SCALES = {
    "floor": "k rounded down by integer division ({ex}): the peak is the initial LR x that "
    "whole number, where the linear rule multiplies by k = batch / base_batch",
    "sqrt": "sqrt scaling: the peak is the initial LR x sqrt(k); the linear rule multiplies it "
    "by k = batch / base_batch",
    "unscaled": "the LR not scaled by k = batch / base_batch: the peak is the initial LR itself, "
    "so the LR never reaches k x the base LR",
    "base_256": "k computed from a base batch of 256, not from the base_batch argument ({ex})",
}
STARTS = {
    "zero": "the warm-up starts from zero, below the base LR (Goyal et al. start at the base LR)",
    "base/k": "the warm-up starts at the base LR / k, below the base LR (Goyal et al. start at "
    "the base LR)",
}
TIMINGS = {
    "ahead": "the ramp runs one step ahead: step 0 already has the LR the rules give step 1 "
    "(LambdaLR passes 0 to the factor before the first scheduler.step(), so `step + 1` shifts "
    "it), and the peak comes one step early, at step warmup_steps - 1",
    "behind": "the ramp runs one step behind: steps 0 and 1 both have the starting LR, and the "
    "peak comes one step late, at step warmup_steps + 1",
    "short": "the ramp spans warmup_steps - 1 steps: the peak comes one step early, at step "
    "warmup_steps - 1",
    "long": "the ramp spans warmup_steps + 1 steps: the peak comes one step late, at step "
    "warmup_steps + 1",
    "none": "no warm-up: step 0 is already at the peak",
}
GEOMETRIC = (
    "the warm-up rises by a constant factor per step (geometrically); Goyal et al. add a "
    "constant amount per step"
)


def describe(v: Variant) -> str:
    said = []
    if v.scale != "linear":
        said.append(SCALES[v.scale].format(ex=_example(v.scale)))
    if v.start != "base":
        said.append(STARTS[v.start])
    if v.timing != "right":
        said.append(TIMINGS[v.timing])
    if v.shape != "linear":
        said.append(GEOMETRIC)
    return "; and ".join(said)


def _changes(v: Variant) -> str:
    return ("this change: " if v.faults == 1 else "these changes: ") + describe(v)


def explain(traces: list, cases: list = LR_CASES) -> str | None:
    """The faults that reproduce the learner's LRs (traces[case][group][step]), group by
    group, or None when none is confirmed."""
    groups = range(len(traces[0]))
    found = [variant_of(traces, g, cases) for g in groups]
    copies = [g > 0 and _copies_first(traces, g) for g in groups]
    if found[0] is not None and all(v == found[0] for v in found) and found[0] != RULES:
        return f"your LRs in every case are exactly the two rules' with {_changes(found[0])}"
    if not any(copies) and all(v is None for v in found):
        return None
    said = []
    for g in groups:
        if copies[g]:
            said.append(
                f"param group {g} gets param group 0's LR at every step, not its own initial LR "
                "scaled by the rules"
            )
        elif found[g] is None:
            said.append(f"no known fault reproduces param group {g}'s LRs")
        elif found[g] != RULES:
            said.append(f"param group {g}'s LRs are exactly the rules' with {_changes(found[g])}")
    if found[0] == RULES:
        return "only param group 0 follows both rules: " + "; ".join(said)
    return "; ".join(said)


def _measured(got: list[float], want: list[float], warmup: int) -> str:
    """What differs in one group's LRs of one case, in numbers (no cause named)."""
    base, peak = want[0], want[-1]
    said = []
    if not _same(got[0], base):
        said.append(f"at step 0 yours is {got[0]:.4g}, the base LR {base:.4g}")
    if not _same(got[warmup], peak):
        said.append(
            f"at step {warmup}, the first after the warm-up, yours is {got[warmup]:.4g}, the "
            f"rules' peak k x base LR {peak:.4g}"
        )
    after = got[warmup:]
    if not all(_same(x, after[0]) for x in after):
        said.append(
            f"after the warm-up (steps {warmup}-{len(got) - 1}) yours moves between "
            f"{min(after):.4g} and {max(after):.4g}; the rules hold {peak:.4g}"
        )
    if not said:
        said.append(
            "your start and peak are right, the steps between are not: the rules raise the LR "
            "by the same amount, (k - 1) x base LR / warmup_steps, at every warm-up step"
        )
    return (
        " (no known fault, nor a combination of them, reproduces your LRs in every case: "
        + "; ".join(said)
        + "; compare with section 1's two rules)"
    )


@check(
    "02b-lr-scaling",
    points=2,
    hint="Print lesson.lr_per_step(your_schedule, (0.1, 0.02), b, 10, 14) (two param groups) for "
    "a few batches and read it against section 1's two rules: the LR at step 0, the peak for a "
    "batch that is not a whole number of base batches, the step at which the peak is first "
    "reached, and every param group.",
    in_kernel="the LR of each param group at each step is read off the optimizer that the "
    "learner's scheduler drives, beside it (demo.lr_per_step)",
)
def check_lr_schedule(make_schedule) -> list:
    parts, traces, first = [], [], None
    cases = drawn_cases()
    for c, (lrs, batch, warmup, base_batch) in enumerate(cases):
        steps = warmup + LR_STEPS_AFTER
        got = observe(lr_traces, make_schedule, list(lrs), batch, warmup, steps, base_batch)
        want = expected(c, cases)
        traces.append(got)
        what = (
            f"B={batch} over base {base_batch}, initial LRs "
            + " and ".join(f"{x:g}" for x in lrs)
            + f", {warmup} warm-up steps"
        )
        bad = [
            (
                g,
                next(
                    (t for t, (a, b) in enumerate(zip(mine, rule, strict=True)) if not _same(a, b)),
                    None,
                ),
            )
            for g, (mine, rule) in enumerate(zip(got, want, strict=True))
        ]
        wrong = [(g, t) for g, t in bad if t is not None]
        if not wrong:
            parts.append(correct(what, True, f"LR per step {_fmt(got[0])} as expected"))
            continue
        g, t = wrong[0]
        where = f"param group {g}, " if g else ""
        when = f"in the warm-up, steps 0-{warmup - 1}" if t < warmup else "after the warm-up"
        msg = f"{where}step {t} ({when}): LR {_pair(got[g][t], want[g][t])}; yours {_fmt(got[g])}"
        first = (len(parts), g, c) if first is None else first
        parts.append(correct(what, False, msg))
    if first is not None:
        i, g, c = first
        why = explain(traces, cases)
        warmup = cases[c][2]
        parts[i].message += (
            f" ({why})" if why else _measured(traces[c][g], expected(c, cases)[g], warmup)
        )
    return parts


def _pair(got: float, want: float) -> str:
    """'x, expected y' with as many digits as it takes to show them differ (up to 9)."""
    digits = next((d for d in range(4, 10) if f"{got:.{d}g}" != f"{want:.{d}g}"), 9)
    return f"{got:.{digits}g}, expected {want:.{digits}g}"


def _fmt(lrs: list[float], head: int = 12) -> str:
    shown = [f"{v:.3g}" for v in lrs[:head]]
    if len(lrs) > head:
        shown += [f"... ({len(lrs)} steps)", f"{lrs[-1]:.3g}"]
    return "[" + ", ".join(shown) + "]"
