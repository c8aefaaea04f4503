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


def races_of(table: dict) -> dict[str, Race]:
    """{optimizer: (steps to the target, spread, best accuracy)} (as lars_races draws it) as
    fresh races with a one-point curve."""
    races = {}
    for name, (steps, spread, acc) in table.items():
        curve = [(1 if math.isinf(steps) else int(steps), acc)]
        races[name] = Race(name, 0.01, steps, spread, curve=curve)
    return races


@probe
def choice_in(choose_optimizer, table: dict):
    """The learner's choice on races_of(table), run as the learner's code (the reference,
    given as the answer itself, is refused too)."""
    return guards._as_learner(choose_optimizer)(races_of(table))
