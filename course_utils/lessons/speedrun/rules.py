"""What each timed call of a learner's speed-run must satisfy, judged from what the probe
watched (probes.speedrun_watched): failing parts, or none. Each message names a cause only
where a probe told it apart: the module births and weights' sources, the token slots its
losses were computed on, and its validation loss under its own cipher against others."""

from __future__ import annotations

from ...checks import correct
from ...probes import LearnerRaised, observe
from .probes import recipe_of
from .recipe import Recipe

# A call whose training losses covered fewer slots than this share of its recipe's budget
# did not train what its recipe says (the ablation would time a recipe that was not run).
# 0.9: a valid run trains exactly its budget (the count is exact: targets of every training
# cross-entropy); rows dropped at the end of an epoch cost well under 10%.
SLOTS_SHARE = 0.9
# Validation loss (nats per byte) by which a model must do better under its own cipher than
# under any other scored: a model that learned its given text scores ~3+ nats worse under
# another cipher (bytes it never saw in those roles); 0.1 nats is well inside that gap.
CIPHER_MARGIN = 0.1


def reraise(told: dict):
    if told.get("type") == "NotImplementedError":
        raise NotImplementedError(told.get("message", ""))
    raise LearnerRaised(str(told.get("type")), str(told.get("message", "")), told.get("where", ""))


def loss_of(seen: dict, key: int) -> float:
    total, n = seen["nll"][key]
    return total / max(n, 1)


def returned_model(seen: dict) -> list:
    """The call must return a model built and trained during it."""
    if not seen["is_module"]:
        return [
            correct(
                "returns a model",
                False,
                f"speedrun returned a {seen['model_type']}, not the trained nn.Module",
            )
        ]
    if seen["stale"]:
        return [
            correct(
                "trained from scratch",
                False,
                f"the returned model's modules {seen['stale'][:3]} were built before this call "
                "(kept from an earlier call or cell): each timed call must build its model",
            )
        ]
    if seen["from_before"]:
        name, how = next(iter(seen["from_before"].items()))
        return [
            correct(
                "trained from scratch",
                False,
                f"{len(seen['from_before'])} weights of the returned model hold values from "
                f"before the call ({name}: {how}): a warm start takes work out of the timed run",
            )
        ]
    return []


def declared_budget(seen: dict, slots: int, call: int) -> list:
    """The call must train on the token slots its recipe declares (steps x rows x row_len)."""
    counted = seen["slots"]["slots"]
    if counted == 0 or counted >= SLOTS_SHARE * slots:
        return []  # 0: losses computed another way; nothing counted, nothing claimed
    return [
        correct(
            "trains its recipe's tokens",
            False,
            f"call {call + 1} trained on {counted:,} token slots (counted in its training "
            f"losses), but its recipe declares steps x rows x row_len = {slots:,}: a run "
            "that trains less than its recipe says is timed for work it did not do, and the "
            "ablation would measure a recipe you did not run. Make speedrun follow my_recipe",
        )
    ]


def learned_given_text(seen: dict, key: int, others: list[int], call: int) -> list:
    """The model must fit the validation text under its own cipher better than under any
    other (the plain text, earlier calls' ciphers): else it learned from other text."""
    own = loss_of(seen, key)
    better = [k for k in others if loss_of(seen, k) < own - CIPHER_MARGIN]
    if not better:
        return []
    k = better[0]
    which = "the plain text" if k == 0 else "an earlier call's training text"
    return [
        correct(
            "learned from the text it was given",
            False,
            f"call {call + 1}'s model scores {loss_of(seen, k):.2f} nats/byte on the validation "
            f"text as {which}, but {own:.2f} as the training text it was given (each call's "
            "bytes are ciphered differently): it learned from text other than its argument "
            "(the notebook's train_text, pydoc_data directly, or a model kept from before)",
        )
    ]


def learner_recipe(my_recipe) -> Recipe | list:
    """The learner's recipe for this device, rebuilt here from the fields the probe returns;
    or the failing part when my_recipe returns something else."""
    fields = observe(recipe_of, my_recipe)
    if "not_a_recipe" in fields:
        return [
            correct(
                "a recipe",
                False,
                f"my_recipe(device) returned a {fields['not_a_recipe']}, not a lesson.Recipe",
            )
        ]
    return Recipe(**fields)
