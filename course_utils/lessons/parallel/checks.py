"""Lesson 16's check of exercise 1 (predict the collectives of a tensor-parallel layout), and
the lesson's THRESHOLDS (thresholds.py). Exercise 2's check is in plan_check.py, exercise 3's
in shard_check.py.

The truth is counted, not computed: the real `parallelize_module` runs each layout for one
training step on a pretend world in the check's own process (the judge's under `course
grade`), and CommDebugMode counts every collective and its size (layouts.measured_comms). The
learner's function is asked only through a probe, on Layouts built from plain fields.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from ...checks import Part, check, correct
from ...model_runs import ran_part
from ...probes import observe, specimen_rng
from .comms import KINDS
from .layouts import drawn, measured_comms, normalised, variants
from .probes import predictions
from .thresholds import THRESHOLDS

PHASES = ("forward", "backward")


def _as_prediction(value, case: str) -> dict[str, dict[str, tuple[float, float]]]:
    """The learner's return value as {phase: {kind: (calls, bytes)}}, or TypeError saying
    the shape expected."""
    shape = (
        'return {"forward": {kind: (calls, bytes)}, "backward": {...}}, kinds among '
        f"{', '.join(KINDS)}"
    )
    if not isinstance(value, Mapping) or set(value) - set(PHASES):
        raise TypeError(f"predict_comms returned {type(value).__name__} for '{case}': {shape}")
    out = {}
    for phase in PHASES:
        kinds = value.get(phase) or {}
        if not isinstance(kinds, Mapping) or set(kinds) - set(KINDS):
            raise TypeError(f"predict_comms gave {phase} {kinds!r} for '{case}': {shape}")
        out[phase] = {}
        for kind in KINDS:
            pair = kinds.get(kind, (0, 0))
            if not (isinstance(pair, (list, tuple)) and len(pair) == 2):
                raise TypeError(
                    f"predict_comms gave {phase} {kind} {pair!r} for '{case}': (calls, bytes)"
                )
            calls, size = float(pair[0]), float(pair[1])
            if not (math.isfinite(calls) and math.isfinite(size)):
                raise ValueError(f"predict_comms gave a non-finite number for '{case}'")
            out[phase][kind] = (calls, size)
    return out


def _equal(a: dict, b: dict) -> bool:
    slack = THRESHOLDS["bytes_atol"].value
    return all(abs(a[p][k][i] - b[p][k][i]) <= slack for p in PHASES for k in KINDS for i in (0, 1))


def _said(counts: dict) -> str:
    """'2 all_reduce, 1,536 B' per phase, or 'nothing'."""
    parts = [f"{int(c)} {k}, {int(b):,} B" for k, (c, b) in counts.items() if c or b]
    return "; ".join(parts) or "nothing"


@check(
    "16-predict-comms",
    points=2,
    hint="For every collective a layout issues in forward, ask what its gradient needs in "
    "backward (sections 1 and 3: Megatron's f and g), and where no gradient is needed at all. "
    "Count bytes of the whole tensor in its own dtype. Compare your function with "
    "lesson.measured_comms on layouts of your own.",
    in_kernel="the matrix multiplies the learner's prediction dispatched, counted by a "
    "dispatch mode beside it (course_utils.model_runs)",
)
def check_predict_comms(predict_comms) -> list[Part]:
    cases = drawn(specimen_rng())
    answer = observe(predictions, predict_comms, [layout.to_dict() for layout in cases.values()])
    asked = answer["predicted"]
    if not isinstance(asked, list) or len(asked) != len(cases):
        raise TypeError("predictions came back in another shape than one per layout")
    print(f"counting the collectives of {len(cases)} layouts on a pretend world ...", flush=True)
    parts = []
    for (name, layout), value in zip(cases.items(), asked, strict=True):
        got = _as_prediction(value, name)
        truth = normalised(measured_comms(layout))
        parts.append(_verdict(name, layout, got, truth))
    return [*parts, ran_part(answer["ran"])]


def _verdict(name: str, layout, got: dict, truth: dict) -> Part:
    if _equal(got, truth):
        return correct(name, True, f"{layout}: every count and size as counted")
    wrong = [
        f"{phase}: counted {_said(truth[phase])}; you predicted {_said(got[phase])}"
        for phase in PHASES
        if not all(
            abs(got[phase][k][i] - truth[phase][k][i]) <= THRESHOLDS["bytes_atol"].value
            for k in KINDS
            for i in (0, 1)
        )
    ]
    causes = [c for c, v in variants(layout, truth).items() if v != truth and _equal(got, v)]
    said = f"{layout}. " + "; ".join(wrong)
    if len(causes) == 1:
        said += f". Your numbers are exactly what this mistake gives: {causes[0]}"
    elif causes:  # on 2 ranks a shard and a ring's share are the same half: both are named
        said += ". Your numbers are exactly what each of these mistakes gives: " + "; or ".join(
            causes
        )
    else:
        said += ". Reread section 1 (Megatron's f and g) and section 3 (sequence parallel)"
    return correct(name, False, said)
