"""What each technique is worth here: the tuned recipe with one choice at a time put back to
the baseline's, timed the way the capstone's check times (CPU seconds on one thread on a
CPU, synchronised wall time on a GPU), repeats interleaved (order alternating), spread shown."""

from __future__ import annotations

import dataclasses
import statistics

import torch

from ...device import get_device
from ...measure import steady_cpu
from ...mode import pick
from ...progress import tqdm
from .data_path import decode_timed
from .recipe import Recipe, training, tuned_recipe
from .recipe import baseline as _baseline
from .recipe import target as _target
from .runs import Run, as_run
from .splits import training_set

# Recipe field -> the baseline's choice there, and the lesson whose technique it undoes.
UNDONE = {
    "batch_size": ("batch 32", "02"),
    "one_cycle": ("a constant Adam rate", "01"),
    "data_on_device": ("per-image decoding every epoch", "03"),
    "amp": ("float32, no autocast", "04"),
    "channels_last": ("the NCHW layout", "05"),
    "conv_bias": ("a bias before each BatchNorm", "09"),
    "sync_every_step": ("loss.item() every step", "10"),
    "fused_optimizer": ("the default optimizer kernels", "10"),
}

# Every variant, the tuned recipe included, is a timing run: its first steps, timed in
# SEGMENTS segments (every step of a recipe is the same work: setup + steps x the median
# step). Quick: one epoch; full: half of one, so the notebook fits a T4's 15 minutes
# (docs/gpu.md). Only the baseline, reused from the notebook's own run, trained to the end.
SEGMENTS = 4  # the spread of a single repeat: its fastest and slowest segment
WARMUP_STEPS = 3  # untimed first steps of each variant: lazy initialisation, first kernels


def epochs_timed() -> float:
    """The share of an epoch each variant is timed on, in the mode in force."""
    return pick(quick=1.0, full=0.5)


# Undone, these change how many epochs reach the target but not an epoch's work, so a timing
# run would only show the tuned recipe's time again: lesson 01 measured the schedule.
SAME_WORK = ("one_cycle",)


def variants(device=None) -> dict[str, Recipe]:
    """'tuned', one variant per technique the tuned recipe uses here, and 'baseline'."""
    tuned = tuned_recipe(device)
    out = {"tuned": tuned}
    for name, (choice, lesson) in UNDONE.items():
        base_value = getattr(_baseline(), name)
        if getattr(tuned, name) != base_value and name not in SAME_WORK:
            changes = {name: base_value}
            if name == "one_cycle":
                changes["lr"] = _baseline().lr
            out[f"tuned, but {choice} ({lesson})"] = dataclasses.replace(tuned, **changes)
    out["baseline"] = _baseline()
    return out


