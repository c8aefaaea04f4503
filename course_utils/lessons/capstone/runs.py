"""A recipe's run as lesson 11 reports and compares it: the time to train its epochs on the
check's clock (projected from a timing run's segments) and its held-out accuracy."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.data import Dataset

from ...checks import reference
from ...device import get_device
from ...measure import steady_cpu
from .recipe import Recipe, Trained, clock_of, fit, target
from .splits import held_out_accuracy


@dataclass
class Run:
    """A recipe's run as the notebook reports it: its time to train the recipe's epochs and
    its held-out accuracy. Times are on `clock`: CPU seconds on one thread on a CPU (steady
    beside other work), synchronised wall seconds on a GPU."""

    recipe: Recipe
    seconds: float  # training, data preparation included, evaluation excluded
    accuracy: float | None  # on the held-out test split; None for a timing run
    steps: int  # the steps trained: fewer than the recipe's in a timing run
    model: nn.Module | None = None
    seconds_range: tuple[float, float] | None = None  # at its fastest / slowest segment's rate
    timed_steps: int | None = None  # set for a timing run: `seconds` is projected from these
    clock: str = "wall"

    @property
    def reached(self) -> bool:
        return self.accuracy is not None and self.accuracy >= target()


def as_run(recipe: Recipe, trained: Trained, n_train: int, device, accuracy=None) -> Run:
    """The Run of a `fit`: its own total if it trained every step, else projected from the
    steps it timed; the spread at its fastest and slowest segment's rate."""
    clock = clock_of(torch.device(device) if device is not None else get_device())
    steps = recipe.epochs * (n_train // recipe.batch_size)
    whole = trained.steps >= steps
    seconds = trained.total(clock) if whole else trained.projected(steps, clock)
    spread = tuple(trained.projected(steps, clock, f) for f in (min, max))
    return Run(
        recipe,
        seconds,
        accuracy,
        trained.steps,
        trained.model if accuracy is not None else None,
        spread,
        None if whole else sum(s.steps for s in trained.segments),
        clock,
    )


@reference
def train_recipe(
    recipe: Recipe,
    dataset: Dataset,
    seed: int = 0,
    device=None,
    *,
    epochs: int | None = None,
    label: str = "training",
) -> Run:
    """Train with `recipe` (one thread on a CPU, timed as the check times), then judge the
    model once on held-out data, after training. `epochs` fewer than the recipe's: its time
    is projected to the recipe's epochs, its accuracy is the one after `epochs`."""
    with steady_cpu(1):
        trained = fit(recipe, dataset, seed, device, epochs=epochs, label=label)
    accuracy = held_out_accuracy(trained.model, device)
    return as_run(recipe, trained, len(dataset), device, accuracy)
