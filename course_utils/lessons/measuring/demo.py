"""Lesson 00's workloads: a simulated asynchronous device, forward passes whose saved tensors
are worth counting, training steps with a hidden slow operator, and the CUDA-only tools.

A CPU runs kernels synchronously, so on a laptop a timer without synchronisation happens to
be right and a learner could never see the mistake. `SimulatedAccelerator` makes it visible
on any machine: like a CUDA stream it queues work on a background thread and returns at
once, and only `synchronize()` waits for the queue to drain.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function

from ...device import SimulatedAccelerator
from ...guards import lesson_tool
from ...models import MLP


def make_async_step(
    step_s: float = 0.03,
    slow_calls: int = 4,
    slow_s: float = 0.15,
    *,
    outlier_at: int | None = None,
    outlier_s: float = 0.0,
    fast_at: tuple[int, ...] = (),
    fast_s: float = 0.0,
) -> tuple[Callable[[], None], Callable[[], None]]:
    """A training step on a SimulatedAccelerator: `step_s` of queued work per call, and
    `slow_s` more on each of the first `slow_calls` calls. One-off costs rarely end after one
    call: cuDNN autotuning (`cudnn.benchmark`) tries algorithms per new shape, `torch.compile`
    compiles on first use and again on recompiles, the caching allocator grows over the first
    steps. Call number `outlier_at` (from 1) takes `outlier_s` more, as a step now and then
    does long after the warm-up (a garbage collection, a checkpoint, another process): the
    median of the samples ignores it, their mean does not. The calls numbered in `fast_at`
    queue only `fast_s` in all, as a smaller last batch of an epoch does: the median ignores
    them too, the fastest sample does not. Returns (step, synchronize)."""
    device, calls = SimulatedAccelerator(), [0]

    def step() -> None:
        calls[0] += 1
        if calls[0] in fast_at:
            device.launch(fast_s)
            return
        extra = slow_s if calls[0] <= slow_calls else 0.0
        device.launch(step_s + extra + (outlier_s if calls[0] == outlier_at else 0.0))

    return step, device.synchronize


def naive_time(step: Callable[[], None], repeats: int = 10) -> float:
    """How timing usually goes wrong: no warm-up, no synchronisation, a mean."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return sum(times) / len(times)


# --- forward passes whose saved-for-backward bytes the activation check compares ----------


