"""Exercise 2's scenarios and their measurements (the verdicts are in checks.py): on scenarios
the learner has not seen, does the chosen plan fit the device on every rank, and does no plan
that fits run faster?

A plan's need is its peak on the fullest rank during a steady training step, measured on a
pretend world in this process (sharding.fake_peak: deterministic bytes). Each scenario's
device memory is placed between two plans' needs (their geometric mean), so exactly the
plans from one of them down fit. Times and all-gathers come from a real launch of every
plan on 2 processes (options.py), interleaved rounds, once per kernel; a model whose scenarios
fit only FSDP2's plans has its all-gathers counted there but no rounds timed (none compared).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from torch import nn

from .launch import describe, start
from .options import PLANS
from .scenarios import MODELS
from .sharding import fake_peak
from .thresholds import THRESHOLDS

WORLD = 2
ON_AVERAGE = "ZeRO-1 fits on average, not on rank 1"
SCENARIOS = (  # name, model, (the hungriest plan that fits or None, the least hungry that does not)
    ("room for every plan", "deep", (None, "DDP")),
    ("DDP does not fit", "adam", ("ZeRO-1", "DDP")),
    ("one head dwarfs the rest", "wide-head", ("FSDP2, keep", "ZeRO-1")),
    ("only resharding fits", "deep", ("FSDP2, reshard", "FSDP2, keep")),
    # ZeRO-1 fits on rank 0, not on rank 1; nor on either with one row's activations
    ("ZeRO-1 fills rank 1 most", "rank-1-fullest", ("FSDP2, keep", "ZeRO-1")),
    # the same model with the device between ZeRO-1's mean over the ranks and its fullest rank
    # (budget): a plan judged by the ranks' mean picks ZeRO-1 there
    (ON_AVERAGE, "rank-1-fullest", ("FSDP2, keep", "ZeRO-1")),
)
FSDP_ONLY = ("FSDP2, keep", "FSDP2, reshard")


@dataclass
class Scenario:
    """What exercise 2's `choose_plan` is given: a model, its optimizer ('sgd', 'momentum' or
    'adam'), one rank's batch (x, y), the number of ranks, and each device's memory (bytes)."""

    model: nn.Module
    optimizer: str
    batch: tuple
    world_size: int
    device_bytes: int
    name: str = ""


_PEAKS: dict = {}
_TIMES: dict = {}


def rank_needs(model_name: str) -> dict[str, list[int]]:
    """plan -> peak bytes of each rank, measured once a kernel."""
    if model_name not in _PEAKS:
        spec, optimizer, batch = MODELS[model_name]
        _PEAKS[model_name] = {
            plan: [
                fake_peak(
                    spec.build(),
                    strategy,
                    optimizer,
                    spec.batch(batch, seed=100),
                    WORLD,
                    reshard=reshard,
                    rank=rank,
                )
                for rank in range(WORLD)
            ]
            for plan, (strategy, reshard) in PLANS.items()
        }
    return _PEAKS[model_name]


def needs(model_name: str) -> dict[str, int]:
    """plan -> peak bytes on the fullest rank (max over the ranks), measured once a kernel."""
    return {plan: max(ranks) for plan, ranks in rank_needs(model_name).items()}


def untimed() -> list[str]:
    """Models whose scenarios fit only FSDP2's two plans: no plan of another strategy fits, so
    no time is compared (checks._verdict), only all-gathers counted."""
    models = {model for _, model, _ in SCENARIOS}
    timed = {model for _, model, (fits, _) in SCENARIOS if fits not in FSDP_ONLY}
    return sorted(models - timed)


def start_timing():
    """Start the launch that times every plan on 2 processes (None if already measured); the
    untimed models' plans only count their all-gathers."""
    if _TIMES:
        return None
    names = sorted({model for _, model, _ in SCENARIOS})
    print(f"timing every plan on {describe(WORLD)} while measuring peaks here ...", flush=True)
    return start(
        "plans",
        [*names, "--untimed", ",".join(untimed())],
        nproc=WORLD,
        timeout_s=THRESHOLDS["plan_launch_timeout_s"].value,
    )


def timings(running=None) -> dict:
    """model -> plan -> {seconds: [...], gathers}, once a kernel."""
    running = running or start_timing()
    if running is not None:
        launch = running.finish()
        if launch.result is None:
            raise RuntimeError(launch.failure("the timing launch"))
        _TIMES.update(launch.result["result"])
    return _TIMES


def budget(
    model_name: str, fits, not_fits, *, room: float = 1.0, scenario: str = ""
) -> float | None:
    """Device memory for a scenario, or None where the two needs are too close to decide.
    `room` multiplies the room a scenario where every plan fits gives (THRESHOLDS["room"]).
    ON_AVERAGE's lies between `not_fits`'s mean over the ranks and its fullest rank."""
    need = needs(model_name)
    if fits is None:
        return room * THRESHOLDS["room"].value * max(need.values())
    if scenario == ON_AVERAGE:
        ranks = rank_needs(model_name)[not_fits]
        mean = sum(ranks) / len(ranks)
        if max(ranks) / mean < THRESHOLDS["rank_gap"].value:
            return None
        return math.sqrt(mean * max(ranks))
    if need[not_fits] / need[fits] < THRESHOLDS["min_gap"].value:
        return None
    return math.sqrt(need[fits] * need[not_fits])
