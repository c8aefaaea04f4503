"""Lesson 02's workloads: real training steps, steps of known cost, a colleague's throughput
sweep, a simulated device with a memory limit, a memory budget for real steps on any device,
and the CUDA peak-memory probe."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from ...device import get_device, is_out_of_memory, release_cached_memory, synchronize
from ...mode import pick
from ...models import MLP, SmallCNN
from ...progress import tqdm

MiB = 2**20


class TrainStep:
    """One SGD training step (forward, backward, update) on a fixed batch already on the
    device; `model` and `optimizer` stay reachable so a memory budget can count them."""

    def __init__(self, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor):
        self.model, self.x, self.y = model, x, y
        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def __call__(self) -> None:
        F.cross_entropy(self.model(self.x), self.y).backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


def make_step(batch_size: int, *, kind: str | None = None, device=None, seed: int = 0) -> TrainStep:
    """A training step at `batch_size`, data on the device, loading left out on purpose.
    `kind` "mlp" (quick mode: MLP 256-512-512-512-10) or "cnn" (full: SmallCNN width 32)."""
    kind = kind or pick(quick="mlp", full="cnn")
    device = torch.device(device) if device is not None else get_device()
    gen = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):  # leave the notebook's random stream alone
        torch.manual_seed(seed)
        if kind == "mlp":
            model, x = (
                MLP(dim=256, hidden=512, depth=3),
                torch.randn(batch_size, 256, generator=gen),
            )
        else:
            model, x = SmallCNN(width=32), torch.randn(batch_size, 3, 32, 32, generator=gen)
    y = torch.randint(0, 10, (batch_size,), generator=gen)
    return TrainStep(model.to(device), x.to(device), y.to(device))


# --- steps of known cost: the throughput check knows the true samples/s -------------------


class KnownCostStep:
    """A step that takes `overhead_s + per_sample_s * b` seconds (a sleep: load barely changes
    it), and `first_call_s` more on its first call, as autotuning or lazy allocation do."""

    def __init__(self, b: int, overhead_s: float, per_sample_s: float, first_call_s: float):
        self.seconds = overhead_s + per_sample_s * b
        self.first_call_s, self.calls = first_call_s, 0

    def __call__(self) -> None:
        self.calls += 1
        time.sleep(self.seconds + (self.first_call_s if self.calls == 1 else 0.0))


def known_cost_steps(
    overhead_s: float = 0.025, per_sample_s: float = 50e-6, first_call_s: float = 0.2
) -> Callable[[int], KnownCostStep]:
    """make_step(b) for steps of known cost; `make.samples_per_s(b)` is the true rate. The
    overhead is large beside a loaded machine's wake-up latency (a few ms), so the true rate
    is what a correct timer measures even there."""

    def make(b: int) -> KnownCostStep:
        return KnownCostStep(int(b), overhead_s, per_sample_s, first_call_s)

    make.samples_per_s = lambda b: b / (overhead_s + per_sample_s * b)
    return make


# --- a simulated device with a memory limit ------------------------------------------------


class SimulatedMemory:
    """A device with `capacity` bytes. `alloc` returns a block that holds its bytes for as
    long as anything references it (freed by reference counting, as tensors are), and
    raises `error(message)` as CUDA, cuBLAS or cuDNN would when the bytes are not free."""

    def __init__(self, capacity: int, error: Callable[[str], Exception]):
        self.capacity, self.error, self.in_use, self.peak = capacity, error, 0, 0
        self.held_at_release: list[int] = []  # bytes still referenced at each cache release

    def release_cache(self) -> None:
        """What `empty_cache()` would find: bytes still referenced cannot be given back (a
        caching allocator only returns free blocks), so each call records what is held."""
        gc.collect()
        self.held_at_release.append(self.in_use)

    def alloc(self, nbytes: int, what: str) -> _Block:
        if self.in_use + nbytes > self.capacity:
            raise self.error(
                f"Tried to allocate {nbytes / MiB:.0f} MiB ({what}); "
                f"{(self.capacity - self.in_use) / MiB:.0f} MiB free of {self.capacity / MiB:.0f} MiB"
            )
        self.in_use += nbytes
        self.peak = max(self.peak, self.in_use)
        return _Block(self, nbytes)


class _Block:
    def __init__(self, memory: SimulatedMemory, nbytes: int):
        self.memory, self.nbytes = memory, nbytes

    def __del__(self):
        self.memory.in_use -= self.nbytes


class SimulatedStep:
    """A training step on SimulatedMemory: the model's parameters and gradients when built,
    activations during each call, and the optimizer's momentum from the first call on."""

    def __init__(self, memory: SimulatedMemory, b: int, model_b: int, act_b: int, state_b: int):
        self.memory, self.b, self.act_b, self.state_b = memory, b, act_b, state_b
        self.model = memory.alloc(model_b, "parameters and gradients")
        self.state = None

    def __call__(self) -> None:
        activations = self.memory.alloc(self.act_b * self.b, f"activations of batch {self.b}")
        del activations  # freed by the backward pass
        if self.state is None:  # optimizer.step() allocates its buffers on the first call
            self.state = self.memory.alloc(self.state_b, "momentum buffers")


