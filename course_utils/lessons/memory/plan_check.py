"""Exercise 2's check: the learner's plan for each memory budget, measured in the judge
(plans.measure_plan) and compared with the best plan that fits, found by measuring every plan.

A budget is given in bytes as a fraction of what the plain step holds (and a PCIe allowance as
a fraction of what it saves); each fraction sits at least 0.025 away from every plan's measured
fraction, so no plan fits or fails by rounding."""

from __future__ import annotations

from ...checks import Part, check, correct
from ...probes import observe, specimen_rng
from .plans import cost, every_plan, measure_plan
from .probes import chosen_plans

# (budget, PCIe allowance) as fractions of the plain step's held bytes; two sets the judge
# draws from, the first the notebook's. Measured fractions (tests/test_lesson_15.py): none
# 1.0, 0.5, 0.25; selective 0.736, 0.368, 0.184; full 0.211, 0.105, 0.053 at 1, 2, 4
# micro-batches; offload 0.0 on the device and 1.001 over PCIe.
# F (added after the blind round): room for the plain step and PCIe for offload, so a plan that
# offloads whenever it may fails ("then no offload").
SCENARIOS = (
    {"A": (0.8, 0.0), "B": (0.45, 0.0), "C": (0.45, 1.2), "D": (0.3, 0.0), "E": (0.15, 0.0),
     "F": (1.1, 1.2)},
    {"A": (0.78, 0.5), "B": (0.42, 0.9), "C": (0.3, 1.1), "D": (0.28, 0.0), "E": (0.13, 0.0),
     "F": (1.05, 1.1)},
)  # fmt: skip


def _describe(plan: dict) -> str:
    offload = ", offload" if plan["offload"] else ""
    return (
        f"{plan['checkpointing']} checkpointing, {plan['micro_batches']} micro-batch(es){offload}"
    )


def _best_plans(budget: int, pcie: int) -> tuple[tuple, list[dict]]:
    """The cost of the cheapest plans that fit, and those plans."""
    fitting = []
    for plan in every_plan():
        got = measure_plan(plan)
        if got["held"] <= budget and got["offloaded"] <= pcie:
            fitting.append((cost(plan, got), plan))
    least = min(c for c, _ in fitting)
    return least, [p for c, p in fitting if c == least]


def _part(name: str, budget: int, pcie: int, plan) -> Part:
    if isinstance(plan, dict) and "error" in plan:
        return correct(name, False, f"plan_for raised {plan['error']}")
    try:
        got = measure_plan(plan)
    except ValueError as exc:
        return correct(name, False, str(exc))
    least, best = _best_plans(budget, pcie)
    said = (
        f"budget {budget / 2**20:.2f} MiB, PCIe {pcie / 2**20:.2f} MiB per step: your plan "
        f"({_describe(plan)}) holds {got['held'] / 2**20:.2f} MiB, offloads "
        f"{got['offloaded'] / 2**20:.2f} MiB, recomputes {got['recomputed'] / 1e6:.1f} MFLOP"
    )
    if got["held"] > budget or got["offloaded"] > pcie:
        return correct(name, False, said + ": it does not fit")
    if cost(plan, got) != least:
        said += f"; {_describe(best[0])} fits with {least[0] / 1e6:.1f} MFLOP recomputed"
        return correct(name, False, said)
    return correct(name, True, said)


@check(
    "15-memory-plan",
    points=1,  # the task states the cost order and measure_plan measures every plan: a search
    # (docs/authoring.md: at most 1)
    hint="For each budget, list the plans that fit (measure them with lesson.measure_plan), "
    "then order them: recomputed FLOPs first, then micro-batches, then offload.",
)
def check_memory_plan(plan_for) -> list[Part]:
    scenarios = specimen_rng().choice(SCENARIOS)
    plain = measure_plan({"checkpointing": "none", "micro_batches": 1, "offload": False})["held"]
    asked = {n: (int(b * plain), int(p * plain)) for n, (b, p) in scenarios.items()}
    plans = observe(chosen_plans, plan_for, asked)
    return [_part(f"budget {n}", *asked[n], plans.get(n)) for n in asked]
