"""A speed-run recipe: one choice per lever the course taught, and the loop that trains with it.

`batches` serves a recipe's training rows; `make_model` and `make_optimizer` build what it
names; `training` trains, timed in segments of steps (both clocks, synchronised at each end), so
the check and the ablation can time runs interleaved and project a partial run to its whole:
every step of a recipe is the same work (rows x row_len token slots, whatever the lever)."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from torch import nn

from ...checks import reference
from ...device import amp_dtype, autocast, device_class, get_device, synchronize
from ...mode import pick
from .model import GPT, lm_loss
from .text import IGNORE, row_len


@dataclass(frozen=True)
class Recipe:
    """One choice per lever, and the lesson that measured it. `steps` x `rows` x row_len() is
    the token budget: the slots the run trains on."""

    steps: int
    rows: int = 8  # 02: rows (documents or packed windows) per batch
    lr: float = 1e-3  # a constant rate, or the schedule's peak
    schedule: bool = False  # 01: linear warm-up then cosine decay, instead of a constant rate
    attention: str = "naive"  # 12: "naive" (the scores stored) or "sdpa" (fused)
    packing: bool = False  # 12: rows cut from the running text, no padding
    fused_optimizer: bool = False  # 10: fused (GPU) / foreach (CPU) AdamW kernels
    amp: bool = False  # 04: bf16 autocast (where the device has fast bf16)
    compile: bool = False  # 12, 14: torch.compile of the model (compile time counts)
    checkpointing: bool = False  # 07: recompute each block's activations in the backward

    def slots(self) -> int:
        """Token slots the run trains on (padding included)."""
        return self.steps * self.rows * row_len()


# The loss to reach on the validation text (mean nats per byte; ln 256 = 5.55 at the start).
# Quick mode, measured on a 2-core cpu-bf16 machine beside other work, one thread, CPU seconds,
# seed 0, plain text (/tmp calibration runs, 2026-12-07, torch 2.14): the baseline below reads
# 1.759 after 1,998 steps (61 s), 1.561 after 2,664 (81 s), 1.437 after 3,330 (102 s), 1.398
# after its 4,000 (124 s); the reference recipe (reference.py) 1.593 after 800 of its 1,200
# steps (39 s), 1.468 after 1,000 (48 s), 1.413 after 1,200 (56 s). Full mode's is an
# estimate until a GPU measures it (demo.FULL_TARGETS).
def target(device: torch.device | None = None) -> float:
    """The validation loss to reach in the mode in force; full mode's by device class."""
    return pick(quick=1.45, full=FULL_TARGETS[target_class(device)])


# Full mode (d_model 128, 4 layers, rows of 256 bytes, baseline 12,000 steps): ESTIMATES, not
# measured on any of these classes yet. A GPU runs the larger model's recipe long enough to
# reach lower; a CPU gets the quick model's reach plus a margin for its larger rows.
FULL_TARGETS = {"cpu": 1.6, "T4": 1.5, "A100/H100": 1.4}


def target_class(device: torch.device | None = None) -> str:
    """Which of FULL_TARGETS a device falls in: no CUDA, fp16 tensor cores (T4-class), bf16
    (A100/H100-class)."""
    device = device or get_device()
    if device.type != "cuda":
        return "cpu"
    return "A100/H100" if amp_dtype(device) == torch.bfloat16 else "T4"


def baseline() -> Recipe:
    """The first loop most of us write: one padded document per row, 8 rows, hand-written
    attention, a constant Adam-style rate, torch's default optimizer kernels, fp32."""
    return Recipe(steps=pick(quick=4000, full=12000))  # quick: 1.398 after 4,000 (see target)


def lever_names() -> tuple[str, ...]:
    """The levers (Recipe fields past steps/rows/lr) an ablation undoes one at a time."""
    return (
        "schedule",
        "attention",
        "packing",
        "fused_optimizer",
        "amp",
        "compile",
        "checkpointing",
    )


def bf16_pays(device: torch.device | None = None) -> bool:
    """Where lesson 04 measured bf16 autocast to pay: tensor-core GPUs and bf16 CPUs."""
    return device_class(device) in ("cuda-tensorcore", "cpu-bf16")


def make_model(recipe: Recipe, device=None) -> nn.Module:
    device = device or get_device()
    model = GPT(attention=recipe.attention, checkpointing=recipe.checkpointing).to(device)
    return torch.compile(model) if recipe.compile else model


def make_optimizer(recipe: Recipe, params, device=None) -> torch.optim.Optimizer:
    """AdamW; the fused kernel on a GPU, foreach on a CPU, where the recipe asks (lesson 10)."""
    device = device or get_device()
    if not recipe.fused_optimizer:
        return torch.optim.AdamW(params, recipe.lr, foreach=False)
    if device.type == "cuda":
        return torch.optim.AdamW(params, recipe.lr, fused=True)
    return torch.optim.AdamW(params, recipe.lr, foreach=True)


