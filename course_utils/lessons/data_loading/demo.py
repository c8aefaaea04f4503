"""Lesson 03's workloads: the decode-heavy image set, loaders, a training step, the profile
of an epoch, scenarios whose loading and device time are known, the worker sweep, and the
four ways to copy a batch. Everything a worker touches is importable (spawn-safe)."""

from __future__ import annotations

import os
import statistics
import textwrap
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass

import psutil
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms as T

from ...data import CIFAR_MEAN, CIFAR_STD, OfflineImages, close_loader, train_transform
from ...device import SimulatedAccelerator
from ...measure import knee, time_fn
from ...mode import pick
from ...progress import tqdm
from .probes import no_parallel_reason, parallel_speedup

STORED_SIZE = 96  # px: JPEGs stored at 96x96 and resized to 32x32, so decoding dominates
BATCH = 64  # images per batch in every measurement of this lesson
DATA_BOUND = 0.5  # a step is data-bound when it waits for data longer than it computes


def n_images() -> int:
    """Images in the decode-heavy set: small in quick mode, an epoch of seconds otherwise."""
    return pick(quick=512, full=2048)


def usable_cpus() -> int:
    """CPUs this process may run on (respects cpusets, unlike os.cpu_count())."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


# --- data and loaders -------------------------------------------------------------------------


def uint8_transform() -> T.Compose:
    """Resize only: the image stays uint8 (C, H, W); normalising waits for the device."""
    return T.Compose([T.Resize(32), T.PILToTensor()])


def decode_heavy(
    n: int | None = None, *, stored_size: int = STORED_SIZE, as_uint8: bool = False
) -> OfflineImages:
    """The offline image set stored as larger JPEGs, so each item costs a real decode + resize."""
    transform = uint8_transform() if as_uint8 else train_transform(32, stored_size)
    return OfflineImages(n or n_images(), stored_size=stored_size, transform=transform)


def plain_loader(dataset: Dataset, batch_size: int = BATCH) -> DataLoader:
    """The default: every batch is loaded in the main process, between training steps."""
    return DataLoader(dataset, batch_size=batch_size, shuffle=True)


def run_epoch(loader: Iterable) -> int:
    """Iterate one epoch and return how many samples came out."""
    return sum(len(y) for _, y in loader)


def train_step(
    model: nn.Module, optimizer: torch.optim.Optimizer, device: torch.device
) -> Callable:
    """step(x, y): copy the batch to `device`, forward, backward, update. On a GPU it returns
    once the work is queued, before it is done: time it with a synchronisation."""
    loss_fn = nn.CrossEntropyLoss()

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        loss_fn(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


@dataclass
class EpochProfile:
    """One epoch split into time spent waiting for the next batch and time spent computing."""

    data_s: float
    compute_s: float
    batches: int = 0

    @property
    def total_s(self) -> float:
        return self.data_s + self.compute_s

    @property
    def data_fraction(self) -> float:
        return self.data_s / self.total_s if self.total_s > 0 else 0.0

    @property
    def data_bound(self) -> bool:
        return self.data_fraction > DATA_BOUND

    def to_dict(self) -> dict:
        return {**asdict(self), "data_fraction": self.data_fraction, "data_bound": self.data_bound}

    def __str__(self) -> str:
        verdict = "data-bound" if self.data_bound else "compute-bound"
        return (
            f"{self.batches} batches: waited {self.data_s:.3f} s for data, computed {self.compute_s:.3f} s "
            f"-> {self.data_fraction:.0%} of the epoch waiting: {verdict}"
        )


class SimulatedTrainer(SimulatedAccelerator):
    """A training step of `step_s` seconds per batch on a simulated asynchronous device:
    `step` returns at once, as CUDA kernel launches do; `synchronize()` waits for the work.
    `busy_s` is the time the device really worked (measured, not planned)."""

    def __init__(self, step_s: float):
        self.step_s, self.busy_s = step_s, 0.0
        super().__init__()

    def _run(self) -> None:
        while (seconds := self._queue.get()) is not None:
            t0 = time.perf_counter()
            time.sleep(seconds)
            self.busy_s += time.perf_counter() - t0
            self._queue.task_done()
        self._queue.task_done()

    def step(self, x, y) -> None:
        self.launch(self.step_s)


class SleepyData(Dataset):
    """Items that take `item_s` seconds each to load (a sleep, so CPU load barely changes
    it); `loading_s` is the time really spent loading, when read in the main process."""

    def __init__(self, n: int, item_s: float):
        self.n, self.item_s, self.loading_s = n, item_s, 0.0

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        t0 = time.perf_counter()
        time.sleep(self.item_s)
        self.loading_s += time.perf_counter() - t0
        return torch.zeros(3, 4, 4), i % 10


# name: (seconds to load one item, seconds of device work per step, data-bound?); batches of 8
SCENARIOS = {
    "data-bound": (0.0025, 0.004, True),  # ~20 ms loading vs 4 ms computing per step
    "compute-bound": (0.00025, 0.020, False),  # ~2 ms loading vs 20 ms computing per step
}


# --- the worker sweep -------------------------------------------------------------------------


def time_loader(loader: DataLoader, epochs: int = 2) -> tuple[float, float]:
    """(seconds to the first batch, median seconds per epoch once the workers run). The
    first epoch starts the workers and is not timed; later ones reuse them (persistent)."""
    t0 = time.perf_counter()
    batches = iter(loader)  # starts the workers (none for num_workers=0)
    next(batches)
    startup = time.perf_counter() - t0  # worker start-up plus the first batch
    for _ in batches:  # finish the first epoch, untimed
        pass
    times = []
    for _ in range(epochs):  # wall time: waiting for workers uses no CPU of this process
        t0 = time.perf_counter()
        run_epoch(loader)
        times.append(time.perf_counter() - t0)
    return startup, statistics.median(times)


def sweep_workers(
    dataset: Dataset, counts: Iterable[int], *, batch_size: int = BATCH, epochs: int = 2
) -> list[dict]:
    """Epoch time, start-up time (`time_loader`) and worker memory for each worker count
    (the platform's default start method). Memory is USS, read once the timed epochs are done:
    what the workers' processes hold on their own, the memory freed if they exit (RSS would
    count pages shared with the main process again)."""
    me, rows = psutil.Process(), []
    for n in tqdm(list(counts), desc="num_workers sweep", leave=False):
        before = {p.pid for p in me.children(recursive=True)}
        loader = DataLoader(
            dataset, batch_size=batch_size, shuffle=True, num_workers=n, persistent_workers=n > 0
        )
        try:
            startup, epoch_s = time_loader(loader, epochs)
            procs = [p for p in me.children(recursive=True) if p.pid not in before]
            uss = sum(p.memory_full_info().uss for p in procs)
            rss = sum(p.memory_info().rss for p in procs)
        finally:
            close_loader(loader)
        rows.append(
            {
                "num_workers": n,
                "startup_s": startup,
                "epoch_s": epoch_s,
                "workers_uss_mb": uss / 2**20,
                "workers_rss_mb": rss / 2**20,
            }
        )
    return rows


def worker_knee(rows: list[dict], within: float = 0.10) -> int:
    """The fewest workers whose epoch is within `within` of the fastest: more buys nothing."""
    return knee({r["num_workers"]: r["epoch_s"] for r in rows}, within, higher_is_better=False)


def knee_label(rows: list[dict]) -> tuple[int | None, str]:
    """The sweep's knee and how the plot names it; None where no worker count beat
    num_workers=0: then there is no knee, and where this CPU cannot run two threads in
    parallel now (parallel_speedup, as check 03-fast-loader measures it), the label says so
    in the check's words."""
    k = worker_knee(rows)
    if k > 0:
        return k, f"knee: {k} workers"
    from .checks import THRESHOLDS  # checks imports this module

    least, parallel = THRESHOLDS["min_parallel"].value, parallel_speedup()
    if parallel < least:
        why = f"{no_parallel_reason(parallel, least)} (check 03-fast-loader: not timed)"
    else:
        why = "num_workers=0 ran within 10% of the fastest epoch, so workers bought nothing here"
    return None, f"no knee: {why}"


