"""What each lever of a recipe is worth here: the recipe with one lever at a time put back to
the baseline's choice, timed as the check times (CPU seconds on one thread on a CPU,
synchronised wall time on a GPU), the variants interleaved segment by segment (the order
reversed every other round), as lesson 11's ablation.

A lever's worth is the variant's seconds per *real* token (a target that carries loss) over the
recipe's: time to target is the tokens a run needs times the seconds each costs, and undoing
attention, packing, the optimizer's kernels, autocast, compile or checkpointing changes what a
token costs, not (to first order) how many the model needs. Two levers change how many it
needs instead, so a timing run cannot show them: the schedule (lesson 01 measured it) and the
batch's rows (lesson 02's critical batch); they are not ablated here."""

from __future__ import annotations

import dataclasses

from ...device import get_device
from ...measure import steady_cpu
from ...mode import pick
from .recipe import Recipe, baseline, training
from .text import TrainText

SEGMENTS = 4  # timed segments per variant, after one untimed segment of warm-up
ABLATED = ("attention", "packing", "fused_optimizer", "amp", "compile", "checkpointing")


def steps_timed() -> int:
    """Steps each variant is timed on, after a segment of untimed ones."""
    return pick(quick=40, full=80)


def variants(recipe: Recipe) -> dict[str, Recipe]:
    """'recipe', and one variant per ABLATED lever the recipe sets apart from the baseline's."""
    base, out = baseline(), {"recipe": recipe}
    for name in ABLATED:
        if getattr(recipe, name) != getattr(base, name):
            out[name] = dataclasses.replace(recipe, **{name: getattr(base, name)})
    return out


def interleave_segments(runs: dict, names: list[str]) -> dict:
    """Advance every run one timed segment at a time, the order reversed every other segment,
    so that a slow minute of the machine lands on every variant, not on one."""
    last = {}
    for k in range(SEGMENTS + 1):  # the first: the untimed warm-up steps
        for name in names if k % 2 == 0 else names[::-1]:
            last[name] = next(runs[name])
    return last


PREDICTING: list[bool] = []  # non-empty while 18-ablation's check asks for the prediction


def measure(recipe: Recipe, seed: int = 0) -> dict[str, float]:
    """Per lever undone: the variant's projected time for the recipe's real tokens over the
    recipe's own (above 1: the lever buys time). A projection is the variant's one-time cost
    (setup and its first segment: compilation, first kernels) plus its seconds per real token
    over the timed segments times the real tokens the recipe trains."""
    if PREDICTING:
        raise RuntimeError(
            "biggest_lever asks for a prediction: lesson.measure times the ablation the check "
            "measures itself; decide from what each lever did in the lesson's sections"
        )
    clock = "cpu" if get_device().type == "cpu" else "wall"
    recipes = variants(recipe)
    names = list(recipes)
    per = steps_timed() // SEGMENTS
    once: dict[str, float] = {}
    with steady_cpu(1):
        text = TrainText(0)
        runs = {}
        for name, r in recipes.items():
            r = dataclasses.replace(r, steps=(SEGMENTS + 1) * per)
            segments = training(r, text, seed, segment_steps=per)
            runs[name] = _after_warm_up(segments, once, name, clock)
        last = interleave_segments(runs, names)
        for run in runs.values():
            run.close()
    real_per_step = last["recipe"].real / (SEGMENTS * per)
    tokens = real_per_step * recipe.steps
    time = {n: once[n] + last[n].per_real_token(clock) * tokens for n in names}
    return {n: time[n] / time["recipe"] for n in names if n != "recipe"}


def _after_warm_up(segments, once: dict, name: str, clock: str):
    """`training`'s segments with the first one set apart: its time (and the setup's) is
    recorded in `once[name]`, then forgotten with its tokens, so rates count steady steps."""
    run = next(segments)
    setup = run.setup_s if clock == "wall" else run.setup_cpu_s
    once[name] = setup + sum(getattr(s, f"{clock}_s") for s in run.segments)
    run.segments.clear()
    run.real = 0
    yield run
    yield from segments


def ranking(costs: dict[str, float]) -> list[tuple[str, float]]:
    """Levers by what undoing them costs, most first."""
    return sorted(costs.items(), key=lambda kv: -kv[1])


def describe(costs: dict[str, float]) -> str:
    lines = ["seconds per real token with the lever undone / with the full recipe:"]
    lines += [f"  {name:>16}: {cost:5.2f}x" for name, cost in ranking(costs)]
    return "\n".join(lines)
