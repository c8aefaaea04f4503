"""Lesson 13's checks: exercise 1 (predict what each rank holds) and exercise 2 (choose the
plan for a device). Exercise 3's (a learner's fully_shard, trained on 2 processes) is in
shard_check.py; the scenarios of exercise 2 and their measurements in plans.py.

Both measure with the real DDP, ZeroRedundancyOptimizer and FSDP2 code: what a rank holds
and its peak come from a pretend world in this process (sharding.fake_world: the same code,
collectives that send nothing), times and all-gathers from a real launch on 2 processes, all
run by the check itself (the judge's own under `course grade`); the learner's function is
asked only through probes (probes.py), on models built from plain arguments.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Mapping

from ...checks import Part, at_most, check, correct, not_applicable
from ...model_runs import ran_part
from ...probes import observe, specimen_rng
from . import specimens
from .diagnose import named_cause, variants
from .model import STRATEGIES
from .options import PLANS, plan_name
from .peak import cpu_counter_reason
from .plans import SCENARIOS, budget, needs, start_timing, timings
from .probes import chosen_plan, predictions, spec_data
from .thresholds import THRESHOLDS


def _close(predicted: float, measured: float) -> bool:
    """Equal as byte counts (whole numbers: the slack is only for float arithmetic)."""
    return abs(predicted - measured) <= THRESHOLDS["bytes_atol"].value


def _off_by(predicted: float, truth: float) -> str:
    """How far off, as a ratio, or in bytes where the ratio rounds to 1."""
    if truth and abs(predicted / truth - 1) >= 0.01:
        return f" ({predicted / truth:.3g}x)"
    return f" ({predicted - truth:+,.0f} B)"


def _as_prediction(value, where: str) -> dict[str, float]:
    if not isinstance(value, Mapping) or set(specimens.KINDS) - set(value):
        raise TypeError(
            f"predict_bytes returned {type(value).__name__} for {where}: return a dict with "
            f"the keys {', '.join(specimens.KINDS)} (bytes)"
        )
    out = {k: float(value[k]) for k in specimens.KINDS}
    if not all(math.isfinite(v) for v in out.values()):
        raise ValueError(f"predict_bytes returned a non-finite number for {where}: {out}")
    return out


_MEASURED: dict = {}  # what each specimen holds does not depend on the learner: once a process


def measured_specimens(cases=specimens.CASES) -> dict:
    """(case name, strategy) -> kind -> bytes on the fullest rank, for `cases` (pretend
    worlds, in this process: the judge's own under `course grade`)."""
    todo = [case for case in cases if case not in _MEASURED]
    if todo:
        print("measuring what each rank holds on the check's models (pretend worlds) ...")
        for case in todo:
            _MEASURED[case] = specimens.measure([case])
    return {key: kinds for case in cases for key, kinds in _MEASURED[case].items()}


@check(
    "13-predict-bytes",
    points=2,
    hint="Reread section 2 for what each strategy keeps whole and what it splits, then ask, "
    "for each tensor: does every rank get the same share when its rows do not divide by the "
    "world? Does a frozen parameter have a gradient or optimizer state? Which rank ends up "
    "with the most? Try your function on lesson.Spec models with odd shapes.",
    in_kernel="the matrix multiplies the learner's prediction dispatched, counted by a "
    "dispatch mode beside it (course_utils.model_runs)",
)
def check_predict(predict_bytes) -> list[Part]:
    cases = specimens.drawn(specimen_rng())
    asked = []
    for case in cases:  # an unwritten answer raises at the first, before any measuring
        asked.append(
            observe(predictions, predict_bytes, spec_data(case.spec), case.world, case.optimizer)
        )
    ran = Counter()
    for answer in asked:
        ran.update(answer["ran"])
    predicted = [answer["predicted"] for answer in asked]
    return [*_judge_predictions(cases, predicted, measured_specimens(cases)), ran_part(ran)]


def _judge_predictions(cases, asked: list[dict], measured: dict) -> list[Part]:
    parts = []
    for case, predicted in zip(cases, asked, strict=True):
        wrong = []
        for strategy in STRATEGIES:
            where = f"{strategy} on {case.name}"
            got = _as_prediction(predicted.get(strategy), where)
            causes = variants(measured, case, strategy)
            for kind in specimens.KINDS:
                truth = measured[case.name, strategy][kind]
                if not _close(got[kind], truth):
                    cause = named_cause(kind, got[kind], truth, causes, _close)
                    ratio = _off_by(got[kind], truth)
                    wrong.append(
                        f"{strategy} {kind}: measured {truth:,.0f} B on the fullest rank, "
                        f"predicted {got[kind]:,.0f} B{ratio}"
                        + (f": your number is what {cause} gives" if cause else "")
                    )
        message = (
            "all 9 figures equal to the measured bytes"
            if not wrong
            else "; ".join(wrong[:4]) + (f"; and {len(wrong) - 4} more" if len(wrong) > 4 else "")
        )
        parts.append(correct(case.name, not wrong, message))
    return parts


@check(
    "13-choose-plan",
    points=2,
    hint="For each plan ask two questions, in this order: does it fit on every rank, the "
    "fullest one included, with the activations and the transient buffers of a step (section "
    "4 measured them: lesson.fake_peak measures them for any model)? Of those that fit, which "
    "costs the least communication per step (section 4's times and all-gather counts)?",
)
def check_plan(choose_plan) -> list[Part]:
    return _judge_plans(choose_plan)


# --- exercise 2's verdicts -------------------------------------------------------------------


def _as_plan(choice, name: str) -> str:
    if not (isinstance(choice, tuple | list) and len(choice) == 2) or choice[0] not in STRATEGIES:
        raise TypeError(
            f"choose_plan returned {choice!r} for '{name}': return (strategy, reshard) with "
            f"strategy one of {STRATEGIES} and reshard True or False"
        )
    return plan_name(choice[0], bool(choice[1]))


def _mib(b: float) -> str:
    return f"{b / 2**20:.2f} MiB"


# where every plan fits, the device holds this many times the hungriest need (drawn in the
# judge, the first in a notebook): any room above 1 keeps every plan fitting
ROOMS = (1.0, 1.4, 2.0)


def _judge_plans(choose_plan) -> list[Part]:
    if cpu_counter_reason():  # the needs are measured on the CPU's allocator
        return [not_applicable("every scenario", cpu_counter_reason())]
    # an unwritten answer raises here, before anything is measured
    observe(chosen_plan, choose_plan, SCENARIOS[0][1], 2**40)
    # the times come from other processes: measure the peaks here meanwhile (the verdicts
    # rest on gaps of 1.25x and more, which interleaved rounds keep beside this work)
    running = start_timing()
    try:
        for _, model, _ in SCENARIOS:
            needs(model)
    except BaseException:
        if running is not None:
            running.kill()
        raise
    times = timings(running)
    room = specimen_rng().choice(ROOMS)
    parts = []
    for name, model, (fits, not_fits) in SCENARIOS:
        device = budget(model, fits, not_fits, room=room, scenario=name)
        if device is None:
            parts.append(correct(name, True, "not decidable here: the plans' needs are too close"))
            continue
        choice = observe(chosen_plan, choose_plan, model, int(device), name)
        plan = _as_plan(choice, name)
        parts.append(_verdict(name, plan, needs(model), times[model], device))
    return parts


def _ratio(mine: list[float], other: list[float]) -> float:
    return statistics.median(a / b for a, b in zip(mine, other, strict=True))


def _verdict(name: str, plan: str, need: dict, times: dict, device: float) -> Part:
    """Fits, then the fastest: FSDP2's two variants do the same work but for the all-gathers
    resharding repeats, so between them the count decides (their times differ by less than
    this machine's noise); between strategies, the measured time."""
    head = f"device {_mib(device)} per rank; {plan} needs {_mib(need[plan])} on its fullest rank"
    fitting = [p for p in PLANS if need[p] <= device]
    if plan not in fitting:
        return correct(name, False, f"{head}: it does not fit")
    if plan == "FSDP2, reshard" and "FSDP2, keep" in fitting:
        extra = times[plan]["gathers"] - times["FSDP2, keep"]["gathers"]
        return correct(
            name,
            False,
            f"{head}; keeping the gathered parameters (reshard_after_forward=False) fits too, "
            f"and resharding all-gathers {extra} more time{'s' if extra != 1 else ''} per step "
            "(counted)",
        )
    rivals = [p for p in fitting if PLANS[p][0] != PLANS[plan][0]]
    rivals = [p for p in rivals if p != "FSDP2, reshard" or "FSDP2, keep" not in fitting]
    if rivals:
        fastest = min(rivals, key=lambda p: _ratio(times[p]["seconds"], times[plan]["seconds"]))
        slower = _ratio(times[plan]["seconds"], times[fastest]["seconds"])
        if slower > THRESHOLDS["slower"].value:  # not graded where no timing is (at_most)
            rounds = len(times[plan]["seconds"])
            what = f"{head}; {fastest} fits too: your step's time / its (median of {rounds} rounds)"
            return at_most(name, slower, THRESHOLDS["slower"].value, what, unit="x", timed=True)
    return correct(name, True, f"{head}: it fits, and no plan that fits is measurably faster")