class Traced(Dataset):
    """`dataset`'s items, labelled with (index, process id) instead of the class, so that a
    check can observe which items came, in which order, and which process loaded them."""

    def __init__(self, dataset: Dataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int):
        return self.dataset[i][0], torch.tensor([i, os.getpid()])


def plot_sweep(rows: list[dict], knee: tuple[int | None, str] | None = None):
    """Epoch and start-up time against workers; `knee`: knee_label(rows), if the caller has
    printed it already (one measurement, so the text and the figure agree)."""
    import matplotlib.pyplot as plt

    n = [r["num_workers"] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.5))
    left.plot(n, [r["epoch_s"] for r in rows], "o-", label="epoch (workers running)")
    left.plot(n, [r["startup_s"] for r in rows], "s--", label="first batch (start-up)")
    k, label = knee or knee_label(rows)
    if k is not None:
        left.axvline(k, color="grey", linestyle=":", label=label)
    left.set(
        xlabel="num_workers", ylabel="seconds", title=f"{usable_cpus()} CPUs: epoch time vs workers"
    )
    right.bar([str(x) for x in n], [r["workers_uss_mb"] for r in rows], color="C1")
    right.set(xlabel="num_workers", ylabel="MiB (USS, all workers)", title="memory the workers add")
    for ax in (left, right):
        ax.grid(alpha=0.3)
    left.legend()
    if k is None:  # no knee to mark: say why under the plots
        fig.text(0.01, 0.02, textwrap.fill(label, 140), fontsize=8, va="bottom")
    fig.tight_layout(rect=(0, 0.1 if k is None else 0, 1, 1))
    return fig


def transfer_timings(device: torch.device, mib: int = 64) -> dict | None:
    """Time four ways to copy `mib` MiB to a CUDA device (None elsewhere): plain, non_blocking
    from pageable memory, pinned per call, and pinned once in advance (nb = non_blocking)."""
    device = torch.device(device)
    if device.type != "cuda":
        return None
    x = torch.randn(mib * 2**18)
    pinned = x.pin_memory()
    variants = {  # short names: the bar chart's labels
        "x.to(dev)": lambda: x.to(device),
        "x.to(dev, nb=True)": lambda: x.to(device, non_blocking=True),
        "x.pin_memory().to(nb)": lambda: x.pin_memory().to(device, non_blocking=True),
        "pinned.to(nb)": lambda: pinned.to(device, non_blocking=True),
    }
    # time_fn (lesson 00) warms up, then synchronises around each sample: a non_blocking copy
    # returns before its bytes have arrived, so an unsynchronised timer would time the launch
    return {
        k: time_fn(f, device=device, repeats=pick(quick=10, full=30), label=k)
        for k, f in variants.items()
    }


def cpu_pipeline(n: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """The same images as a uint8 batch and through ToTensor + Normalize, one at a time, on the CPU."""
    data = OfflineImages(n, stored_size=STORED_SIZE)  # PIL images, decoded on access
    images = [T.Resize(32)(data[i][0]) for i in range(n)]
    to_float = T.Compose([T.ToTensor(), T.Normalize(CIFAR_MEAN, CIFAR_STD)])
    return torch.stack([T.PILToTensor()(im) for im in images]), torch.stack(
        [to_float(im) for im in images]
    )
