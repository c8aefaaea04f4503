"""Lesson 11, the capstone: a speed-run to a target accuracy on held-out data.

A `Recipe` names one choice per lesson; `fit` trains with it and `held_out_accuracy` judges
the model on the test split, which no training code may read. The baseline recipe is the
plain loop a careful newcomer writes (lesson 03's naive data path, default optimizer
settings); the tuned recipe combines what the course taught.
"""

from __future__ import annotations

import statistics
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.utils.data import Dataset

from ...checks import reference
from ...device import (
    amp_dtype,
    autocast,
    channels_last_pays,
    device_class,
    get_device,
    synchronize,
)
from ...mode import pick
from ...models import ResNet9, SmallCNN
from ...progress import tqdm
from .data_path import Decoded, decode_all, device_batches, newcomer_loader


# Quick mode: the offline image set on a CPU. Full mode: CIFAR-10 at 94% on a GPU, the target
# of the published speed-runs (airbench94, hlb-CIFAR10, Myrtle's ResNet-9).
def target() -> float:
    """Held-out accuracy to reach. A function, not a constant: the notebook imports this
    module before `cu.setup` decides the mode (auto mode included), so the mode is read at use."""
    return pick(quick=0.80, full=0.94)


@dataclass(frozen=True)
class Recipe:
    """One choice per lesson; `epochs` is how long the run trains (chosen to reach target())."""

    epochs: int
    batch_size: int = 32  # 02
    one_cycle: bool = False  # 01: one-cycle schedule (AdamW) instead of a constant Adam rate
    lr: float = 1e-3  # the constant rate, or one-cycle's peak
    data_on_device: bool = False  # 03: decode once, augment and normalise on the device
    amp: bool = False  # 04: autocast in the device's fast dtype (fp16 with a GradScaler)
    channels_last: bool = False  # 05
    conv_bias: bool = True  # 09: a bias before each BatchNorm (redundant)
    sync_every_step: bool = True  # 10: loss.item() each step, a host-device sync on GPUs
    fused_optimizer: bool = False  # 10: fused (GPU) / foreach kernels; False: torch's default


# The newcomer's loop, for as many epochs as it needs to reach the target. Quick mode: held-out
# accuracy after each epoch, 2 seeds, 2,500 offline images, 1 thread: 30/25%, 40/31%, 46/40%,
# 51/44%, 64/63%, 70/63%, 70/76%, 92/85% (epoch 8), 92/90%. Full mode: 5 epochs of CIFAR-10,
# sized to a T4's budget; a constant Adam rate may stop short of 94% there (the notebook
# prints its accuracy), and then its time is a lower bound of its time to target: the
# speed-up is understated, never flattered.
def baseline() -> Recipe:
    """The newcomer's recipe in the mode in force (see target())."""
    return Recipe(epochs=pick(quick=8, full=5))


def __getattr__(name: str):
    """`lesson.TARGET` and `lesson.BASELINE` in the notebook, read after setup."""
    if name == "TARGET":
        return target()
    if name == "BASELINE":
        return baseline()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def tuned_recipe(device: torch.device | None = None) -> Recipe:
    """What the course recommends on this device class: autocast where lesson 04 measured that
    it pays (tensor-core GPUs, bf16 CPUs), channels_last where `cu.device.CHANNELS_LAST` (the
    table lesson 05 grades by) says it pays under that autocast: on tensor-core GPUs, not on
    bf16 CPUs. There it is faster, and a layout changes no formula, only the kernels and so
    the rounding; what was seen is one machine's observation, not a rule (quick mode, this
    recipe with `epochs` changed, held-out accuracy, seeds 0-4, one thread, 2-core EPYC,
    cpu-bf16, torch 2.14, issue 34): under bf16 autocast, after 4 epochs channels_last read
    79.4/81.4/84.5/79.2/90.3% and NCHW 90.7/89.6/92.8/89.4/91.5%; after the 5 epochs used here
    channels_last 91.7/96.0/97.9/95.6/96.1% and NCHW 93.6/93.6/98.2/95.1/83.6%. In float32
    after 4 epochs (seeds 0-2): 85.8/89.2/90.3% against 87.9/89.6/96.1%."""
    cls = device_class(device)
    # Quick mode (a CPU), held-out accuracy, n=1 each, 1 thread: batch 64 (lr 0.03) 55% after
    # 3 epochs, 91% after 5; batch 32 (lr 0.02) 71% after 3, 89% after 4. The check renames
    # the classes per call, which moves the result as a new seed would: over the 10 renamings
    # (2-core Xeon, cpu-bf16, seed 0; scripts/capstone_measure.py renamings 4 5) 4 epochs read
    # 82.7-94.1% (median 85.1%), 5 epochs 92.5-97.5% (median 96.2%): 5, as 2.7 points of
    # margin were too few. A CPU's time per image is flat in the batch here (4.1 s CPU at 32
    # and 4.2 s at 64 for 7,500 images), so the smaller batch's extra steps are free: batch 32
    # on a CPU, 512 on a GPU (lesson 02).
    amp = cls in ("cuda-tensorcore", "cpu-bf16")
    return Recipe(
        epochs=pick(quick=5, full=16),
        batch_size=pick(quick=32, full=512),
        one_cycle=True,
        lr=pick(quick=0.02, full=0.004),
        data_on_device=True,
        amp=amp,
        channels_last=channels_last_pays(cls, autocast=amp),
        conv_bias=False,
        sync_every_step=False,
        fused_optimizer=True,
    )


