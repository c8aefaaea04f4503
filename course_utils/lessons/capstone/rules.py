"""What each timed call of a learner's speed-run must satisfy, judged from what was watched
during it (watch.py, in the learner's kernel: probes.speedrun_watched) and from its model's
held-out predictions, scored here against labels the kernel never sees: failing parts, or
none, so the check can stop timing and say what is wrong. Each message names a cause only
where a probe told it apart (the module births, the weights' sources, the images read, the
scores under every renaming of the classes). `before_timing` asks them in order."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ...checks import correct
from ...probes import LearnerRaised
from .recipe import target
from .splits import NUM_CLASSES


@dataclass
class LearnerRun:
    """One timed call of the learner's speed-run and what was watched during it, as the probe
    reported it (probes.speedrun_watched)."""

    wall: float
    cpu: float | None  # None where CPU seconds would not be the whole run
    model_type: str  # the type of what the call returned
    seen: dict[str, int]  # fp16 regions and scaled losses (precision_watch)
    stale: list[str]  # modules of the returned model built before the call
    images_read: int  # distinct training images read (the data set's __getitem__)
    raw_reads: int = 0  # raw image arrays read (train_set.data) or sent to DataLoader workers
    from_before: dict[str, str] = field(default_factory=dict)  # weights with earlier values
    is_module: bool = True  # it returned an nn.Module
    refused: str | None = None  # watch.float32_refused on the returned model
    refused_raised: dict | None = None  # what the model raised there (probes.raised)
    predicted: torch.Tensor | None = None  # its classes for the held-out images sent
    predict_raised: dict | None = None  # what the model raised there


@dataclass
class Predictions:
    """A model's classes for the held-out images the check sent, in the order it sent them,
    and those images' labels (the check's own)."""

    predicted: torch.Tensor
    labels: torch.Tensor


def reraise(told: dict):
    """Raise what the learner's code raised in the kernel, where the check needs its result
    (the probe caught it, so that an earlier rule could still speak first)."""
    if told.get("type") == "NotImplementedError":
        raise NotImplementedError(told.get("message", ""))
    raise LearnerRaised(str(told.get("type")), str(told.get("message", "")), told.get("where", ""))


def first_run(run: LearnerRun) -> list:
    """What the first run must satisfy before it is worth timing; failing parts, or none."""
    seen = run.seen
    if not run.is_module:
        what = f"speedrun returned {run.model_type}, expected the trained nn.Module"
        return [correct("model", False, what)]
    if seen["fp16"] and not seen["scaled"]:
        return [
            correct(
                "fp16 needs a GradScaler",
                False,
                f"your run autocast to float16 {seen['fp16']} time(s) and never scaled a loss: "
                "fp16 flushes small gradients to zero, so train through "
                "torch.amp.GradScaler (scaler.scale(loss).backward(); scaler.step(opt); "
                "scaler.update()), as lesson 04 does; bf16 needs none",
            )
        ]
    if run.refused_raised is not None:
        reraise(run.refused_raised)
    if refused := run.refused:
        return [
            correct(
                "takes float32 images",
                False,
                f"the model you returned holds {refused}. The returned model must take "
                "float32 images, as it is judged on them: cast it back (model.float()) before "
                "returning it, or keep float32 weights and autocast the compute (lesson 04)",
            )
        ]
    return fresh(run, 0) or own_weights(run, 0)


def fresh(run: LearnerRun, i: int) -> list:
    """Every call must build its model: failing parts, or none."""
    if not run.stale:
        return []
    what = (
        "the model you returned was"
        if "the model" in run.stale
        else f"parts of the model you returned ({', '.join(run.stale[:3])}) were"
    )
    return [
        correct(
            "trained from scratch",
            False,
            f"{what} built before this call (run {i + 1}): a speed-run must build and train a "
            "fresh model every time, as the check times each call; a model kept, or copied, "
            "from an earlier run (or built outside speedrun) brings its training along",
        )
    ]


def own_weights(run: LearnerRun, i: int) -> list:
    """Every call must train its weights from scratch: failing parts, or none."""
    if not run.from_before:
        return []
    names = list(run.from_before)
    how = sorted(set(run.from_before.values()))
    return [
        correct(
            "trained from scratch",
            False,
            f"{len(names)} of the returned model's weights ({', '.join(names[:3])}"
            f"{', ...' if len(names) > 3 else ''}) hold values from before this call (run "
            f"{i + 1}): {'; '.join(how)}. A speed-run must build and train a fresh model every "
            "time, as the check times each call; weights kept from an earlier run or cell "
            "bring that training along, even when the model object is new",
        )
    ]


def reads_images(run: LearnerRun, i: int) -> list:
    """A call that read no training image at all (no item, no raw array, nothing sent to a
    DataLoader worker) trained on images prepared before it: failing parts, or none."""
    if run.images_read or run.raw_reads:
        return []
    return [
        correct(
            "data preparation timed",
            False,
            f"run {i + 1} read no training image (no train_set[i], no train_set.data): the "
            "images it trained on were prepared before the call, so data preparation dropped "
            "out of the time. Section 1 (the rules) times training with data preparation "
            "included: decode the train_set speedrun is given, inside speedrun, every call",
        )
    ]


def scores(predictions: Predictions) -> list[float]:
    """Held-out accuracy under every renaming of the classes: item k is the accuracy when
    label c is read as (c + k) mod 10."""
    predicted, y = predictions.predicted.to(predictions.labels.device), predictions.labels
    if predicted.shape != y.shape:
        raise ValueError(f"{tuple(predicted.shape)} predictions for {len(y)} held-out images")
    return [float((predicted == (y + k) % NUM_CLASSES).float().mean()) for k in range(NUM_CLASSES)]


def learned_given_labels(accuracies: list[float], shift: int, i: int) -> list:
    """A model that scores far better under another renaming than its call's learned from
    other data than the call was given: failing parts, or none."""
    given = accuracies[shift]
    other = max((k for k in range(NUM_CLASSES) if k != shift), key=accuracies.__getitem__)
    if given >= target() or accuracies[other] < max(0.5, 2 * given):
        return []
    names = "the usual names" if other == 0 else f"the renaming of another run (+{other})"
    return [
        correct(
            "trained on the train_set given",
            False,
            f"run {i + 1} was given train_set with its classes renamed (label k read as "
            f"(k + {shift}) mod 10, as section 1 says). Your model scores {given:.1%} on the "
            f"held-out split under those names and {accuracies[other]:.1%} under {names}: it "
            "learned its labels from other data than the train_set passed to speedrun (the "
            "notebook's own train_set, images and labels decoded before the call, or weights "
            "kept from an earlier training). Train from scratch on the argument, every call",
        )
    ]


def decodes_each_call(first: LearnerRun, run: LearnerRun, i: int) -> list:
    """A timed call that read far fewer training images than the first one kept its decoded
    images from an earlier call: failing parts, or none."""
    if run.images_read * 2 >= first.images_read:
        return []
    return [
        correct(
            "data preparation timed",
            False,
            f"your first run read {first.images_read} training images (train_set[i]), run "
            f"{i + 1} read {run.images_read}: the images decoded in an earlier call were kept, "
            "so data preparation dropped out of the timed runs. Section 1 (the rules) times "
            "training with data preparation included: decode train_set inside speedrun on "
            "every call",
        )
    ]


def before_timing(first: LearnerRun, run: LearnerRun, i: int) -> list:
    """What call i (`first`: call 0) must satisfy before it is worth timing, the first
    broken rule's parts, or none. The labels come after: they need a held-out pass."""
    if i == 0:
        return first_run(run) or reads_images(run, i)
    return (
        fresh(run, i)
        or own_weights(run, i)
        or decodes_each_call(first, run, i)
        or reads_images(run, i)
    )