class ChunkedAttention(nn.Module):
    """Attention-like block: q, k, v and a gate are *views* (chunks) of one activation, and
    autograd saves the whole activation (tanh) as well as three of its views (the matmuls)."""

    def __init__(self, dim: int = 32, width: int = 128, out: int = 10):
        super().__init__()
        self.fc, self.out = nn.Linear(dim, width), nn.Linear(width // 4, out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = torch.tanh(self.fc(x))
        q, k, v, _gate = a.chunk(4, dim=-1)
        weights = (q @ k.transpose(-1, -2)).softmax(-1)
        return self.out(weights @ v).sum()


def activation_cases(
    batch: int = 8, hidden: int = 256, depth: int = 3, width: int = 128, seq: int = 16
) -> dict[str, Callable[[], torch.Tensor]]:
    """Forward passes chosen so that each counting mistake changes the total by >= 15%:
    a small batch through large weights (parameters counted), ReLU outputs saved by two ops
    (double counting), and views of one storage at several offsets (views). `batch` (a small
    one: 4 to 12) sizes the MLP's batch and half of it the attention's; `hidden` and `depth`
    size the MLP, `width` (a multiple of 4: four chunks) and `seq` the attention. The checks
    vary them all; the defaults are the notebook's."""
    torch.manual_seed(0)
    mlp, attention = MLP(dim=64, hidden=hidden, depth=depth), ChunkedAttention(width=width)
    x_mlp, y_mlp = torch.randn(batch, 64), torch.randint(0, 10, (batch,))
    x_att = torch.randn(batch // 2, seq, 32)
    return {
        f"MLP(64->{hidden} x{depth}) + cross-entropy": lambda: F.cross_entropy(mlp(x_mlp), y_mlp),
        f"attention over chunked views, {width} wide": lambda: attention(x_att),
    }


# --- training steps with one operator that dominates self time ---------------------------


@torch.library.custom_op("course::autotune", mutates_args=())
def _autotune(x: torch.Tensor, seconds: float) -> torch.Tensor:
    """Stands for a first-call cost such as cuDNN's autotuning or a lazy initialisation: an
    operator that takes `seconds` (waiting, so that it costs a busy CPU nothing)."""
    time.sleep(seconds)
    return x.clone()


ONE_OFF_OP = "course::autotune"


def with_one_off(step: Callable[[], None], times: float) -> Callable[[], None]:
    """`step`, whose first call also runs ONE_OFF_OP for `times` the seconds that call's step
    took: sized from the very call it is in, the one-off cost tops a profile of that first call
    however loaded the machine (a stall that slows the step lengthens it too), and a profile
    after a warm-up call does not show it."""
    calls, token = [0], torch.zeros(1)

    def first_call_slow() -> None:
        calls[0] += 1
        start = time.perf_counter()
        step()
        if calls[0] == 1:
            torch.ops.course.autotune(token, min(times * (time.perf_counter() - start), 2.0))

    return first_call_slow


# the sort runs over 8 score tensors of different lengths (300k numbers in all at the first
# size), so that no one input shape of it holds as much self time as the wide layer's mm: a
# table grouped by input shape ranks the mm first
SORT_LENGTHS = tuple(range(34_000, 42_000, 1_000))
# one argsort of this many scores: aten::argsort only wraps aten::sort, so a ranking by total
# (inclusive) time names the wrapper, and by self time the sort inside it
RANKED_SCORES = 150_000
# Each step's two competing operators, by size (0: the second does not run): the checks draw
# sizes that make either of them the top one (slowest_op.draw_sizes); these, the first, are
# the notebook's steps. loop: cumsum and erfinv calls (65,536 numbers each); resize: the side
# of the bicubic and of the nearest upsampled images; sorts: the first of 8 lengths sorted
# (1,000 apart) and of 96 lengths whose median is taken (50 apart: many input shapes, none
# holding as much as the mm); argsort: the scores
# argsorted, and the points whose L1 distance to 128 centres cdist computes
HIDDEN_OP_SIZES = {
    "600 cheap calls in a loop": [600, 0],
    "resizing inside the step": [256, 0],
    "full sorts in the loss": [SORT_LENGTHS[0], 0],
    "hard examples by argsort": [RANKED_SCORES, 0],
}


def hidden_op_steps(sizes: dict | None = None) -> dict[str, Callable[[], None]]:
    """Training steps of small models where one operator takes most of the time, and it is
    not the one a reader would guess (the matmuls), nor the one with the largest total time
    (the `train_step` range that contains everything), nor the single slowest call, nor the
    largest row of a table grouped by input shape, nor an operator whose total time holds
    the top operator's (aten::argsort around aten::sort, aten::log_softmax around
    aten::_log_softmax). Each step has two candidates, sized by `sizes` (HIDDEN_OP_SIZES'
    keys; those not given are the notebook's): which one wins depends on the sizes."""
    sizes = {**HIDDEN_OP_SIZES, **(sizes or {})}
    n_cumsum, n_erfinv = sizes["600 cheap calls in a loop"]
    bicubic_px, nearest_px = sizes["resizing inside the step"]
    sort_first, median_first = sizes["full sorts in the loss"]
    n_ranked, n_points = sizes["hard examples by argsort"]
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
    x, y = torch.randn(256, 1024), torch.randint(0, 10, (256,))
    scores = [torch.randn(sort_first + 1_000 * k) for k in range(8)] if sort_first else []
    samples = [torch.randn(median_first + 50 * k) for k in range(96)] if median_first else []
    wide, xw, series = nn.Linear(1024, 1024), torch.randn(256, 1024), torch.randn(65_536)
    quantiles = torch.rand(65_536) * 0.98 + 0.01
    conv, images = nn.Conv2d(3, 16, 3, padding=1), torch.randn(16, 3, 32, 32)
    ranked, head = torch.randn(n_ranked), nn.Linear(1024, 10)
    points, centres = torch.randn(n_points, 64), torch.randn(128, 64)

    def sorted_regulariser() -> None:
        with record_function("train_step"):
            loss = F.cross_entropy(mlp(x), y)
            with record_function("regulariser"):
                top = sum(s.sort().values[-10:].sum() for s in scores)  # full sorts for 10 values
                mid = sum(s.median() for s in samples)
            (loss + 0 * top + 0 * mid).backward()

    def many_small_calls() -> None:
        with record_function("train_step"):
            h = wide(xw)
            running = inverse = series[:1]
            for _ in range(n_cumsum):  # a Python loop of cheap calls adds up
                running = series.cumsum(0)
            for _ in range(n_erfinv):
                inverse = quantiles.erfinv()
            (h.square().mean() + 0 * running[-1] + 0 * inverse[-1]).backward()

    def resize_in_the_step() -> None:
        with record_function("train_step"):
            with record_function("augment"):
                big = F.interpolate(
                    images, size=(bicubic_px, bicubic_px), mode="bicubic", align_corners=False
                )
                small = F.avg_pool2d(big, 8)
                extra = 0.0
                if nearest_px:
                    nearest = F.interpolate(images, size=(nearest_px, nearest_px), mode="nearest")
                    extra = nearest[..., ::97, ::97].sum()
            (conv(small).square().mean() + 0 * extra).backward()

    def hardest_by_argsort() -> None:
        with record_function("train_step"):
            loss = F.cross_entropy(head(x[:64]), y[:64])
            with record_function("hard_examples"):
                hardest = ranked.argsort(descending=True)[:10]  # a full sort for 10 indices
                far = torch.cdist(points, centres, p=1).amin(1) if n_points else ranked[:1]
            (loss + 0 * ranked[hardest].sum() + 0 * far.sum()).backward()

    return {  # the sorts late: a per-call answer fails on the loop first, and is told so
        "600 cheap calls in a loop": many_small_calls,
        "resizing inside the step": resize_in_the_step,
        "full sorts in the loss": sorted_regulariser,
        "hard examples by argsort": hardest_by_argsort,
    }


def single_call_probe() -> tuple[Callable[[], None], str]:
    """A step without matmuls whose slowest single call (one sort, ~5 ms) is not its top
    operator (600 cumsums, ~19 us each, twice the sort's time in all), and that slowest op's
    name: an answer that follows single calls names it here, a fixed guess names an operator
    that never ran."""
    scores, series = torch.randn(60_000), torch.randn(16_384)

    def probe() -> None:
        scores.sort()
        for _ in range(600):
            series.cumsum(0)

    return probe, "aten::sort"


# --- where the time goes: torch.profiler and the CUDA-only tools --------------------------


@lesson_tool  # exercise 4's fix: refused to the learner's slowest_op there
def profile_step(step: Callable[[], None], *, warmup: int = 1) -> profile:
    """Profile one call of `step()` after `warmup` calls (first calls pay one-off costs).
    CUDA activity is recorded too where there is a GPU."""
    for _ in range(warmup):
        step()
    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        step()
    return prof


def cuda_event_ms(fn: Callable[[], object], repeats: int = 10, warmup: int = 2) -> list[float]:
    """Milliseconds per call measured by CUDA events, recorded on the stream around each call:
    the GPU's own clock, no host synchronisation inside the timed region. `warmup` calls run
    first, synchronised: the first calls pay one-off costs (cuBLAS handle and workspace,
    cuDNN plans, the caching allocator's first blocks) that are no part of a step's time."""
    if not torch.cuda.is_available():
        raise RuntimeError("CUDA events need a CUDA device")
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    pairs = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        for _ in range(repeats)
    ]
    for start, end in pairs:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in pairs]


def memory_snapshot(fn: Callable[[], object], path: str | Path = "memory_snapshot.pickle") -> Path:
    """Record every CUDA allocation (with its stack) while `fn()` runs and dump the snapshot;
    drag the file onto https://pytorch.org/memory_viz to see memory over time."""
    if not torch.cuda.is_available():
        raise RuntimeError("the memory snapshot records the CUDA caching allocator")
    torch.cuda.memory._record_memory_history(max_entries=100_000)
    try:
        fn()
        torch.cuda.synchronize()
        torch.cuda.memory._dump_snapshot(str(path))
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    return Path(path)