def make_model(recipe: Recipe) -> nn.Module:
    if pick(quick=True, full=False):
        return SmallCNN(width=16, bias=recipe.conv_bias)
    return ResNet9(width=64, bias=recipe.conv_bias)


def make_optimizer(recipe: Recipe, params, device: torch.device) -> torch.optim.Optimizer:
    """The baseline keeps torch's defaults (Adam, no foreach/fused argument, as a newcomer
    writes it); the tuned recipe asks for the fused kernel on a GPU, foreach on a CPU."""
    kind = torch.optim.AdamW if recipe.one_cycle else torch.optim.Adam
    if not recipe.fused_optimizer:
        return kind(params, recipe.lr)
    if device.type == "cuda":
        return kind(params, recipe.lr, fused=True)
    return kind(params, recipe.lr, foreach=True)


def grad_scaler(recipe: Recipe, device: torch.device) -> torch.amp.GradScaler:
    """Enabled exactly where the recipe autocasts to fp16 (GPUs below compute capability 8,
    MPS): fp16's small range flushes small gradients to zero without it (lesson 04). bf16
    has float32's range and needs none."""
    fp16 = recipe.amp and amp_dtype(device) == torch.float16
    return torch.amp.GradScaler(device.type, enabled=fp16)


# --- training ----------------------------------------------------------------------------------


def clock_of(device: torch.device) -> str:
    """The clock a comparison reads here: "cpu" (CPU seconds of this process, run on one
    thread: steady beside other work) on a CPU, "wall" (synchronised) on a GPU."""
    return "cpu" if device.type == "cpu" else "wall"


@dataclass(frozen=True)
class Segment:
    """A stretch of training steps and its time on both clocks (synchronised at its end)."""

    steps: int
    wall_s: float
    cpu_s: float


@dataclass
class Trained:
    """What `fit` did: the model, its setup time and the time of each segment of steps (an
    epoch unless `fit` was asked for shorter ones)."""

    model: nn.Module
    setup_s: float  # model, optimizer and (data on the device) decoding, before the first step
    setup_cpu_s: float = 0.0  # the same, in CPU seconds of this process
    segments: list[Segment] = field(default_factory=list)
    steps: int = 0
    warmup: Segment | None = None  # the first steps, timed apart (see `training`)

    def per_step(self, clock: str, stat=statistics.median) -> float:
        return stat(getattr(s, f"{clock}_s") / s.steps for s in self.segments)

    def projected(self, steps: int, clock: str = "wall", stat=statistics.median) -> float:
        """The time of a run of `steps` steps: every step of a recipe is the same work (same
        data path, batch and model), so setup + steps x the median time per step measured
        (`stat=min` / `max`: the fastest / slowest segment's rate, for a spread)."""
        setup = self.setup_s if clock == "wall" else self.setup_cpu_s
        return setup + steps * self.per_step(clock, stat)

    def total(self, clock: str = "wall") -> float:
        setup = self.setup_s if clock == "wall" else self.setup_cpu_s
        return setup + sum(getattr(s, f"{clock}_s") for s in self.segments)


def _step(scaler: torch.amp.GradScaler, opt: torch.optim.Optimizer, sched, loss) -> None:
    scaler.scale(loss).backward()
    scaler.step(opt)  # skipped by the scaler when fp16 gradients overflowed
    scaler.update()
    if sched is not None:
        with warnings.catch_warnings():
            # a step the scaler skipped still advances one-cycle by one batch, on purpose:
            # asking whether it skipped would cost a host-device sync every step
            warnings.filterwarnings("ignore", "Detected call of `lr_scheduler.step", UserWarning)
            sched.step()


def _cpu_clock() -> float:
    """CPU seconds of this run. On one torch thread (the capstone's CPU setting), this
    thread's alone: under `course grade` the judge runs the baseline in the process that
    also serves papermill, whose work on the kernel's output must not count as the
    baseline's (a kernel printing in a loop would slow the baseline it is compared with)."""
    if torch.get_num_threads() == 1:
        return time.thread_time()
    return time.process_time()


@reference
def fit(recipe: Recipe, dataset: Dataset, seed: int = 0, device=None, **options) -> Trained:
    """Train a fresh model with `recipe` for `epochs` (default: the recipe's), or only its
    first `max_steps` steps (a timing run), timed in segments of `segment_steps` steps (default:
    one per epoch). A progress bar shows the epoch, the training accuracy and the time left."""
    run = None
    # the unguarded loop: fit's own guard already applies (a learner calling fit fails there)
    for run in training.__wrapped__(recipe, dataset, seed, device, **options):  # noqa: B007
        pass
    if run is None:
        raise ValueError(f"no training step: {len(dataset)} images, batch {recipe.batch_size}")
    return run


