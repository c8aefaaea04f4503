"""Lesson 10's instruments and demos: what a training run does that costs time, measured.

`HabitSpy` watches a training function run (a TorchFunctionMode plus a forward hook) and
counts what each habit leaves behind: syncs, numpy copies, host-built tensors, per-tensor
optimizer ops, anomaly mode and the profiler being on, forwards with autograd in validation.
A CPU has no host-device sync to pay for, so syncs are counted, not timed, on every device.
"""

from __future__ import annotations

import statistics
import time
import weakref
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn
from torch.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)
from torch.overrides import TorchFunctionMode
from tqdm.auto import tqdm

from ...device import get_device, synchronize
from ...measure import steady_cpu, time_fn
from . import loop
from .loop import HABITS, quiet

# Tensor methods that wait for the device on CUDA: each copies a value to the host.
SYNC_NAMES = frozenset(
    "item tolist numpy cpu __bool__ __float__ __int__ __index__ __format__ __repr__ __str__ "
    "nonzero is_nonzero equal allclose unique masked_select".split()
)
# In-place by name, but they write no value of the tensor: flags, not updates.
NOT_UPDATES = frozenset({"requires_grad_", "share_memory_"})
FACTORIES = frozenset("tensor as_tensor zeros ones full arange empty eye randn rand".split())
# The order in which habits cost time on a CPU, biggest first: what each adds to a step when
# it is the only one left in the fixed loop (4.2-4.9 ms/step), cpu-bf16 2-core, process CPU
# time, n=3: profiler (shapes and memory recorded) +11-14 ms, anomaly +8 ms (+14 ms 30
# frames deeper, as in a notebook: its stack traces grow with depth), for-loop AdamW +0.3-1.2
# ms; syncs, copies, host tensors, validation with autograd: within noise. Wall time on a
# loaded machine puts the profiler first by more (it allocates for every event).
COST_ORDER = (
    "profiler",
    "anomaly",
    "loop-optimizer",
    "syncs",
    "eval-autograd",
    "numpy-copies",
    "host-tensors",
)
COST_ORDER_MEASURED_ON = ("cpu-bf16",)  # device classes where COST_ORDER was measured


@dataclass
class Diagnosis:
    """What one run of a training function did, as counts (per run unless said otherwise)."""

    steps: int
    syncs: Counter = field(default_factory=Counter)  # name -> calls
    numpy_copies: int = 0
    host_built_moved: int = 0
    # in-place ops on a parameter's storage (p, p.data, a view) outside torch.optim's own
    # step: the learner's per-tensor updates (adamw_step, a hand loop, a custom Optimizer)
    param_inplace_ops: int = 0
    n_params: int = 0
    # torch.optim steps run by the for-loop implementation (foreach=False, not fused); the
    # default foreach=None is torch's choice for the device (foreach on CUDA), not counted
    loop_optimizer_steps: int = 0
    anomaly_on: bool = False
    profiler_on: bool = False
    # validation forwards whose output requires grad: autograd recorded a graph and saved
    # activations for a backward that never comes (frozen parameters record none)
    eval_forwards_with_grad: int = 0
    model: nn.Module | None = field(default=None, repr=False)  # as the run left it

    @property
    def n_syncs(self) -> int:
        return sum(self.syncs.values())

    @property
    def tensor_ops_per_step(self) -> float:
        """In-place ops on parameters per parameter tensor per step: a per-tensor update
        touches every tensor at least once a step (adamw_step: 2), foreach and fused none."""
        return self.param_inplace_ops / max(self.n_params * self.steps, 1)

    def loop_optimizer(self, tensor_ops: float) -> bool:
        """Whether an optimizer updated one tensor at a time: above `tensor_ops` in-place
        ops per tensor per step, or torch.optim's for-loop implementation chosen."""
        return self.tensor_ops_per_step > tensor_ops or self.loop_optimizer_steps > 0

    def habits(self, allowed_syncs: int, tensor_ops: float) -> list[str]:
        """The habits this run still has, biggest cost first (COST_ORDER)."""
        found = {
            "anomaly": self.anomaly_on,
            "profiler": self.profiler_on,
            "loop-optimizer": self.loop_optimizer(tensor_ops),
            "syncs": self.n_syncs > allowed_syncs,
            "eval-autograd": self.eval_forwards_with_grad > 0,
            "numpy-copies": self.numpy_copies >= self.steps,
            "host-tensors": self.host_built_moved >= self.steps,
        }
        return [h for h in COST_ORDER if found[h]]

    def sync_summary(self) -> str:
        return ", ".join(f"{n} x {name}" for name, n in self.syncs.most_common(4)) or "none"


