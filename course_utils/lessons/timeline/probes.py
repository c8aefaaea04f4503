"""Lesson 14's probes: each runs the learner's answer beside the learner's code, on a specimen
it is given as plain data (traces the judge recorded) or builds from plain arguments (a
scenario's name, steps and budget), and returns what the answer said as data
(course_utils.probes). The checks decide."""

from __future__ import annotations

from ...probes import probe
from .plans import scenario


@probe
def stall_named(find_stall, traces: list) -> object:
    """What the learner's find_stall says of a run's traces (one per rank)."""
    return find_stall(traces)


@probe
def compile_chosen(choose_compile, name: str, steps: int, budget) -> object:
    """What the learner's choose_compile returns for a scenario built from its name."""
    return choose_compile(scenario(name, steps, budget))