@reference
def training(
    recipe: Recipe,
    dataset: Dataset,
    seed: int = 0,
    device=None,
    *,
    epochs: int | None = None,
    max_steps: int | None = None,
    segment_steps: int | None = None,
    warmup_steps: int = 0,
    decoded: Decoded | None = None,
    label: str = "training",
    leave: bool = True,
    bar: tqdm | None = None,
) -> Iterator[Trained]:
    """`fit`, one segment at a time: yields the run after each timed segment, so that several
    recipes can be timed segment by segment, interleaved. The first `warmup_steps` steps are
    timed apart (`Trained.warmup`), outside the rate: the first steps pay one-time costs.
    `decoded`: the data set already decoded on the device by `decode_timed`; its measured
    time counts as this run's setup (the same work, done once for several runs). `bar`: a
    progress bar shared by several runs (the ablation's one), else the run opens its own."""
    device = torch.device(device) if device is not None else get_device()
    epochs = recipe.epochs if epochs is None else epochs
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    fmt = torch.channels_last if recipe.channels_last else torch.contiguous_format
    synchronize(device)
    start, start_cpu = time.perf_counter(), _cpu_clock()
    model = make_model(recipe).to(device, memory_format=fmt)
    opt = make_optimizer(recipe, model.parameters(), device)
    steps_per_epoch = len(dataset) // recipe.batch_size
    sched = (
        torch.optim.lr_scheduler.OneCycleLR(
            opt, recipe.lr, total_steps=recipe.epochs * steps_per_epoch
        )
        if recipe.one_cycle
        else None
    )
    scaler = grad_scaler(recipe, device)
    if recipe.data_on_device and decoded is None:
        x_all, y_all = decode_all(dataset, device)
    elif recipe.data_on_device:
        x_all, y_all = decoded.x, decoded.y
    else:
        loader = newcomer_loader(dataset, recipe.batch_size, generator)
    synchronize(device)
    run = Trained(model, time.perf_counter() - start, _cpu_clock() - start_cpu)
    if recipe.data_on_device and decoded is not None:
        run.setup_s, run.setup_cpu_s = run.setup_s + decoded.wall_s, run.setup_cpu_s + decoded.cpu_s
    total = (
        epochs * steps_per_epoch if max_steps is None else min(max_steps, epochs * steps_per_epoch)
    )
    own_bar = bar is None
    if own_bar:
        bar = tqdm(total=total, desc=label, unit="step", leave=leave)
    mark = [time.perf_counter(), _cpu_clock(), 0]  # segment start: wall, CPU, steps

    def close_segment() -> None:
        synchronize(device)
        wall, cpu = time.perf_counter(), _cpu_clock()
        done = Segment(run.steps - mark[2], wall - mark[0], cpu - mark[1])
        if warmup_steps and run.warmup is None:
            run.warmup = done
        else:
            run.segments.append(done)
        mark[:] = [wall, cpu, run.steps]

    def restart_clocks() -> None:
        mark[0], mark[1] = time.perf_counter(), _cpu_clock()

    def segment_full() -> bool:
        if warmup_steps and run.warmup is None:
            return run.steps == warmup_steps
        return bool(segment_steps) and run.steps - mark[2] == segment_steps

    try:
        for epoch in range(1, epochs + 1):
            correct, seen = torch.zeros((), device=device), 0
            batches = (
                device_batches(x_all, y_all, recipe.batch_size, generator)
                if recipe.data_on_device
                else loader
            )
            for x, y in batches:
                x = x.to(device, non_blocking=True, memory_format=fmt)
                y = y.to(device, non_blocking=True)
                with autocast(device, enabled=recipe.amp, dtype=amp_dtype(device)):
                    out = model(x)
                    loss = nn.functional.cross_entropy(out, y)
                opt.zero_grad(set_to_none=True)
                _step(scaler, opt, sched, loss)
                correct += (out.argmax(1) == y).sum()  # stays on the device: no sync
                seen += len(y)
                if recipe.sync_every_step:
                    loss.item()  # the habit lesson 10 removes: a host-device sync per step
                run.steps += 1
                bar.update()
                if not own_bar:
                    bar.set_postfix_str(f"{label}, step {run.steps}/{total}", refresh=False)
                if segment_full():
                    warming = bool(warmup_steps) and run.warmup is None
                    close_segment()
                    if not warming:  # the warm-up is not a segment a consumer waits for
                        yield run
                        restart_clocks()  # other runs may have trained while this one waited
                if run.steps == total:
                    break
            last = run.steps == total or epoch == epochs
            if run.steps > mark[2] and (not segment_steps or last):  # else segments span epochs
                close_segment()
                yield run
                restart_clocks()
            if own_bar:
                acc = float(correct) / seen
                bar.set_postfix_str(f"epoch {epoch}/{epochs}, train acc {acc:.1%}")
            if run.steps == total:
                break
    finally:  # also when a consumer stops early (`close()` on the generator)
        if own_bar:
            bar.close()
