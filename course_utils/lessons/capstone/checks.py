"""The capstone's check: a speed-run must reach the target on held-out data, without reading
it, faster than the course's baseline by a device-aware margin.

Timing: after a warm-up, pairs() interleaved pairs (the learner's whole run and the baseline,
the order alternating pair by pair), graded on the median of the pair ratios. The baseline
side times half of one epoch per pair (every step is the same work: setup + steps x the
median step), so its cost does not grow with the epochs it would need.

What is timed is what the learner wants: wall-clock time to target on their machine, with
nothing else running. On a GPU that is the synchronised wall time. On a CPU both sides run on
one thread and are timed in CPU seconds (this process and its finished child processes): on
one thread, with nothing else running, that equals the wall time; beside other work it does
not grow while the core is taken away, and wall time does (the issue saw 1.08x to 12x for the
same answer, timed on the wall clock with two threads). A run that leaves child processes
running (persistent DataLoader workers), whose work CPU seconds would miss, is timed on the
wall clock instead.

Each call of the learner's run is watched (watch.py): the model it returns must be built during
that call (every call trains from scratch), its test-split reads fail as `held_out_accuracy`'s
do, and a later call that reads under half the training images the first one read kept its
decoded images from an earlier call, which takes data preparation out of the time. The probes
cost about 10 ms per call (2,500 images, measured in CPU seconds beside a plain decode).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import nn
from tqdm.auto import tqdm

from ... import checks as harness
from ...checks import Threshold, at_least, check, correct
from ...device import device_class, get_device, synchronize
from ...errors import HeldOutUsed
from ...measure import steady_cpu
from ...mode import pick
from .recipe import baseline, fit, target, tuned_recipe
from .splits import held_out_accuracy, small_subset, training_set
from .watch import data_reads, float32_refused, module_births, stale

# Odd, so the median is one measured pair. Quick mode (a CPU, often shared): 3, the count
# the load evidence below was measured with. Full mode: 1. On a GPU the learner's run is
# GPU-bound and synchronised, so CPU load barely moves it, while load slows the baseline's
# per-image decoding, which only raises the ratio; on a CPU the CPU-seconds clock is the
# load-robust one measured below. One pair saves 2 whole runs: 5+ minutes on a T4.
PAIRS, FULL_PAIRS = 3, 1
BASELINE_EPOCHS_TIMED = 0.5  # the share of one baseline epoch timed per pair


def pairs() -> int:
    """How many interleaved pairs the check times, in the mode in force."""
    return pick(quick=PAIRS, full=FULL_PAIRS)


THRESHOLDS = {
    # baseline time / learner time, median of 3 pairs, one thread per side, CPU seconds (see
    # the module docstring). Measured with scripts/busy_benchmark.py --check 11: the reference's
    # ratio beside 0/1/2 spinning processes on an otherwise idle 2-core cpu-bf16 machine: see the
    # evidence string; the unchanged baseline reads 1.0-1.1x.
    "cpu": Threshold(1.5, "the cpu-bf16 margin; the reference runs fp32 here (no bf16 gain)"),
    "cpu-bf16": Threshold(
        1.5,
        "reference, quick mode, offline data (docs/results/capstone-check-under-load.md), full "
        "baseline epoch per pair, 2-core Xeon: idle 3/3 passed, median 3.95x (3.68-4.06); beside "
        "1 spinning process 10/10, 3.85x (3.68-4.02); beside 2, 5/5, 3.71x (3.61-3.88). Half a "
        "baseline epoch per pair, 2-core EPYC at load 9-13 plus 1 spinning process: 3/3, 3.70x "
        "(3.65-3.84). Wall clock with 2 threads had read 1.08-12x; the unchanged baseline reads "
        "about 1x (test_lesson_11)",
        measured_on=("cpu-bf16",),
    ),
    "mps": Threshold(1.5, "not measured on MPS; the CPU margin"),
    # The baseline decodes every image in the training process each epoch: on a GPU it is
    # data-bound, so any tuned loop that removes that wins by far more than 2x.
    "cuda": Threshold(2.0, "not measured on a GPU yet; the baseline is data-bound there"),
    "cuda-tensorcore": Threshold(2.0, "not measured on a GPU yet; the baseline is data-bound"),
}


@contextlib.contextmanager
def precision_watch() -> Iterator[dict[str, int]]:
    """Counts fp16 autocast regions entered and losses scaled by an enabled GradScaler, for
    as long as the block runs (torch's classes patched, then put back)."""
    seen = {"fp16": 0, "scaled": 0}
    autocast_cls, scaler_cls = torch.amp.autocast_mode.autocast, torch.amp.GradScaler
    enter, scale = autocast_cls.__enter__, scaler_cls.scale

    def watched_enter(self):
        if self._enabled and self.fast_dtype == torch.float16:
            seen["fp16"] += 1
        return enter(self)

    def watched_scale(self, outputs):
        if self.is_enabled():
            seen["scaled"] += 1
        return scale(self, outputs)

    autocast_cls.__enter__, scaler_cls.scale = watched_enter, watched_scale
    try:
        yield seen
    finally:
        autocast_cls.__enter__, scaler_cls.scale = enter, scale


def cpu_seconds() -> float:
    """CPU seconds of this process (all threads) and of its child processes that finished."""
    try:
        import resource
    except ImportError:  # Windows: this process only
        return time.process_time()
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + kids.ru_utime + kids.ru_stime


@dataclass
class LearnerRun:
    """One timed call of the learner's speed-run and what was watched during it."""

    wall: float
    cpu: float | None  # None where CPU seconds would not be the whole run
    model: object
    seen: dict[str, int]  # fp16 regions and scaled losses (precision_watch)
    stale: list[str]  # modules of the returned model built before the call
    images_read: int  # distinct training images read (the data set's __getitem__)


def _learner_run(speedrun, dataset) -> LearnerRun:
    """The learner's whole run, synchronised, its precision, module constructions and data
    reads watched, held-out reads caught (the test split's images included)."""
    device = get_device()
    harness.held_out_reads.clear()
    children = set(multiprocessing.active_children())
    threads = torch.get_num_threads()  # a learner's set_num_threads must not reach the baseline
    with precision_watch() as seen, module_births() as born, data_reads() as reads:
        synchronize(device)
        t0, cpu0 = time.perf_counter(), cpu_seconds()
        try:
            model = speedrun(dataset)
        finally:
            torch.set_num_threads(threads)
        synchronize(device)
        wall, cpu = time.perf_counter() - t0, cpu_seconds() - cpu0
    if harness.held_out_reads:  # raised inside, and caught by the learner's own code
        raise HeldOutUsed(harness.held_out_reads[0])
    still_running = set(multiprocessing.active_children()) - children
    on_cpu_clock = device.type == "cpu" and not still_running
    old = stale(model, born) if isinstance(model, nn.Module) else []
    return LearnerRun(wall, cpu if on_cpu_clock else None, model, seen, old, len(reads.train))


def _baseline_seconds(dataset, seed: int) -> tuple[float, float]:
    """(wall, CPU) seconds of the whole baseline, from its first BASELINE_EPOCHS_TIMED epoch
    timed in two segments."""
    recipe = baseline()
    per_epoch = len(dataset) // recipe.batch_size
    timed = 2 * max(1, round(BASELINE_EPOCHS_TIMED * per_epoch / 2))
    run = fit(
        recipe,
        dataset,
        seed,
        max_steps=timed,
        segment_steps=timed // 2,
        label="baseline",
        leave=False,
    )
    steps = recipe.epochs * per_epoch
    return run.projected(steps, "wall"), run.projected(steps, "cpu")


def _warm_up(dataset) -> None:
    """A few steps of both recipes, untimed: lazy initialisation, kernel selection and the
    allocator's first requests are paid here, not by whichever side runs first."""
    for recipe in (tuned_recipe(), baseline()):
        part = small_subset(dataset, 3, recipe.batch_size)
        fit(recipe, part, epochs=1, label="warm-up", leave=False)


def _rules(run: LearnerRun) -> list:
    """What the first run must satisfy before it is worth timing; failing parts, or none."""
    model, seen = run.model, run.seen
    if not isinstance(model, nn.Module):
        what = f"speedrun returned {type(model).__name__}, expected the trained nn.Module"
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
    if refused := float32_refused(model, get_device()):
        return [
            correct(
                "takes float32 images",
                False,
                f"the model you returned holds {refused}. The returned model must take "
                "float32 images, as it is judged on them: cast it back (model.float()) before "
                "returning it, or keep float32 weights and autocast the compute (lesson 04)",
            )
        ]
    return _fresh(run, 0)


def _fresh(run: LearnerRun, i: int) -> list:
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


def _decodes_each_call(first: LearnerRun, run: LearnerRun, i: int) -> list:
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


@check(
    "11-speedrun",
    points=4,
    hint="Decode the images once per run and keep them on the device; train at a larger batch "
    "with a one-cycle schedule for just enough epochs; autocast where your device class says "
    "it pays (fp16 through a GradScaler, bf16 without); no bias before BatchNorm; no .item() "
    "per step. "
    "Never look at the test split. Return the trained model.",
)
def check_speedrun(speedrun):
    dataset, cls = training_set(), device_class()
    threshold = THRESHOLDS[cls].value
    ratios, models, clocks = [], [], set()
    first: LearnerRun | None = None
    with steady_cpu(1):
        _warm_up(dataset)
        n_pairs = pairs()
        with tqdm(total=2 * n_pairs, desc="check: interleaved runs", unit="run") as bar:
            for i in range(n_pairs):
                if i % 2:  # the baseline first in every other pair
                    base = _baseline_seconds(dataset, seed=i)
                    bar.update()
                run = _learner_run(speedrun, dataset)
                bar.update()
                first = first or run
                broken = (
                    _rules(run) if i == 0 else _fresh(run, i) or _decodes_each_call(first, run, i)
                )
                if broken:
                    return broken  # nothing (more) to time: say what is wrong now
                wall, cpu, model = run.wall, run.cpu, run.model
                if not i % 2:
                    base = _baseline_seconds(dataset, seed=i)
                    bar.update()
                models.append(model)
                ratios.append(base[0] / wall if cpu is None else base[1] / cpu)
                clocks.add("wall-clock" if cpu is None else "CPU")
                bar.set_postfix_str("ratios " + ", ".join(f"{r:.2f}x" for r in ratios))
        accuracy = held_out_accuracy(models[0])
    ratio = statistics.median(ratios)
    measured = ", ".join(f"{r:.2f}" for r in ratios)
    return [
        correct(
            "held-out accuracy",
            accuracy >= target(),
            f"your model scores {accuracy:.1%} on the held-out test split (the check's guard "
            f"saw your code read none of it); the target is {target():.0%}",
            value=accuracy,
            threshold=target(),
        ),
        at_least(
            "time to target",
            ratio,
            threshold,
            f"baseline training time / yours, median of {n_pairs} interleaved "
            f"{'pairs' if n_pairs > 1 else 'pair'} on {cls}, "
            f"{' and '.join(sorted(clocks))} seconds ({measured})",
        ),
    ]