def rate(recipe: Recipe, step: int) -> float:
    """The learning rate at `step`: constant, or 5% linear warm-up then cosine to 10%."""
    if not recipe.schedule:
        return recipe.lr
    warm = max(1, recipe.steps // 20)
    if step < warm:
        return recipe.lr * (step + 1) / warm
    done = (step - warm) / max(1, recipe.steps - warm)
    return recipe.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(done, 1.0))))


def batches(recipe: Recipe, text, generator: torch.Generator) -> Iterator[tuple]:
    """(tokens, targets) of `recipe.rows` x row_len(), forever. Unpacked: documents drawn at
    random, one per row, padded at the end (IGNORE targets). Packed: windows of the running
    text (every document followed by a newline), every slot a real target (nanoGPT's loader)."""
    T = row_len()
    if recipe.packing:
        stream = torch.cat([torch.cat([d, d.new_tensor([10])]) for d in text])
        while True:
            start = torch.randint(0, len(stream) - T - 1, (recipe.rows,), generator=generator)
            chunk = stream[start[:, None] + torch.arange(T + 1)]
            yield chunk[:, :-1], chunk[:, 1:]
    docs = list(text)
    while True:
        tokens = torch.zeros(recipe.rows, T, dtype=torch.long)
        targets = torch.full((recipe.rows, T), IGNORE, dtype=torch.long)
        for r, i in enumerate(torch.randint(0, len(docs), (recipe.rows,), generator=generator)):
            d = docs[int(i)]
            tokens[r, : len(d)] = d
            targets[r, : len(d) - 1] = d[1:]
        yield tokens, targets


@dataclass(frozen=True)
class Segment:
    steps: int
    wall_s: float
    cpu_s: float


@dataclass
class Trained:
    """What `training` did so far: the model, its setup time and its timed segments."""

    model: nn.Module
    setup_s: float
    setup_cpu_s: float
    segments: list[Segment] = field(default_factory=list)
    steps: int = 0
    real: int = 0  # targets that carried loss in the timed segments (padding excluded)

    def per_real_token(self, clock: str = "cpu") -> float:
        """Seconds per target that carried loss, over the timed segments."""
        return sum(getattr(s, f"{clock}_s") for s in self.segments) / max(self.real, 1)

    def projected(self, steps: int, clock: str = "cpu") -> float:
        """Setup + `steps` x the time per step over the segments timed (every step the same work)."""
        setup = self.setup_s if clock == "wall" else self.setup_cpu_s
        done = sum(s.steps for s in self.segments)
        return setup + steps * sum(getattr(s, f"{clock}_s") for s in self.segments) / done


def _clocks() -> tuple[float, float]:
    return time.perf_counter(), time.thread_time()


@reference
def training(
    recipe: Recipe, text, seed: int = 0, *, max_steps: int | None = None, segment_steps=None
) -> Iterator[Trained]:
    """Train a fresh model with `recipe` on `text`, yielding after each timed segment of
    `segment_steps` steps (default: the whole run in one), up to `max_steps` (default: the
    recipe's). Times on one thread are this thread's CPU seconds (steady beside other work)."""
    device = get_device()
    t0, c0 = _clocks()
    torch.manual_seed(seed)
    model = make_model(recipe, device)
    opt = make_optimizer(recipe, model.parameters(), device)
    data = batches(recipe, text, torch.Generator().manual_seed(seed))
    synchronize(device)
    t1, c1 = _clocks()
    run = Trained(model, t1 - t0, c1 - c0)
    total = recipe.steps if max_steps is None else min(max_steps, recipe.steps)
    per = segment_steps or total
    while run.steps < total:
        t0, c0 = _clocks()
        n = min(per, total - run.steps)
        for _ in range(n):
            for g in opt.param_groups:
                g["lr"] = rate(recipe, run.steps)
            tokens, targets = next(data)
            run.real += int((targets != IGNORE).sum())  # on the host: no device sync
            tokens, targets = tokens.to(device, non_blocking=True), targets.to(device)
            with autocast(device, enabled=recipe.amp, dtype=amp_dtype(device)):
                loss = lm_loss(model(tokens), targets)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            run.steps += 1
        synchronize(device)
        t1, c1 = _clocks()
        run.segments.append(Segment(n, t1 - t0, c1 - c0))
        yield run


@reference
def fit(recipe: Recipe, text, seed: int = 0, **options) -> Trained:
    """`training` to its end: the trained run."""
    run = None
    for run in training.__wrapped__(recipe, text, seed, **options):  # noqa: B007
        pass
    return run
