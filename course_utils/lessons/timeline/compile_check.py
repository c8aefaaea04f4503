"""Exercise 2's check: a compile plan for each job (where to compile, fullgraph, mode).

The job time of each place to compile comes from the measured costs (plans.py); what Dynamo
makes of the model (graph breaks in the whole model and in one block, compiles over calls) the
judge measures itself, afresh, with dynamo.py. A plan passes when its place fits the compile
budget and its job time is within THRESHOLDS["total_slack"] of the best that fits, when it
asks for fullgraph=True exactly where that place compiles to one graph, and when its mode is
one the job's device runs (CUDA graphs need CUDA).
"""

from __future__ import annotations

from collections.abc import Mapping

from ...checks import Part, check, correct
from ...probes import observe, specimen_rng
from . import models
from .dynamo import Graphs, compiles, graphs
from .plans import MODES, SCENARIOS, WHERE, costs, totals
from .probes import compile_chosen
from .thresholds import THRESHOLDS

_FACTS: dict[str, dict] = {}  # habit -> what Dynamo made of it: the same in every run


def facts(habit: str) -> dict:
    """Graph breaks of the whole model and of one block, and compiles over 4 calls of the whole
    model (a 2-block model: the breaks do not depend on depth), measured once a process."""
    if habit not in _FACTS:
        model, (x, _) = models.build(habit, depth=2), models.batch()
        _FACTS[habit] = {
            "whole": graphs(model, x),
            "blocks": graphs(model.blocks[0], x),
            "compiles": compiles(models.build(habit, depth=2), x),
        }
    return _FACTS[habit]


def _as_plan(value) -> tuple[str, bool, str] | str:
    if not isinstance(value, Mapping) or not {"where", "fullgraph", "mode"} <= set(value):
        return f"choose_compile returned {value!r}: return a dict with 'where', 'fullgraph', 'mode'"
    where, fullgraph, mode = value["where"], value["fullgraph"], value["mode"]
    if where not in WHERE or mode not in MODES or not isinstance(fullgraph, bool):
        return (f"where must be one of {WHERE}, fullgraph True or False, mode one of {MODES}; "
                f"got {where!r}, {fullgraph!r}, {mode!r}")  # fmt: skip
    return where, fullgraph, mode


def _region(where: str) -> str:
    return "whole model" if where == "whole" else "block"


def _fullgraph_part(where: str, fullgraph: bool, found: Graphs) -> Part | None:
    if where == "none":
        return None
    if fullgraph and found.breaks:
        return correct("fullgraph", False, (
            f"fullgraph=True raises here: Dynamo ends {found.breaks} graph(s) early in the "
            f"{_region(where)} (measured; first reason: {found.reasons[0][:120]})"))  # fmt: skip
    if not fullgraph and not found.breaks:
        return correct("fullgraph", False, (
            f"the {_region(where)} compiles into one graph (measured: {found.graphs} graph, no "
            "break): fullgraph=True costs nothing there and turns a graph break added later "
            "into an error instead of a silent slowdown"))  # fmt: skip
    return correct(
        "fullgraph", True, f"{'no break' if fullgraph else 'breaks'} in the {_region(where)}"
    )


def _mode_part(mode: str, device: str) -> Part:
    if mode == "reduce-overhead" and device != "cuda":
        return correct("mode", False, (
            "reduce-overhead records CUDA graphs, which need CUDA tensors: on this job's CPU "
            "Inductor skips them (it logs 'skipping cudagraphs due to cpu device') and the mode "
            "buys nothing: say 'default'"))  # fmt: skip
    if mode == "max-autotune":
        return correct("mode", False, (
            "max-autotune benchmarks kernel choices while it compiles, compile time no cost here "
            "includes (the costs were measured with mode='default'): a choice for long GPU runs, "
            "once measured there"))  # fmt: skip
    return correct("mode", True, f"{mode!r} on a {device} job")


def verdict(name: str, steps: int, budget, value) -> list[Part]:
    plan = _as_plan(value)
    if isinstance(plan, str):
        return [correct(name, False, plan)]
    where, fullgraph, mode = plan
    habit = SCENARIOS[name][0]
    job = totals(costs(habit), steps, budget)
    best = min(job, key=job.get)
    spent = costs(habit)[where]["compile_s"]
    head = f"{name} ({steps:,} steps, budget {'none' if budget is None else f'{budget:g} s'})"
    if where not in job:
        parts = [correct(head, False, f"compiling '{where}' took {spent:g} s, over the budget")]
    else:
        slack = THRESHOLDS["total_slack"].value
        ok = job[where] <= (1 + slack) * job[best]
        said = (f"'{where}': the job takes {job[where]:,.0f} s (compile {spent:g} s + steps); "
                f"the best that fits, '{best}': {job[best]:,.0f} s")  # fmt: skip
        if where == "whole" and facts(habit)["compiles"] > facts(habit)["whole"].graphs:
            said += (f" (the whole model compiled {facts(habit)['compiles']} times in 4 calls: "
                     "it recompiles at every call, measured)")  # fmt: skip
        parts = [correct(head, ok, said, value=job[where], threshold=job[best], unit=" s")]
    found = facts(habit)[where] if where != "none" else None
    extra = _fullgraph_part(where, fullgraph, found) if found is not None else None
    return [*parts, *([extra] if extra else []), _mode_part(mode, "cpu")]


@check(
    "14-compile-plan",
    points=2,
    hint="For each job ask: how long does the whole job take with each place to compile, "
    "compile included, and which of those fit its budget? Where you compile, does that code "
    "make one graph (Dynamo can tell you), and does it compile once? Which modes does the "
    "job's device run? Reread section 4.",
)
def check_compile_plan(choose_compile) -> list[Part]:
    rng = specimen_rng()
    parts: list[Part] = []
    for name, (_, steps_choices, budget_choices) in SCENARIOS.items():
        steps, budget = rng.choice(steps_choices), rng.choice(budget_choices)
        value = observe(compile_chosen, choose_compile, name, steps, budget)
        for part in verdict(name, steps, budget, value):
            part.name = part.name if part.name.startswith(name) else f"{name}: {part.name}"
            parts.append(part)
    return parts
