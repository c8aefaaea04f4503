"""Lesson 18's speed-run check: the learner's run must reach the target validation loss, without
reading the validation text, clearly faster than the course's baseline.

Where each part runs, as in lesson 11's capstone: the learner's run in the learner's kernel,
watched there (probes.speedrun_watched); the baseline, the validation text and every decision
here (the judge, under `course grade`). Each call gets the training text under a byte cipher
drawn per call, and its model is scored on the validation documents under its own cipher and
under others (the plain text, earlier calls'): it must do best under its own.

Timing: after a warm-up on both sides, pairs() interleaved pairs (the learner's whole run and
the baseline, the order alternating), graded on the median of the pair ratios (baseline / yours).
The baseline side times BASELINE_SHARE of its steps per pair, projected to its whole run (every
step is the same work: rows x row_len slots). On a CPU both sides run on one thread in CPU
seconds (steady beside other work: lesson 11's evidence); on a GPU synchronised wall time, read
on this side's clock around the probe.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict

from ...checks import Threshold, at_least, check, correct
from ...device import device_class, get_device
from ...errors import HeldOutUsed
from ...measure import steady_cpu
from ...mode import pick
from ...probes import observe, observe_timed, specimen_rng
from . import rules
from .probes import kernel_warm_up, speedrun_watched
from .recipe import baseline, fit, target
from .text import TrainText, validation_docs

PAIRS, FULL_PAIRS = 3, 1
BASELINE_SHARE = 0.1  # of the baseline's steps, timed per pair (two segments)
KEY_BASE = 1_000  # ciphers are drawn from seeds above it (0 is the plain text)


def pairs() -> int:
    return pick(quick=PAIRS, full=FULL_PAIRS)


THRESHOLDS = {
    # baseline time / learner time, median of 3 pairs, one thread per side, CPU seconds. The
    # reference recipe reads ~2.2x here and the unchanged baseline ~1x: 1.5 sits between.
    "cpu": Threshold(1.5, "the cpu-bf16 margin; the reference recipe runs fp32 on both classes"),
    "cpu-bf16": Threshold(
        1.5,
        "the reference recipe through the whole check, quick mode, 2-core cpu-bf16 machine "
        "beside other sessions' tests (load 3-4, the lead's suite and another helper: at least "
        "one busy process throughout), 2026-12-07, n=1 run of 3 pairs: ratios 2.21, 2.28, "
        "2.20 (median 2.21x), validation loss 1.397/1.406/1.401 against the 1.45 target. The "
        "unchanged baseline through the same check, same day and load: 0.98, 1.04, 1.03 "
        "(median 1.03x), loss 1.409. Not yet repeated 10 times with scripts/busy_benchmark.py "
        "(its --check covers lesson 11 only)",
        measured_on=("cpu-bf16",),
    ),
    "mps": Threshold(1.5, "not measured on MPS; the CPU margin"),
    "cuda": Threshold(1.5, "not measured on a GPU yet: an estimate (the CPU margin)"),
    "cuda-tensorcore": Threshold(
        1.5, "not measured on a GPU yet: an estimate (the CPU margin; bf16 only adds to it)"
    ),
}

HINT = (
    "Read which part failed. Loss: does your run train enough tokens, at a rate and schedule "
    "that suit its batch? Time: where does it spend it: padding, attention, the optimizer, "
    "many small steps? Never read the validation text, and return the trained model."
)


def _keys(rng, n: int) -> list[int]:
    """Each call's cipher seed, distinct, never 0 (the plain text)."""
    offset = rng.choice(range(10_000))
    return [KEY_BASE + offset * 10 + i for i in range(n)]