class HabitSpy(TorchFunctionMode):
    """Counts, while active, the torch calls that reveal each habit (see module docstring)."""

    def __init__(self, model: nn.Module, train_batch: int):
        super().__init__()
        self.params = {id(p) for p in model.parameters()}
        self.storages = _storages(model)  # refreshed at each forward: .to(cuda) moves them
        self.train_batch, self.host_built = train_batch, {}  # id -> weakref
        self.d = Diagnosis(steps=0, n_params=len(self.params))
        self._hooks = [
            model.register_forward_pre_hook(self._forward),
            model.register_forward_hook(self._forward_done),
            register_optimizer_step_pre_hook(self._step_begins),
            register_optimizer_step_post_hook(self._step_ends),
        ]
        self._stepping: list = []  # the optimizers whose step is running, innermost last

    def _step_begins(self, optimizer, *_) -> None:
        self._stepping.append(optimizer)
        if _torch_step(optimizer) and _for_loop(optimizer):
            self.d.loop_optimizer_steps += 1

    def _step_ends(self, *_) -> None:
        if self._stepping:
            self._stepping.pop()

    def _validation(self, module: nn.Module, args) -> bool:
        x = args[0] if args else None
        return not module.training or (
            isinstance(x, torch.Tensor) and x.shape[0] != self.train_batch
        )

    def _forward(self, module: nn.Module, args) -> None:
        self.d.anomaly_on |= torch.is_anomaly_enabled()
        self.d.profiler_on |= _profiler_on()
        self.storages = _storages(module)

    def _forward_done(self, module: nn.Module, args, output) -> None:
        if self._validation(module, args) and _records_graph(output):
            self.d.eval_forwards_with_grad += 1

    def _on_param(self, name: str, first) -> bool:
        """An in-place op (name_) on a parameter, through the Parameter, .data or a view."""
        if not name.endswith("_") or name.startswith("__") or name in NOT_UPDATES:
            return False
        if not isinstance(first, torch.Tensor):
            return False
        return id(first) in self.params or _storage(first) in self.storages

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        first = args[0] if args else None
        out = func(*args, **kwargs)
        if self._stepping:
            # torch.optim reads its step counters (host tensors) with .item(): not a sync; its
            # own updates are judged by foreach/fused, a learner's Optimizer by its ops
            if not _torch_step(self._stepping[-1]) and self._on_param(name, first):
                self.d.param_inplace_ops += 1
            return out
        if name in SYNC_NAMES and isinstance(first, torch.Tensor):
            self.d.syncs[name] += 1
        elif name in FACTORIES:
            if name == "tensor" and isinstance(first, np.ndarray):
                self.d.numpy_copies += 1
            elif kwargs.get("device") is None and isinstance(out, torch.Tensor):
                self.host_built[id(out)] = weakref.ref(out)
        elif name in ("to", "cuda") and self._host_built(first):
            self.d.host_built_moved += 1
        elif self._on_param(name, first):
            self.d.param_inplace_ops += 1
        return out

    def _host_built(self, t) -> bool:
        ref = self.host_built.get(id(t))
        return ref is not None and ref() is t  # ids are reused once a tensor is freed

    def close(self) -> Diagnosis:
        for hook in self._hooks:
            hook.remove()
        return self.d


def _storage(t: torch.Tensor) -> int | None:
    """The address of a tensor's storage, shared by .data and views; None without one."""
    try:
        return t.untyped_storage().data_ptr() or None
    except (RuntimeError, NotImplementedError):  # sparse, meta and wrapper tensors
        return None


def _storages(model: nn.Module) -> set[int]:
    return {s for p in model.parameters() if (s := _storage(p)) is not None}


def _torch_step(optimizer) -> bool:
    """Whether the running step is torch.optim's own code (AdamW, SGD, ...), not a class of
    the learner's that overrides step."""
    return (getattr(type(optimizer).step, "__module__", None) or "").startswith("torch.")


