"""Lesson 02b's probes for exercises 2 and 3: the learner's LARS trains lars_specimen's tensors
(02b-trust-ratio), and the learner's rule chooses an optimizer from races built from plain
numbers (02b-optimizer-choice). Each runs beside the learner's code and returns data
(course_utils.probes); the checks (lars_check.py, lars_choice.py) compute what it must be."""

from __future__ import annotations

import math

import torch

from ... import guards
from ...probes import probe
from . import lars_specimen as spec
from .lars_demo import Race

# --- 02b-trust-ratio ---------------------------------------------------------------------------


def run_lars(optimizer_class, defaults: dict = spec.DEFAULTS) -> list[list[torch.Tensor]]:
    """The specimen's weights after each step of `optimizer_class`, each group's LR set before
    each step as a warm-up scheduler sets it. The class runs as the learner's code, whatever
    it is: the lesson's ReferenceLARS, or code calling it, is refused (ReferenceUsed)."""
    params = [torch.nn.Parameter(w.clone()) for w in spec.initial_weights()]
    optimizer = guards._as_learner(optimizer_class)(spec.param_groups(params), **defaults)
    out = []
    for t, grads in enumerate(spec.gradients()):
        for group, settings in zip(optimizer.param_groups, spec.GROUPS, strict=True):
            group["lr"] = settings["lr"] * spec.LR_SCHEDULE[t]
        for p, g in zip(params, grads, strict=True):
            p.grad = g.clone()
        guards._as_learner(optimizer.step)()
        out.append([p.detach().clone() for p in params])
    return out


@probe
def lars_updates(optimizer_class, defaults: dict) -> list[list[torch.Tensor]]:
    """run_lars with the optimizer built with `defaults` (every group overrides them)."""
    return run_lars(optimizer_class, dict(defaults))


# --- 02b-optimizer-choice ------------------------------------------------------------------------

ADAMW = "AdamW, linear scaling + warm-up"
LARS = "LARS (SGD momentum + trust ratio)"
LAMB = "LAMB (Adam + trust ratio)"
INF = math.inf

# name: {optimizer: (steps to the target, spread, best accuracy)}, the races the check asks
# about (the decision each calls for is the check's own, in lars_choice.py). The gaps sit off
# every round boundary (no gap is exactly 10% of AdamW's steps) and one equals the larger
# spread, which is noise.
RACES = {
    "a clear win for LARS": {ADAMW: (60, 4, 0.62), LARS: (30, 3, 0.61), LAMB: (55, 5, 0.61)},
    "a win inside the noise": {ADAMW: (40, 6, 0.61), LARS: (44, 5, 0.60), LAMB: (35, 7, 0.62)},
    "a win inside AdamW's spread only": {
        ADAMW: (50, 8, 0.62),
        LARS: (44, 3, 0.61),
        LAMB: (62, 5, 0.60),
    },
    "a gap equal to the spread": {ADAMW: (50, 5, 0.61), LARS: (58, 6, 0.60), LAMB: (45, 4, 0.62)},
    "AdamW never reached the target": {
        ADAMW: (INF, 0, 0.41),
        LARS: (90, 30, 0.60),
        LAMB: (70, 12, 0.61),
    },
    "nobody reached the target": {
        ADAMW: (INF, 0, 0.52),
        LARS: (INF, 0, 0.55),
        LAMB: (INF, 0, 0.48),
    },
    "the fastest is not the most accurate": {
        ADAMW: (80, 5, 0.66),
        LARS: (120, 10, 0.70),
        LAMB: (50, 4, 0.61),
    },
}


def races_of(scenario: str, scale: int = 1) -> dict[str, Race]:
    """RACES[scenario] as fresh races with a one-point curve, every step count and spread
    `scale` times larger (gaps and spreads grow alike: each race calls for the same decision)."""
    races = {}
    for name, (steps, spread, acc) in RACES[scenario].items():
        steps, spread = steps * scale, spread * scale
        curve = [(1 if math.isinf(steps) else int(steps), acc)]
        races[name] = Race(name, 0.01, steps, spread, curve=curve)
    return races


@probe
def choice_in(choose_optimizer, scenario: str, scale: int = 1):
    """The learner's choice on races_of(scenario, scale), run as the learner's code (the
    reference, given as the answer itself, is refused too)."""
    return guards._as_learner(choose_optimizer)(races_of(scenario, scale))
