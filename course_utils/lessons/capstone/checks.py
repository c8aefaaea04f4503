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

Each call of the learner's run is watched (watch.py) and judged by rules.py before it is
timed: the model it returns must be built during that call and hold no weights from before
it (load_state_dict, copy.deepcopy and torch.load of earlier weights are seen); its
test-split reads fail as `held_out_accuracy`'s do (in DataLoader workers too); it must read
its training images (a later call reading under half the first one's kept them from an
earlier call). Each call is given the training split with its classes renamed
(splits.Relabelled, a different renaming per call) and its model is scored on the test split
under every renaming: one that scores better under another renaming learned from other data
than it was given. Accuracy is the median over the timed runs' models, so no run can train
less than the first. The probes cost about 10 ms per call (2,500 images, measured in CPU
seconds beside a plain decode), a ~50 ms tensor census and one pass over the test split.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import statistics
import time

import torch
from torch import nn
from tqdm.auto import tqdm

from ... import checks as harness
from ...checks import Threshold, at_least, check, correct
from ...device import amp_dtype, device_class, get_device, synchronize
from ...errors import HeldOutUsed
from ...measure import steady_cpu
from ...mode import pick
from . import rules
from .recipe import baseline, fit, target, tuned_recipe
from .splits import Relabelled, small_subset, training_set
from .watch import data_reads, module_births, precision_watch, stale, weight_sources

# Odd, so the median is one measured pair. Quick mode (a CPU, often shared): 3, the count
# the load evidence below was measured with. Full mode: 1. On a GPU the learner's run is
# GPU-bound and synchronised, so CPU load barely moves it, while load slows the baseline's
# per-image decoding, which only raises the ratio; on a CPU the CPU-seconds clock is the
# load-robust one measured below. One pair saves 2 whole runs: 5+ minutes on a T4.
PAIRS, FULL_PAIRS = 3, 1
BASELINE_EPOCHS_TIMED = 0.5  # the share of one baseline epoch timed per pair
SHIFTS = (3, 7, 1)  # call i's renaming: label k read as (k + SHIFTS[i % 3]) mod 10; never 0


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
        "reference, quick mode, offline data, classes renamed per call, 2-core Xeon "
        "(docs/results/capstone-check-under-load.md, 2026-12-02): idle 5/5 passed, median "
        "3.34x (3.24-3.38); beside 1 spinning process 10/10, 3.32x (3.26-3.37); beside 2, "
        "5/5, 3.33x (3.22-3.39). Wall clock with 2 threads had read 1.08-12x for the same "
        "answer; the unchanged baseline reads about 1x (test_lesson_11)",
        measured_on=("cpu-bf16",),
    ),
    "mps": Threshold(1.5, "not measured on MPS; the CPU margin"),
    # Quick mode on a GPU: the baseline reaches the target (8 epochs, measured on a CPU) and
    # decodes every image in the training process each epoch, so it is data-bound there; any
    # tuned loop that decodes once wins by far more than 2x. Full mode: FULL_GPU below.
    "cuda": Threshold(2.0, "quick mode; not measured on a GPU yet; the baseline is data-bound"),
    "cuda-tensorcore": Threshold(
        2.0, "quick mode; not measured on a GPU yet; the baseline is data-bound there"
    ),
}

# Full mode on a GPU. The baseline's 5 epochs (timed on half of one, projected) stop short of
# 94%, so its time is a lower bound of its time to target, and the tuned recipe trains 16
# epochs at batch 512: 3.2x the baseline's FLOPs. What is left of the ratio is what 16-bit
# tensor cores buy over fp32, which depends on the GPU. By the run-time estimator's rates
# (docs/results/capstone-full-mode-estimate.md, `python scripts/capstone_estimates.py`; none
# measured on a GPU yet) the reference reads 5.3x on an A100, 4.6x on an H100, 3.4x on a V100
# and 1.29x on a T4, whose fp16 tensor cores reach a small share of their peak. On a GPU
# without tensor cores the tuned run has nothing to make its 3.2x FLOPs cheaper.
FULL_GPU = {
    "bf16": Threshold(
        2.0,
        "estimated reference ratio (docs/results/capstone-full-mode-estimate.md): A100 5.3x, "
        "H100 4.6x; not measured on a GPU yet",
    ),
    "fp16": Threshold(
        1.15,
        "estimated reference ratio (docs/results/capstone-full-mode-estimate.md): T4 1.29x, "
        "V100 3.4x, a lower bound (the baseline's 5 epochs stop short of the target); the "
        "unchanged baseline reads about 1.0x; not measured on a GPU yet",
    ),
}
NO_TENSOR_CORES = (
    "on a GPU without tensor cores nothing makes the tuned recipe's 16 epochs at batch 512 "
    "cheaper than the baseline's fp32 ones (3.2x the FLOPs of its 5 epochs), and the "
    "baseline's own time to 94% is not measured in full mode"
)


def time_threshold(device: torch.device | None = None) -> Threshold | None:
    """The time part's threshold here, in the mode in force; None where it cannot show (full
    mode on a GPU without tensor cores)."""
    device = device or get_device()
    cls = device_class(device)
    if device.type != "cuda" or pick(quick=True, full=False):
        return THRESHOLDS[cls]
    if cls == "cuda":
        return None
    return FULL_GPU["fp16" if amp_dtype(device) == torch.float16 else "bf16"]


