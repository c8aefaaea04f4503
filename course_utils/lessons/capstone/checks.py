"""The capstone's check: a speed-run must reach the target on held-out data, without reading
it, faster than the course's baseline by a device-aware margin.

Where each part runs: the learner's run in the learner's kernel, watched there
(probes.speedrun_watched); the baseline, the held-out labels and every decision here, where
the check runs (the judge, under `course grade`). The learner's model never leaves the
kernel: the check sends it the held-out images, in an order drawn per run, and scores the
classes it returns against labels the kernel never sees.

Timing: after a warm-up (the tuned recipe's first steps in the learner's kernel, the
baseline's here), pairs() interleaved pairs (the learner's whole run and the baseline, the
order alternating pair by pair), graded on the median of the pair ratios. The baseline side
times half of one epoch per pair (every step is the same work: setup + steps x the median
step), so its cost does not grow with the epochs it would need.

What is timed is what the learner wants: wall-clock time to target on their machine, with
nothing else running. On a GPU that is the synchronised wall time, read on this side's clock
around the probe (so the probe's own work, a tensor census and one pass over the held-out
images, counts against the run, never for it). On a CPU both sides run on one thread and are
timed in CPU seconds (the process and its finished child processes; the learner's read in its
kernel): on one thread, with nothing else running, that equals the wall time; beside other
work it does not grow while the core is taken away, and wall time does (the issue saw 1.08x
to 12x for the same answer, timed on the wall clock with two threads). A run that leaves
child processes running (persistent DataLoader workers), whose work CPU seconds would miss,
is timed on the wall clock instead.

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

import dataclasses
import statistics

import torch
from tqdm.auto import tqdm

from ...checks import Threshold, at_least, check, correct
from ...device import amp_dtype, device_class, get_device
from ...errors import HeldOutUsed
from ...measure import steady_cpu
from ...mode import pick
from ...probes import observe, observe_timed, specimen_rng
from . import rules
from .probes import kernel_warm_up, speedrun_watched
from .recipe import baseline, fit, target, tuned_recipe
from .splits import NUM_CLASSES, held_out_set, small_subset, training_set

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


def _order(n: int, seed: int) -> torch.Tensor:
    """The order the held-out images are sent in: as stored for seed 0 (a notebook), else a
    permutation drawn from `seed`, so predictions must follow the images, not the files."""
    if seed == 0:
        return torch.arange(n)
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed))


def _shifts(rng) -> list[int]:
    """Each call's renaming, SHIFTS moved by one offset drawn per run (the first, 0, in a
    notebook): distinct from call to call, never 0, any of the 9 (the tuned epochs' evidence
    covers every renaming)."""
    offset = rng.choice(range(NUM_CLASSES - 1))
    return [(s - 1 + offset) % (NUM_CLASSES - 1) + 1 for s in SHIFTS]


def _learner_run(speedrun, shift: int, images: torch.Tensor) -> rules.LearnerRun:
    """The learner's whole run, in its kernel (probes.speedrun_watched): on the wall clock
    timed from here around the probe, on the CPU clock as read there. A test-split read
    fails the check here, whether the learner's code raised it or caught it."""
    seen, elapsed = observe_timed(speedrun_watched, speedrun, shift, images)
    if seen["held_out"] is not None:
        raise HeldOutUsed(str(seen["held_out"]))
    on_cpu_clock = get_device().type == "cpu" and not seen["children_left"]
    return rules.LearnerRun(
        wall=elapsed,
        cpu=float(seen["cpu"]) if on_cpu_clock else None,
        model_type=str(seen["model_type"]),
        seen={k: int(v) for k, v in seen["seen"].items()},
        stale=list(seen["stale"]),
        images_read=int(seen["images_read"]),
        raw_reads=int(seen["raw_reads"]),
        from_before=dict(seen["from_before"]),
        is_module=bool(seen["is_module"]),
        refused=seen["refused"],
        refused_raised=seen["refused_raised"],
        predicted=seen["predicted"],
        predict_raised=seen["predict_raised"],
    )


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
    """A few steps of the baseline, untimed: lazy initialisation, kernel selection and the
    allocator's first requests are paid here, not by whichever side runs first (the tuned
    recipe's warm up in the learner's kernel: probes.kernel_warm_up)."""
    recipe = baseline()
    part = small_subset(dataset, 3, recipe.batch_size)
    fit(recipe, part, epochs=1, label="warm-up", leave=False)


@check(
    "11-speedrun",
    points=4,
    hint="Read which part failed. Accuracy: did your run train enough, at a rate and schedule "
    "that suit its batch? Time: where does your run spend it? Section 3's ablation and "
    "cu.diagnose show what each lesson's technique is worth on your device class; keep "
    "only what pays there. Never look at the test split, and return the trained model.",
    in_kernel="on a CPU, the learner's run timed in CPU seconds of its kernel (and finished "
    "child processes); the run's watches (fp16 autocast regions and scaled losses, modules "
    "built, weights' sources, training images read, test-split reads); the returned model's "
    "classes for the held-out images the check sends (scored here against its own labels)",
)
def check_speedrun(speedrun):
    """# CHANGED in issue 34: the exercise no longer shows its answer. Notebook 11 printed the
    lesson's tuned recipe (epochs, batch, peak rate, autocast, layout) beside the baseline's
    above the exercise; it is printed with the ablation now, after this check, and the text
    says the FLOPs of "a recipe that reaches 94%" instead of the tuned one's. The check, its
    points and its thresholds are the same."""
    dataset, cls = training_set(), device_class()
    threshold = time_threshold()
    rng = specimen_rng()
    shifts = _shifts(rng)
    x, y = held_out_set()
    order = _order(len(y), rng.choice(range(2**31)))
    images, labels = x[order], y[order]
    ratios, accuracies, clocks = [], [], set()
    first: rules.LearnerRun | None = None
    with steady_cpu(1):
        observe(kernel_warm_up, speedrun, dataclasses.asdict(tuned_recipe()))
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
                shift = shifts[i % len(shifts)]
                run = _learner_run(speedrun, shift, images)
                bar.update()
                first = first or run
                if broken := rules.before_timing(first, run, i):
                    return broken  # nothing (more) to time: say what is wrong now
                if run.predict_raised is not None:
                    rules.reraise(run.predict_raised)
                scores = rules.scores(rules.Predictions(run.predicted, labels))
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
