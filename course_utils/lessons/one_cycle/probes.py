"""Lesson 01's probes: each runs the learner's answer on a specimen it builds from plain
arguments (a seed, a sweep, a count), beside the learner's code, and returns what it saw as
data (course_utils.probes). The checks (checks.py) compute what that data must be; judge.py
holds the runners these call and the readers the checks use."""

from __future__ import annotations

from ...models import SmallCNN
from ...probes import probe
from ...session import seed_everything
from . import judge


def decay_model(seed: int) -> SmallCNN:
    """01-adamw's model: conv and linear weights (matrices), their biases and BatchNorm's
    scale and shift, its initial weights drawn from `seed`."""
    seed_everything(seed)
    return SmallCNN(width=8, bias=True)


@probe
def range_test_run(lr_range_test, sweep: dict, width: int, seed: int) -> dict:
    """The learner's range test on SmallCNN (`width`, initial weights and batches from `seed`):
    the lrs and losses it returned, and what each optimizer step really used (judge.Steps)."""
    lrs, losses, recorder = judge.run_range_test(lr_range_test, seed=seed, width=width, sweep=sweep)
    return {"lrs": lrs, "losses": losses, "used": judge.Steps.of(recorder).to_data()}


@probe
def suggestion_of(suggest_lr, lrs: list, losses: list):
    """The learner's rule on a range test's curve."""
    return suggest_lr(list(lrs), list(losses))


@probe
def one_cycle_run(fit_one_cycle, kind: str, max_lr: float, items: int) -> dict:
    """The learner's loop on judge.record_fit's problem of `items` examples."""
    return judge.record_fit(fit_one_cycle, kind, max_lr, items)


@probe
def first_step_of(configure_optimizer, lr: float, weight_decay: float, seed: int) -> dict:
    """The learner's optimizer for decay_model(seed): the parameters in no param group, and
    every parameter after one step with judge.known_gradients(model, seed)."""
    model = decay_model(seed)
    optimizer = configure_optimizer(model, lr, weight_decay)
    grouped = [p for group in optimizer.param_groups for p in group["params"]]
    missing = [n for n, p in model.named_parameters() if not any(p is q for q in grouped)]
    return {"missing": missing, "after": judge.first_step(optimizer, model, seed)}
