"""What each technique is worth here: the tuned recipe with one choice at a time put back to
the baseline's, timed on this machine, repeats interleaved (order alternating), spread shown."""

from __future__ import annotations

import dataclasses
import statistics

from tqdm.auto import tqdm

from .recipe import Recipe, Run, fit, train_recipe, training_set, tuned_recipe
from .recipe import baseline as _baseline
from .recipe import target as _target

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

# The variants are timed on a few epochs each (every epoch is the same work: setup + epochs x
# the median epoch), which fits the budgets (quick: a minute on a CPU; full: 15 min on a T4);
# only the tuned recipe trains to the end and is judged on held-out data.
EPOCHS_TIMED = 2  # two, so a single repeat still shows a spread (its two epochs)


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


def _timing_run(recipe: Recipe, dataset, seed: int, device, epochs: int, label: str) -> Run:
    trained = fit(recipe, dataset, seed, device, epochs=epochs, label=label, leave=False)
    seconds = trained.seconds_for(recipe.epochs)
    return Run(recipe, seconds, None, trained.steps, None, epochs, trained.epoch_s)


def ablation(seeds: int = 1, device=None, known: dict[str, Run] | None = None) -> list[dict]:
    """One row per (variant, seed). `known`: runs already made (by variant name, seed 0),
    reused rather than repeated. Repeat k runs every variant before repeat k+1 starts, in
    the opposite order, so a slow minute of the machine does not land on one variant."""
    known, dataset, recipes = known or {}, training_set(), variants(device)
    jobs = []
    for seed in range(seeds):
        names = list(recipes) if seed % 2 == 0 else list(reversed(recipes))
        jobs += [(name, seed) for name in names]
    rows = []
    for name, seed in tqdm(jobs, desc="ablation", unit="run"):
        recipe, reuse = recipes[name], known.get(name) if seed == 0 else None
        if reuse is not None and reuse.recipe == recipe:
            run = reuse
        elif name == "tuned":
            run = train_recipe(recipe, dataset, seed, device, label=name)
        else:
            run = _timing_run(recipe, dataset, seed, device, EPOCHS_TIMED, name)
        rows.append({"variant": name, "seed": seed, "seconds": run.seconds, "run": run})
    return rows


def summarise(rows: list[dict]) -> list[dict]:
    """Per variant: median seconds and accuracy, and the spread of the time: the range over
    repeats, or with one repeat the range its epochs imply (setup + epochs x min/max epoch)."""
    out = []
    for name in dict.fromkeys(r["variant"] for r in rows):
        runs = [r["run"] for r in rows if r["variant"] == name]
        secs = [r.seconds for r in runs]
        if len(runs) > 1 or not runs[0].epoch_s:
            spread = (min(secs), max(secs))
        else:
            one = runs[0]
            fixed = one.seconds - one.recipe.epochs * statistics.median(one.epoch_s)
            spread = tuple(fixed + one.recipe.epochs * f(one.epoch_s) for f in (min, max))
        accs = [r.accuracy for r in runs if r.accuracy is not None]
        out.append(
            {
                "variant": name,
                "seconds": statistics.median(secs),
                "seconds_range": spread,
                "accuracy": statistics.median(accs) if accs else None,
                "reached": sum(a >= _target() for a in accs),
                "runs": len(runs),
                "timed_epochs": runs[0].epochs_timed,
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
            else f"timed on {s['timed_epochs']} epochs (accuracy not measured)"
        )
        lines.append(f"{s['variant']:>48}: {s['seconds']:6.1f} s [{lo:.1f}-{hi:.1f}]  {acc}")
    return "\n".join(lines)


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
        xlabel="seconds to train (labels: held-out accuracy)",
        title=f"Ablation: one technique undone at a time (target {_target():.0%})",
    )
    fig.tight_layout()
    return fig