def _baseline_seconds(key: int, seed: int) -> tuple[float, float, int]:
    """(wall, CPU seconds, slots) of the whole baseline, projected from BASELINE_SHARE of its
    steps timed in two segments, on the same ciphered text the learner's call got."""
    recipe = baseline()
    timed = 2 * max(1, round(BASELINE_SHARE * recipe.steps / 2))
    run = fit(recipe, TrainText(key), seed, max_steps=timed, segment_steps=timed // 2)
    return run.projected(recipe.steps, "wall"), run.projected(recipe.steps, "cpu"), recipe.slots()


def _warm_up() -> None:
    fit(baseline(), TrainText(0), max_steps=3)


def _slower(seen: dict, base: tuple, clock: int) -> str:
    """Which measured part kept the run from a speed-up: time = token slots / slots per second,
    so the ratio is (the baseline's slots / yours) x (your rate / the baseline's)."""
    slots, base_slots = seen["slots"]["slots"], base[2]
    secs = seen["cpu"] if clock else seen["wall"]
    rate, base_rate = slots / secs, base_slots / base[clock]
    fewer, faster = base_slots / max(slots, 1), rate / base_rate
    why = []
    if fewer <= 1:
        why.append(f"it trained {slots:,} token slots, no fewer than the baseline's {base_slots:,}")
    if faster < 1.1:
        why.append(
            f"each slot ran at {rate:,.0f} slots/s against the baseline's {base_rate:,.0f}: "
            "no cheaper"
        )
    return f"ratio = fewer slots {fewer:.2f}x times faster slots {faster:.2f}x; " + (
        "; ".join(why) or "both help, too little"
    )


@check(
    "18-speedrun",
    points=4,
    hint=HINT,
    in_kernel="on a CPU, the learner's run timed in CPU seconds of its kernel; the run's "
    "watches (modules built, weights' sources, token slots of its training losses, validation "
    "reads); the returned model's validation loss under each cipher the check names",
)
def check_speedrun(speedrun, my_recipe):
    recipe = rules.learner_recipe(my_recipe)
    if isinstance(recipe, list):
        return recipe
    threshold = THRESHOLDS[device_class()]
    rng = specimen_rng()
    keys = _keys(rng, pairs())
    val = validation_docs()
    ratios, losses, slower, clock = [], [], [], int(get_device().type == "cpu")
    with steady_cpu(1):
        observe(kernel_warm_up, speedrun, asdict(recipe))
        _warm_up()
        for i, key in enumerate(keys):
            if i % 2:
                base = _baseline_seconds(key, seed=i)
            others = [0, *keys[:i]]
            seen, elapsed = observe_timed(speedrun_watched, speedrun, key, val, [key, *others])
            if seen["held_out"] is not None:
                raise HeldOutUsed(
                    f"the validation text, through {seen['held_out']}",
                    data="documents",
                    train="the training text",
                    split="validation split",
                )
            if broken := rules.returned_model(seen):
                return broken
            if broken := rules.declared_budget(seen, recipe.slots(), i):
                return broken
            if seen["nll_raised"] is not None:
                rules.reraise(seen["nll_raised"])
            if broken := rules.learned_given_text(seen, key, others, i):
                return broken
            losses.append(rules.loss_of(seen, key))
            if not i % 2:
                base = _baseline_seconds(key, seed=i)
            on_cpu = clock and not seen["children_left"]
            ratios.append(base[1] / seen["cpu"] if on_cpu else base[0] / elapsed)
            slower.append(_slower(seen, base, int(on_cpu)))
    ratio, loss = statistics.median(ratios), statistics.median(losses)
    median_run = sorted(range(len(ratios)), key=ratios.__getitem__)[len(ratios) // 2]
    what = (
        f"baseline time / yours, median of {len(ratios)} interleaved pairs on {device_class()} "
        f"({', '.join(f'{r:.2f}' for r in ratios)})"
    )
    time_part = at_least("time to target", ratio, threshold.value, what)
    if time_part.status == "failed":
        time_part.message += f"; slower than needed: {slower[median_run]}"
    return [
        correct(
            "validation loss",
            loss <= target(),
            f"the median of your {len(losses)} runs' models scores {loss:.3f} nats/byte "
            f"({', '.join(f'{v:.3f}' for v in losses)}) on the validation text, ciphered as "
            f"each run's training text; the target is {target():.2f}",
            value=loss,
            threshold=target(),
            better="lower",
        ),
        time_part,
    ]
