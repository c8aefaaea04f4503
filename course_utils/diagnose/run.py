"""The profiled window: a few steps of the learner's own loop, watched and timed.

Three phases, in this order. Spy steps (the first few, which also warm up): a
TorchFunctionMode counts host-device syncs called from the learner's code, and a forward
pre-hook records gradient state, autocast, anomaly mode, the profiler and DDP's sync flag.
Then timed chunks alternate (A B A B ...) so that load on a shared machine hits both alike:
A runs steps on batches from the loader (what the learner pays now), B replays batches
already fetched (the same steps with loading taken away). A minus B is what loading costs.
"""

from __future__ import annotations

import itertools
import os
import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from ..device import synchronize

_TORCH_DIR = os.path.dirname(torch.__file__)
_WRAPPERS = (os.path.join(_TORCH_DIR, "overrides.py"), os.path.join(_TORCH_DIR, "_tensor.py"))
# Tensor methods that copy a value to the host: each waits for the device's queue on a GPU.
SYNC_NAMES = frozenset(
    "item tolist numpy cpu __bool__ __float__ __int__ __format__ __repr__".split()
)


def _from_learner_code() -> bool:
    """Whether the torch call being handled was made by the learner's code, not by torch
    itself (GradScaler's found-inf check and torch.optim's step counters sync by design)."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename in _WRAPPERS:
        frame = frame.f_back
    return frame is not None and not frame.f_code.co_filename.startswith(_TORCH_DIR)


class SyncSpy(TorchFunctionMode):
    """Counts calls that would synchronise with a GPU, made from the learner's code."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter = Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        first = args[0] if args else None
        if isinstance(first, torch.Tensor) and _from_learner_code():
            to_host = name == "to" and first.device.type != "cpu" and "cpu" in map(str, args[1:])
            if name in SYNC_NAMES or to_host:
                self.calls["to(cpu)" if to_host else name.strip("_")] += 1
        return func(*args, **kwargs)


def _autocast_dtype(device: torch.device) -> torch.dtype | None:
    try:
        on = torch.is_autocast_enabled(device.type)
        return torch.get_autocast_dtype(device.type) if on else None
    except TypeError:  # torch < 2.4 takes no device type
        cpu = device.type == "cpu"
        on = torch.is_autocast_cpu_enabled() if cpu else torch.is_autocast_enabled()
        if not on:
            return None
        return torch.get_autocast_cpu_dtype() if cpu else torch.get_autocast_gpu_dtype()


@dataclass
class Observed:
    """What the forward pre-hook and the optimizer hook saw during the window."""

    forwards: int = 0
    optimizer_steps: int = 0
    shapes: list = field(default_factory=list)  # input shapes, one tuple per forward
    autocast: set = field(default_factory=set)  # autocast dtypes seen (None: off)
    anomaly: bool = False
    profiler: bool = False
    ddp_sync: list = field(default_factory=list)  # DDP require_backward_grad_sync per forward
    grad_states: list = field(default_factory=list)  # "none" or a device tensor: max |grad|
    inputs: tuple = ((), {})  # the model's inputs in the last spy step (for the probes)


