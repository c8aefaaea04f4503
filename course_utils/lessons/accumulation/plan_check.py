"""Lesson 07's check of exercise 3: a plan (micro-batch, accumulation steps, checkpointing)
that keeps the effective batch, fits each memory budget and runs at the best speed, judged on
the samples/s the learner's plan chose from (timed in the kernel) and on peaks the check
measures itself; and on a made-up probe whose budgets sit exactly on a plan's peak."""

from __future__ import annotations

import torch

from ...checks import check, correct
from ...measure import steady_cpu
from ...probes import Remote, observe, specimen_rng
from . import demo
from .checks import THRESHOLDS
from .planning import EFFECTIVE_BATCH, MadeUpProbe, Measured, budgets, step_peak_bytes
from .probes import divisors, plans_chosen, probe_readings
from .reference import reference_plan

# the probe's blocks are drawn from these widths in the judge (the first in a notebook): the
# plan_speed evidence is a ratio of the same cached measurements, the reference's 1.0 at each
PLAN_WIDTHS = (32, 48)


class _Readings:
    """A probe that answers from measurements: the configurations `plans_chosen` measured in
    the kernel (samples/s), with the peak of each from `peaks` (the judge's own, where the
    check's own probe measured; a stand-in's, which tests pass)."""

    def __init__(self, rows: list, peaks: dict | None = None) -> None:
        self.rows = {}
        for micro, ckpt, peak, speed in rows:
            key = (int(micro), bool(ckpt))
            mine = peaks[key] if peaks is not None else int(peak)
            self.rows[key] = Measured(key[0], key[1], mine, float(speed))

    def __call__(self, micro_batch: int, checkpoint: bool = False) -> Measured:
        return self.rows[int(micro_batch), bool(checkpoint)]


class _Peaks:
    """The judge's own peak bytes of each configuration of the check's probe (planning.Probe's
    workload, measured as it measures them, no timing): deterministic bytes, so what the
    learner's plan read in the kernel is what this reads."""

    def __init__(self, width: int) -> None:
        self.blocks = demo.make_blocks(4, width, dropout=0.0)
        self.width, self.cache = width, {}

    def __call__(self, micro_batch: int, checkpoint: bool = False) -> Measured:
        key = (micro_batch, bool(checkpoint))
        if key not in self.cache:
            x = torch.zeros(micro_batch, self.width, device=next(self.blocks.parameters()).device)
            forward = demo.per_block_forward if checkpoint else demo.plain_forward
            step = demo.train_step(forward, self.blocks, x)
            with steady_cpu():
                peak = step_peak_bytes(step, x.device)
            self.cache[key] = Measured(micro_batch, bool(checkpoint), peak, float("nan"))
        return self.cache[key]


def _judge(name: str, choice, budget: int, probe, effective: int = EFFECTIVE_BATCH) -> object:
    label = f"{name} budget ({budget / 2**20:.2f} MiB)"
    if not (isinstance(choice, tuple | list) and len(choice) == 3):
        return correct(
            label, False, f"expected (micro_batch, accum_steps, checkpoint), got {choice!r}"
        )
    micro, accum, ckpt = choice
    whole = all(isinstance(v, int) and not isinstance(v, bool) for v in (micro, accum))
    if micro * accum == effective and not whole:
        return correct(
            label,
            False,
            f"micro_batch x accum_steps = {micro!r} x {accum!r}: the product is right, but both "
            "are counts, so ints (effective_batch // micro_batch, not /)",
        )
    if not whole or micro * accum != effective:
        return correct(
            label,
            False,
            f"micro_batch x accum_steps = {micro!r} x {accum!r}; it must equal the effective batch "
            f"{effective}, or you change the optimisation, not just the memory",
        )
    got = probe(micro, bool(ckpt))
    if got.peak_bytes > budget:
        return correct(
            label,
            False,
            f"micro-batch {micro}{' checkpointed' if ckpt else ''} peaks at "
            f"{got.peak_bytes / 2**20:.2f} MiB, over the budget: it would run out of memory",
        )
    best_micro, _, best_ckpt = reference_plan(effective, budget, probe)
    best = probe(best_micro, best_ckpt)
    speed = got.samples_per_s / best.samples_per_s
    limit = THRESHOLDS["plan_speed"].value
    return correct(
        label,
        speed >= limit,
        f"({micro} x {accum}, checkpoint={bool(ckpt)}) fits and runs {got.samples_per_s:,.0f} "
        f"samples/s, {speed:.2f} of the best fitting plan (micro-batch {best.micro_batch}, "
        f"checkpoint={best.checkpoint}: {best.samples_per_s:,.0f} samples/s); needed >= {limit}",
        value=speed,
        threshold=limit,
        unit="x",
        better="higher",
    )


@check(
    "07-plan",
    points=1,  # the task spells out the search it asks for (docs/authoring.md: at most 1)
    hint="A plan keeps the effective batch, fits the budget as the probe measures it, and is "
    "the fastest that does: which configurations are candidates at all, and which do you "
    "have to ask the probe about? Reread section 3.",
    in_kernel="the samples/s of each micro-batch configuration, timed by the lesson's Probe "
    "beside the learner's plan (the figures it chose from); the peaks are the judge's own",
)
def check_plan(plan, probe=None):
    if isinstance(probe, Remote):  # a stand-in probe is the tests' (the locked cell has none)
        return [
            correct(
                "probe",
                False,
                "the check measures with its own probe: call lesson.check_plan(plan)",
            )
        ]
    width = specimen_rng().choice(PLAN_WIDTHS)
    if probe is None:
        peaks = _Peaks(width)
        asked = budgets(peaks)
    else:
        rows = observe(probe_readings, probe, [[EFFECTIVE_BATCH // d, False] for d in (1, 2, 4)])
        asked = budgets(_Readings(rows))
    made_up = [kib * 1024 for kib in MadeUpProbe.BUDGETS.values()]
    seen = observe(plans_chosen, plan, probe, list(asked.values()), made_up, width)
    if probe is None:
        keys = [(m, c) for m in divisors(EFFECTIVE_BATCH) for c in (False, True)]
        measured = _Readings(seen["measured"], {k: peaks(*k).peak_bytes for k in keys})
    else:
        measured = _Readings(seen["measured"])
    parts = [
        _judge(name, choice, budget, measured)
        for (name, budget), choice in zip(asked.items(), seen["chosen"], strict=True)
    ]
    effective = MadeUpProbe.EFFECTIVE
    for (name, budget), choice in zip(MadeUpProbe.BUDGETS.items(), seen["made_up"], strict=True):
        parts.append(_judge(name, choice, budget * 1024, MadeUpProbe(), effective))
    return parts
