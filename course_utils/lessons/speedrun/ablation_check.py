"""Lesson 18's second check: which lever of the learner's own recipe buys the most time here?
The learner predicts; the judge measures (ablate.measure: each lever undone in turn, timed
interleaved) and compares. No learner code is timed: the judge rebuilds the recipe from the
fields the probe returns and trains it with the harness's loop."""

from __future__ import annotations

from ...checks import Threshold, check, correct
from ...probes import observe
from .ablate import ABLATED, describe, measure, ranking, variants
from .probes import prediction_of
from .rules import learner_recipe

THRESHOLDS = {
    # a prediction passes when undoing its lever costs at least this share of what undoing
    # the top one costs (gain = projected time without it / the recipe's - 1): two levers
    # closer than this are a tie on a shared machine, and either answer is right.
    "tie": Threshold(
        0.4,
        "ablate.measure of the reference recipe (quick mode, fp32, 2-core cpu-bf16 machine beside "
        "other work, one thread, CPU seconds, 2026-12-07), gain = cost - 1 of each lever undone: "
        "packing 0.38/0.37/0.38, attention 0.34/0.37/0.25 (40, 40 and 24 steps timed): the two "
        "levers trade places within the noise, the second's gain 0.66-1.0 of the first's; "
        "foreach AdamW -0.03/-0.09 and bf16 autocast -0.37 (in a bf16 recipe: it costs time on this CPU) stay far "
        "below. Beside a full test suite the second fell to 0.54 of the first (attention 1.21x, "
        "packing 1.39x), which 0.6 failed: 0.4 passes either of the tied levers there too and "
        "still fails every lever whose gain is 0 or negative",
    ),
}


@check(
    "18-ablation",
    points=2,
    hint="Which part of your run's time does each lever remove, on this device class? "
    "Estimate each lever's share before you time anything; then time your recipe with one "
    "lever undone at a time.",
)
def check_ablation(my_recipe, biggest_lever):
    recipe = learner_recipe(my_recipe)
    if isinstance(recipe, list):
        return recipe
    predicted = observe(prediction_of, biggest_lever)
    used = [name for name in variants(recipe) if name != "recipe"]
    if predicted not in ABLATED:
        return [
            correct(
                "a lever",
                False,
                f"{predicted!r} is not a lever the ablation undoes; it undoes {list(ABLATED)}",
            )
        ]
    if predicted not in used:
        return [
            correct(
                "a lever your recipe uses",
                False,
                f"your recipe keeps the baseline's {predicted} ({getattr(recipe, predicted)!r})"
                f": undoing it changes nothing. Your recipe's levers here: {used}",
            )
        ]
    if len(used) < 2:
        return [
            correct(
                "levers to rank",
                False,
                f"your recipe turns one ablatable lever ({used}): there is nothing to rank. "
                "A speed-run that reaches the target fast uses several",
            )
        ]
    costs = measure(recipe)
    top, top_cost = ranking(costs)[0]
    mine = costs[predicted]
    tie = THRESHOLDS["tie"].value
    ok = mine >= 1 and (mine - 1) >= tie * (top_cost - 1)
    said = "the top one" if predicted == top else f"below {top}'s {top_cost:.2f}x"
    return [
        correct(
            "the lever that buys the most",
            ok,
            f"you predicted {predicted}: undoing it makes the run {mine:.2f}x as long "
            f"({said}; a lever that buys at least {tie:.0%} of the top's gain counts). Measured here:\n"
            + describe(costs),
            value=mine,
            threshold=1 + tie * (top_cost - 1),
            better="higher",
        )
    ]