class Observer:
    """Hooks on the learner's model and optimizer, removed by `close()`."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, device) -> None:
        self.model, self.device, self.seen = model, device, Observed()
        self.spying = False
        self.params = [p for p in model.parameters() if p.requires_grad]
        self._handles = [
            model.register_forward_pre_hook(self._forward, with_kwargs=True),
            optimizer.register_step_post_hook(self._stepped),
        ]

    def _stepped(self, *_) -> None:
        self.seen.optimizer_steps += 1

    def _forward(self, module, args, kwargs):
        s = self.seen
        s.forwards += 1
        tensors = [a for a in itertools.chain(args, kwargs.values()) if torch.is_tensor(a)]
        s.shapes.append(tuple(tuple(t.shape) for t in tensors))
        s.autocast.add(_autocast_dtype(self.device))
        s.anomaly |= torch.is_anomaly_enabled()
        s.profiler |= bool(torch._C._autograd._profiler_enabled())
        if hasattr(module, "require_backward_grad_sync"):  # DistributedDataParallel
            s.ddp_sync.append(bool(module.require_backward_grad_sync))
        if self.spying:
            s.inputs = (args, kwargs)
            if s.forwards > 1:  # the first forward sees whatever the learner left behind
                s.grad_states.append(self._grad_state())

    def _grad_state(self):
        grads = [p.grad for p in self.params if p.grad is not None]
        if not grads:
            return "none"
        if len(grads) < len(self.params):
            return "partial"
        norms = torch._foreach_norm([g.detach() for g in grads], float("inf"))
        return torch.stack(norms).amax()  # read after the window: no sync inside a step

    def close(self) -> Observed:
        for h in self._handles:
            h.remove()
        return self.seen


@dataclass
class Window:
    """Timings and observations of one diagnosis window."""

    step_s: float  # seconds per step with the learner's loader (A)
    compute_s: float  # seconds per step on batches already fetched (B)
    wait_s: float  # seconds per step spent in next(loader), within A
    steps: int
    syncs: Counter  # learner-code sync calls in the spy steps
    cuda_syncs: int | None  # syncs the CUDA runtime reported in the spy steps (CUDA only)
    spy_steps: int
    seen: Observed
    grads: list[str]  # per spy forward: "none", "zero", "nonzero", "partial"


def _next(it_box: list, loader: Iterable):
    try:
        return next(it_box[0])
    except StopIteration:
        it_box[0] = iter(loader)  # a new epoch: worker start-up is part of what loading costs
        return next(it_box[0])


def _spy_steps(step: Callable, it_box, loader, n: int, observer: Observer, device):
    spy, cuda_count = SyncSpy(), None
    observer.spying = True
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if device.type == "cuda":
            torch.cuda.set_sync_debug_mode("warn")  # restored with the saved flags
        with spy:
            for _ in range(n):
                step(_next(it_box, loader))
        if device.type == "cuda":
            torch.cuda.set_sync_debug_mode(0)
            cuda_count = sum(
                "synchroniz" in str(w.message) and not w.filename.startswith(_TORCH_DIR)
                for w in caught
            )
    for w in caught:  # the learner's own warnings still reach them
        if "synchroniz" not in str(w.message):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    observer.spying = False
    synchronize(device)
    return spy.calls, cuda_count


def _grad_label(state) -> str:
    if isinstance(state, str):
        return state
    return "zero" if float(state) == 0.0 else "nonzero"


def run_window(
    step: Callable,
    loader: Iterable,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    steps: int,
    device: torch.device,
    chunk: int = 4,
) -> Window:
    """Run `steps` learner steps on loader batches (spy steps first), interleaved with as
    many replayed steps; the caller saves and restores the learner's state around it."""
    observer = Observer(model, optimizer, device)
    try:
        it_box = [iter(loader)]
        n_spy = max(2, min(5, steps // 4))
        syncs, cuda_syncs = _spy_steps(step, it_box, loader, n_spy, observer, device)
        kept: list = []
        a = b = wait = 0.0
        done = 0
        while done < steps - n_spy:
            n = min(chunk, steps - n_spy - done)
            synchronize(device)
            t0 = time.perf_counter()
            for _ in range(n):
                t1 = time.perf_counter()
                batch = _next(it_box, loader)
                wait += time.perf_counter() - t1
                kept = (kept + [batch])[-8:]
                step(batch)
            synchronize(device)
            t1 = time.perf_counter()
            for i in range(n):
                step(kept[i % len(kept)])
            synchronize(device)
            a, b = a + t1 - t0, b + time.perf_counter() - t1
            done += n
    finally:
        seen = observer.close()
    grads = [_grad_label(s) for s in seen.grad_states]
    seen.grad_states = []
    timed = max(done, 1)
    return Window(a / timed, b / timed, wait / timed, steps, syncs, cuda_syncs, n_spy, seen, grads)