def cpu_seconds() -> float:
    """CPU seconds of this process (all threads) and of its child processes that finished."""
    try:
        import resource
    except ImportError:  # Windows: this process only
        return time.process_time()
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + kids.ru_utime + kids.ru_stime


def _learner_run(speedrun, dataset) -> rules.LearnerRun:
    """The learner's whole run, synchronised, its precision, module constructions, weight
    sources and data reads watched, held-out reads caught (the test split's images
    included). The watches start before the clocks: the tensor census costs ~50 ms."""
    device = get_device()
    harness.held_out_reads.clear()
    children = set(multiprocessing.active_children())
    threads = torch.get_num_threads()  # a learner's set_num_threads must not reach the baseline
    watches = precision_watch(), module_births(), data_reads(), weight_sources()
    with contextlib.ExitStack() as stack:
        seen, born, reads, sources = (stack.enter_context(w) for w in watches)
        synchronize(device)
        t0, cpu0 = time.perf_counter(), cpu_seconds()
        try:
            model = speedrun(dataset)
        finally:
            torch.set_num_threads(threads)
        synchronize(device)
        wall, cpu = time.perf_counter() - t0, cpu_seconds() - cpu0
        earlier = sources.from_before(model) if isinstance(model, nn.Module) else {}
    if harness.held_out_reads:  # raised inside, and caught by the learner's own code
        raise HeldOutUsed(harness.held_out_reads[0])
    still_running = set(multiprocessing.active_children()) - children
    on_cpu_clock = device.type == "cpu" and not still_running
    old = stale(model, born) if isinstance(model, nn.Module) else []
    raw = getattr(dataset, "raw_reads", 0) + reads.sent
    clock = cpu if on_cpu_clock else None
    return rules.LearnerRun(wall, clock, model, seen, old, len(reads.train), raw, earlier)


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


@check(
    "11-speedrun",
    points=4,
    hint="Read which part failed. Accuracy: did your run train enough, at a rate and schedule "
    "that suit its batch? Time: where does your run spend it? Section 3's ablation and "
    "cu.diagnose show what each lesson's technique is worth on your device class; keep "
    "only what pays there. Never look at the test split, and return the trained model.",
)
def check_speedrun(speedrun):
    dataset, cls = training_set(), device_class()
    threshold = time_threshold()
    ratios, accuracies, clocks = [], [], set()
    first: rules.LearnerRun | None = None
    with steady_cpu(1):
        _warm_up(dataset)
        n_pairs = pairs()
        # leave=False: a run cut short (not written yet, a rule broken) must not leave a bar
        # stuck at 0/6 above the verdict, which reports every ratio anyway
        bar = tqdm(total=2 * n_pairs, desc="check: interleaved runs", unit="run", leave=False)
        with bar:
            for i in range(n_pairs):
                if i % 2:  # the baseline first in every other pair
                    base = _baseline_seconds(dataset, seed=i)
                    bar.update()
                shift = SHIFTS[i % len(SHIFTS)]
                run = _learner_run(speedrun, Relabelled(dataset, shift))
                bar.update()
                first = first or run
                if broken := rules.before_timing(first, run, i):
                    return broken  # nothing (more) to time: say what is wrong now
                scores = rules.scores(run.model)
                if broken := rules.learned_given_labels(scores, shift, i):
                    return broken
                accuracies.append(scores[shift])
                wall, cpu = run.wall, run.cpu
                if not i % 2:
                    base = _baseline_seconds(dataset, seed=i)
                    bar.update()
                ratios.append(base[0] / wall if cpu is None else base[1] / cpu)
                clocks.add("wall-clock" if cpu is None else "CPU")
                bar.set_postfix_str("ratios " + ", ".join(f"{r:.2f}x" for r in ratios))
    ratio, accuracy = statistics.median(ratios), statistics.median(accuracies)
    measured = ", ".join(f"{r:.2f}" for r in ratios)
    scored = (
        f"the median of your {n_pairs} timed runs' models scores {accuracy:.1%} "
        f"({', '.join(f'{a:.1%}' for a in accuracies)})"
        if n_pairs > 1
        else f"your model scores {accuracy:.1%}"
    )
    what = (
        f"baseline training time / yours, median of {n_pairs} interleaved "
        f"{'pairs' if n_pairs > 1 else 'pair'} on {cls}, "
        f"{' and '.join(sorted(clocks))} seconds ({measured})"
    )
    return [
        correct(
            "held-out accuracy",
            accuracy >= target(),
            f"{scored} on the held-out test split, its classes renamed as in the train_set "
            f"each run was given (the check's guard saw your code read none of it); the target "
            f"is {target():.0%}",
            value=accuracy,
            threshold=target(),
            better="higher",
        ),
        at_least(
            "time to target",
            ratio,
            threshold.value if threshold else 0.0,
            what,
            applies=threshold is not None,
            reason=NO_TENSOR_CORES,
        ),
    ]