def _for_loop(optimizer) -> bool:
    """torch.optim's for-loop implementation asked for: foreach=False and not fused. The
    default (foreach=None) lets torch pick per device: foreach on CUDA, the loop on a CPU."""
    return any(g.get("foreach") is False and not g.get("fused") for g in optimizer.param_groups)


def _records_graph(output) -> bool:
    """Whether a forward's output carries an autograd graph (activations saved with it)."""
    outputs = output if isinstance(output, tuple | list) else (output,)
    return any(isinstance(o, torch.Tensor) and o.requires_grad for o in outputs)


def _profiler_on() -> bool:
    """Whether a torch.profiler / autograd profiler session is recording (private API, so
    read defensively: a torch that moves it reports False rather than failing the check)."""
    probe = getattr(getattr(torch._C, "_autograd", None), "_profiler_enabled", None)
    return (
        bool(probe())
        if probe
        else bool(getattr(torch.autograd.profiler, "_is_profiler_enabled", False))
    )


def diagnose(
    train_fn: Callable, steps: int, eval_every: int = 10, data: loop.NumpyData | None = None
) -> tuple[object, Diagnosis]:
    """Run `train_fn(model, data, steps, device, eval_every)` under a HabitSpy; return its
    log and the counts. The trained model is kept as `Diagnosis.model`."""
    model, data = loop.make_model(), data or loop.make_data()
    spy = HabitSpy(model, data.batch_size)
    spy.d.steps = steps
    anomaly = torch.is_anomaly_enabled()
    try:
        with spy:
            log = quiet(train_fn, model, data, steps, get_device(), eval_every)
    finally:
        spy.close()
        torch.autograd.set_detect_anomaly(anomaly)  # a learner's global switch must not leak
    spy.d.model = model
    return log, spy.d


# --- timing: the slow loop, the fixed loop, and every habit alone --------------------------


def time_runs(
    fns: dict[str, Callable], steps: int, rounds: int, eval_every: int = 10, progress: bool = False
) -> dict:
    """Seconds per run of each `fn(model, data, steps, device, eval_every)`, interleaved: each
    round runs every function once, in a rotating order, on a fresh model (built untimed)."""
    device, data, names = get_device(), loop.make_data(), list(fns)
    samples: dict[str, list[float]] = {n: [] for n in names}
    with steady_cpu():
        for r in tqdm(range(rounds), desc="timing rounds", disable=not progress, leave=False):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                model = loop.make_model().to(device)
                synchronize(device)
                t0 = time.perf_counter()
                quiet(fns[name], model, data, steps, device, eval_every)
                synchronize(device)
                samples[name].append(time.perf_counter() - t0)
    return samples


def ratio(samples: dict, slower: str, faster: str) -> float:
    """Median over rounds of slower/faster: a pair ratio, robust to load that drifts."""
    return statistics.median(a / b for a, b in zip(samples[slower], samples[faster], strict=True))


def _keep(habits: tuple[str, ...]) -> Callable:
    def run(model, data, steps, device, eval_every):
        return loop.variant_train(model, data, steps, device, habits, eval_every)

    run.__name__ = f"keep_{'_'.join(habits) or 'none'}"
    return run


def ablation(steps: int, rounds: int) -> dict[str, float]:
    """Added ms per step when only one habit is left in the fixed loop, for every habit; plus
    the slow and the fixed loops themselves (keys 'slow' and 'fixed')."""
    fns = {"slow": loop.slow_train, "fixed": _keep(())}
    fns |= {h: _keep((h,)) for h in HABITS}
    samples = time_runs(fns, steps, rounds, progress=True)
    med = {k: statistics.median(v) / steps * 1e3 for k, v in samples.items()}
    return {"slow": med["slow"], "fixed": med["fixed"]} | {h: med[h] - med["fixed"] for h in HABITS}