def simulated_steps(
    memory: SimulatedMemory, model_b: int, act_b: int, state_b: int, bug_from: int | None = None
) -> Callable[[int], SimulatedStep]:
    """make_step(b) on `memory`; from batch `bug_from` on, building the step raises a shape
    error instead, as a real bug would (it has nothing to do with memory)."""

    def make(b: int) -> SimulatedStep:
        if bug_from is not None and b >= bug_from:
            raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({b}x3072 and 1024x10)")
        return SimulatedStep(memory, int(b), model_b, act_b, state_b)

    return make


# --- a memory budget for real steps, on any device ------------------------------------------


def budgeted(make_step: Callable[[int], TrainStep], budget_bytes: int) -> Callable[[int], Callable]:
    """make_step(b) whose steps raise torch.cuda.OutOfMemoryError when parameters, gradients,
    momentum and the bytes saved for backward would exceed `budget_bytes`, as a GPU of that
    size would: a memory limit that a CPU can show."""

    def make(b: int) -> Callable[[], None]:
        step = make_step(b)
        fixed = 3 * sum(p.numel() * p.element_size() for p in step.model.parameters())
        seen: dict[int, int] = {}

        def pack(t: torch.Tensor) -> torch.Tensor:
            base = t if t._base is None else t._base
            if not (base.is_leaf and base.requires_grad):  # parameters are counted in `fixed`
                seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
                if fixed + sum(seen.values()) > budget_bytes:
                    raise torch.cuda.OutOfMemoryError(
                        f"out of memory (a budget of {budget_bytes / MiB:.0f} MiB, simulated)"
                    )
            return t

        def run() -> None:
            seen.clear()
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                step()

        return run

    return make


def largest_batch_cuda(
    make_step: Callable, candidates: Sequence[int], device, budget_bytes: int | None = None
) -> tuple[int | None, dict[int, int]]:
    """CUDA only: run two steps at each batch size on `device` (the course's device, which need
    not be the current one) and read its peak memory; stop at the first allocation failure
    (torch.cuda.OutOfMemoryError, or cuBLAS/cuDNN reporting one as a RuntimeError; anything
    else is re-raised) or the first peak above `budget_bytes`.

    Returns (largest batch that fitted, {batch: peak bytes above the start})."""
    device = torch.device(device)
    best, peaks = None, {}
    for b in tqdm(candidates, desc="batch sizes", leave=False):
        peak, failed = _cuda_peak(make_step, b, device)
        if failed:
            release_cached_memory(device)  # outside `except`: the failed try is unreachable now
            break
        peaks[b] = peak
        if budget_bytes is not None and peak > budget_bytes:
            break
        best = b
    return best, peaks


def _cuda_peak(make_step: Callable, b: int, device: torch.device) -> tuple[int, bool]:
    try:
        release_cached_memory(device)
        torch.cuda.reset_peak_memory_stats(device)
        start = torch.cuda.memory_allocated(device)
        step = make_step(b)
        step()
        step()  # the second step also holds the optimizer's state
        synchronize(device)
        return torch.cuda.max_memory_allocated(device) - start, False
    except Exception as exc:
        if not is_out_of_memory(exc):
            raise
    return 0, True