def _timed_steps(recipe: Recipe, n_train: int) -> int:
    """The steps a timing run of `recipe` trains: warm-up, then SEGMENTS equal segments."""
    per_epoch = n_train // recipe.batch_size
    return WARMUP_STEPS + SEGMENTS * max(1, int(epochs_timed() * per_epoch) // SEGMENTS)


def _timing(recipe: Recipe, dataset, seed: int, device, label: str, decoded=None, bar=None):
    """`recipe`'s first epochs_timed() epoch as a generator of SEGMENTS timed segments, after
    WARMUP_STEPS untimed ones."""
    steps = _timed_steps(recipe, len(dataset)) - WARMUP_STEPS
    return training(
        recipe,
        dataset,
        seed,
        device,
        max_steps=WARMUP_STEPS + steps,
        segment_steps=steps // SEGMENTS,
        warmup_steps=WARMUP_STEPS,
        decoded=decoded,
        label=label,
        leave=False,
        bar=bar,
    )


def timing_run(recipe: Recipe, dataset, seed: int = 0, device=None, label: str = "timing") -> Run:
    """`recipe` timed alone on its first steps, projected to its whole run (no accuracy)."""
    for trained in _timing(recipe, dataset, seed, device, label):  # noqa: B007 - the last one
        pass
    return as_run(recipe, trained, len(dataset), device)


def ablation(seeds: int = 1, device=None, known: dict[str, Run] | None = None) -> list[dict]:
    """One row per (variant, seed), every variant a timing run, interleaved segment by segment
    (the order reversed every other round), so a slow minute of the machine is shared by all
    variants instead of landing on one; on a CPU all run on one thread, in CPU seconds.
    `known`: runs already made (by variant name, timed as `train_recipe` times, seed 0),
    reused rather than repeated. `seeds` > 1: repeats, each seed's round after the last."""
    known, dataset, recipes = known or {}, training_set(), variants(device)
    reusable = {n for n in recipes if _same(known.get(n), recipes[n])}  # seed 0 only
    total = sum(
        _timed_steps(recipes[n], len(dataset))
        for seed in range(seeds)
        for n in recipes
        if not (seed == 0 and n in reusable)
    )
    rows = []
    # one bar for every variant's steps: they run interleaved, so one bar each would all be
    # open at once; its postfix names the variant training now
    with steady_cpu(1), tqdm(total=total, desc="ablation", unit="step") as bar:
        # decoded once, timed, and counted in the setup of every variant that decodes once
        shared = decode_timed(dataset, torch.device(device) if device else get_device())
        for seed in range(seeds):
            names = list(recipes) if seed % 2 == 0 else list(reversed(recipes))
            reused = {n: known[n] for n in names if seed == 0 and n in reusable}
            runs = {n: _timing(recipes[n], dataset, seed, device, n, shared, bar) for n in names}
            last = interleave_segments(runs, names, skip=reused)
            for name in names:
                runs[name].close()
                run = reused.get(name) or as_run(recipes[name], last[name], len(dataset), device)
                rows.append({"variant": name, "seed": seed, "seconds": run.seconds, "run": run})
    return rows


def interleave_segments(runs: dict, names: list[str], skip=()) -> dict:
    """Advance every run by one timed segment at a time (each `next` trains a segment and
    reads the clocks after synchronising), the order reversed every other segment, so that a
    slow minute of the machine lands on every variant, not on one. Returns each run's last."""
    last = {}
    for k in range(SEGMENTS):
        for name in names if k % 2 == 0 else names[::-1]:
            if name not in skip:
                last[name] = next(runs[name])
    return last


def _same(run: Run | None, recipe: Recipe) -> bool:
    return run is not None and run.recipe == recipe


def summarise(rows: list[dict]) -> list[dict]:
    """Per variant: median seconds and accuracy, and the spread of the time: the range over
    repeats, or with one repeat the range its segments imply (at the slowest and fastest)."""
    out = []
    for name in dict.fromkeys(r["variant"] for r in rows):
        runs = [r["run"] for r in rows if r["variant"] == name]
        secs = [r.seconds for r in runs]
        if len(runs) > 1 or runs[0].seconds_range is None:
            spread = (min(secs), max(secs))
        else:
            spread = runs[0].seconds_range
        accs = [r.accuracy for r in runs if r.accuracy is not None]
        out.append(
            {
                "variant": name,
                "seconds": statistics.median(secs),
                "seconds_range": spread,
                "accuracy": statistics.median(accs) if accs else None,
                "reached": sum(a >= _target() for a in accs),
                "runs": len(runs),
                "timed_steps": runs[0].timed_steps,
                "clock": runs[0].clock,
            }
        )
    return out


def describe(summary: list[dict]) -> str:
    lines = []
    for s in summary:
        lo, hi = s["seconds_range"]
        acc = (
            f"accuracy {s['accuracy']:.1%}, target reached {s['reached']}/{s['runs']}"
            if s["accuracy"] is not None
            else f"projected from {s['timed_steps']} steps (accuracy not measured)"
        )
        lines.append(f"{s['variant']:>48}: {s['seconds']:6.1f} s [{lo:.1f}-{hi:.1f}]  {acc}")
    clocks = {"cpu": "CPU seconds on one thread", "wall": "synchronised wall seconds"}
    used = " and ".join(sorted({clocks[s["clock"]] for s in summary}))
    return "\n".join([f"time to train each variant's epochs ({used}); [spread]", *lines])


def plot_ablation(summary: list[dict]):
    """Time to target per variant, whiskers at its spread; hatched red where the target was
    missed (a fast run that misses the target is not a speed-up), grey where not measured."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 0.45 * len(summary) + 1.2))
    names = [s["variant"] for s in summary]
    secs = [s["seconds"] for s in summary]
    err = [
        [s["seconds"] - s["seconds_range"][0] for s in summary],
        [s["seconds_range"][1] - s["seconds"] for s in summary],
    ]
    bars = ax.barh(names, secs, xerr=err, capsize=3, color="C0")
    for bar, s in zip(bars, summary, strict=True):
        if s["accuracy"] is None:
            bar.set_color("C7")
            text = " timing run"
        else:
            text = f" {s['accuracy']:.1%}"
            if s["reached"] < s["runs"]:
                bar.set_hatch("//")
                bar.set_color("C3")
        y = bar.get_y() + bar.get_height() / 2
        ax.text(bar.get_width(), y, text, va="center", fontsize=8)
    ax.invert_yaxis()
    ax.set(
        xlabel="seconds to train ("
        + ("CPU seconds, one thread" if summary[0]["clock"] == "cpu" else "wall clock")
        + "; labels: held-out accuracy)",
        title=f"Ablation: one technique undone at a time (target {_target():.0%})",
    )
    fig.tight_layout()
    return fig
