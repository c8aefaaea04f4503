"""Lesson 15's probes: each runs the learner's answer beside the learner's code on a specimen it
builds from plain fields (specimens.py) and returns what it saw as data; the checks measure and
compare in the judge."""

from __future__ import annotations

import inspect

import torch

from ...probes import probe
from .float8 import specimen
from .levers import step_levers, wrapper
from .model import Size
from .plans import matmuls_saved
from .policies import recording


@probe
def policy_decisions(policy, fields: dict, seed: int) -> list:
    """The decisions the learner's policy gave, region by region, on one step of the GPT of
    `fields` under selective checkpointing: [[operator, decision name], ...] per block."""
    if inspect.unwrap(policy) is matmuls_saved:  # the answer the harness keeps for measure_plan
        return [[["the lesson's own policy (plans.matmuls_saved)", "invalid: not yours"]]]
    regions: list = []
    step_levers(Size(**fields), wrapper("selective", recording(policy, regions)), seed)
    return regions


@probe
def float8_round_trips(to_float8, cases: dict, seed: int) -> dict:
    """{case: {"dtype": the learner's float8 dtype, "round_trip": x_fp8.float() * scale}} for
    each case's tensor; a returned value that is not a pair of tensors, as its type's name."""
    out = {}
    for name, case in cases.items():
        got = to_float8(specimen(case, seed))
        if not (isinstance(got, tuple | list) and len(got) == 2):
            out[name] = {"returned": type(got).__name__}
            continue
        q, scale = got
        if not isinstance(q, torch.Tensor):
            out[name] = {"returned": f"({type(q).__name__}, ...)"}
            continue
        scale = torch.as_tensor(scale, dtype=torch.float32)
        try:
            out[name] = {"dtype": str(q.dtype), "round_trip": q.float() * scale.float()}
        except RuntimeError as exc:  # the pair does not broadcast: the check says why
            first = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
            out[name] = {"round_trip_raised": first, "scale_shape": list(scale.shape)}
    return out


@probe
def chosen_plans(plan_for, asked: dict) -> dict:
    """{scenario: the plan the learner's plan_for(budget, pcie) returned, or {"error": ...}
    where it raised a ValueError or returned no dict}."""
    out = {}
    for name, (budget, pcie) in asked.items():
        plan = plan_for(budget, pcie)
        out[name] = plan if isinstance(plan, dict) else {"error": f"returned {type(plan).__name__}"}
    return out
