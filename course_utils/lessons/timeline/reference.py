"""Lesson 14's reference answers: what the checks accept, and what demos use in learner copies
where an exercise is not written yet. Verified by tests/test_lesson_14.py against the stalls
planted in the recorded loops (exercise 1) and the measured costs (exercise 2)."""

from __future__ import annotations

from ...checks import reference
from .attribution import stall_of
from .dynamo import graphs
from .plans import totals


@reference
def reference_find_stall(traces: list[dict]) -> dict:
    """Exercise 1: split every phase of every rank into data, host, compute and communication
    time (attribution.breakdown); a rank's wait in a collective counts only as long as every
    rank waits there; name the largest."""
    return stall_of(traces)


@reference
def reference_choose_compile(scenario) -> dict:
    """Exercise 2: the place with the least time for the whole job that fits the compile
    budget; fullgraph=True where that place compiles to one graph (measured); the default
    mode on a CPU (CUDA graphs need CUDA; the costs were measured with it)."""
    options = totals(scenario.costs, scenario.steps, scenario.compile_budget_s)
    where = min(options, key=options.get)
    x = scenario.batch[0]
    if where == "whole":
        fullgraph = graphs(scenario.model, x).breaks == 0
    elif where == "blocks":
        fullgraph = graphs(scenario.model.blocks[0], x).breaks == 0
    else:
        fullgraph = False
    return {"where": where, "fullgraph": fullgraph, "mode": "default"}