def plot_ablation(costs: dict[str, float], title: str = ""):
    """One bar per habit: what it adds to a step when it is the only one left, and that as a
    share of the whole gain (slow - fixed). Habits interact (anomaly mode also slows the
    validation forwards), so the shares need not add up to 100%."""
    import matplotlib.pyplot as plt

    habits = sorted(HABITS, key=lambda h: -costs[h])
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.4), width_ratios=(1, 2.6))
    left.bar(["slow", "fixed"], [costs["slow"], costs["fixed"]], color=["C3", "C2"])
    left.set(ylabel="ms per step", title="the whole loop")
    right.barh(habits[::-1], [costs[h] for h in habits[::-1]], color="C0")
    gain = costs["slow"] - costs["fixed"]
    for i, h in enumerate(habits[::-1]):  # labels right of zero, so none covers a tick label
        label = f" {costs[h]:+.2f} ms ({costs[h] / gain:.0%} of the gain)"
        right.text(max(costs[h], 0), i, label, va="center", fontsize=8)
    right.axvline(0, color="grey", linewidth=0.8)
    right.set(xlabel="ms added per step, this habit alone", title=title or "each habit's cost")
    right.set_xlim(min(0, *(costs[h] for h in habits)) * 1.1, max(costs[h] for h in habits) * 1.6)
    fig.tight_layout()
    return fig


# --- exercises 2 and 3: copies, and a model whose eval mode matters -------------------------


def shares_memory(t: torch.Tensor, array: np.ndarray) -> bool:
    """Whether a write to `array` shows in `t` (one element changed, then put back)."""
    if not isinstance(t, torch.Tensor) or t.device.type != "cpu" or t.dim() != array.ndim:
        return False
    first = (0,) * array.ndim
    old = array[first].item()
    array[first] = old + 7
    try:
        return t[first].item() == array[first].item()  # the array's own rounding of old + 7
    finally:
        array[first] = old


def conversion_timings(n_mib: int = 64) -> dict[str, float]:
    """Milliseconds to turn a float32 array of `n_mib` MiB into a tensor, three ways."""
    array = np.ones(n_mib * 2**18, dtype=np.float32)
    ways = {
        "torch.tensor": lambda: torch.tensor(array),
        "torch.as_tensor": lambda: torch.as_tensor(array),
        "torch.from_numpy": lambda: torch.from_numpy(array),
    }
    return {k: time_fn(f, warmup=1, repeats=5, device="cpu").median * 1e3 for k, f in ways.items()}


def eval_specimen(seed: int = 0) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """A small trained classifier with BatchNorm and Dropout (so train and eval mode differ),
    and its validation data; returned in train mode, as a training loop leaves it."""
    data = loop.make_data(n=1024)
    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Linear(128, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Dropout(0.5), nn.Linear(64, 10)
    )
    optimizer = torch.optim.AdamW(model.parameters(), 1e-2)
    x, y = torch.from_numpy(data.x), torch.from_numpy(data.y)
    for i in range(0, 1024, 64):
        loss = nn.functional.cross_entropy(model(x[i : i + 64]), y[i : i + 64])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.train(), torch.from_numpy(data.x_val), torch.from_numpy(data.y_val)


def zero_grad_effect() -> dict[str, float]:
    """How far one AdamW step moves a parameter whose gradient is zero vs None (set_to_none):
    a zero gradient still gets weight decay and momentum; None is skipped entirely."""
    moved = {}
    for label, none in (("grad zeroed (set_to_none=False)", False), ("grad None (default)", True)):
        p = nn.Parameter(torch.ones(4))
        optimizer = torch.optim.AdamW([p], lr=0.1, weight_decay=0.1)
        p.grad = torch.ones(4)
        optimizer.step()  # a first step builds momentum
        optimizer.zero_grad(set_to_none=none)
        before = p.detach().clone()
        optimizer.step()
        moved[label] = (p.detach() - before).abs().max().item()
    return moved


def optimizer_timings(rounds: int = 5) -> dict[str, float]:
    """ms per AdamW step on the many-small-tensors model: for-loop, foreach, fused (where
    this torch and device have it)."""
    device, out = get_device(), {}
    ways = {"for-loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}
    for label, kw in ways.items():
        model = loop.make_model().to(device)
        for p in model.parameters():
            p.grad = torch.randn_like(p)
        try:
            optimizer = torch.optim.AdamW(model.parameters(), 1e-3, **kw)
            optimizer.step()
        except (RuntimeError, ValueError) as exc:  # fused is missing for this device or dtype
            print(f"{label}: not available here ({str(exc).splitlines()[0][:90]})")
            continue
        with steady_cpu():
            out[label] = time_fn(optimizer.step, warmup=2, repeats=rounds).median * 1e3
    return out
