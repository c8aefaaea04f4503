"""Lesson 10's instrument: what a training run does that costs time, counted.

`HabitSpy` watches a training function run (a TorchFunctionMode plus a forward hook) and
counts what each habit leaves behind: syncs, numpy copies, host-built tensors, per-tensor
optimizer ops, anomaly mode and the profiler being on, forwards with autograd in validation.
A CPU has no host-device sync to pay for, so syncs are counted, not timed, on every device.
"""

from __future__ import annotations

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

from ...device import get_device
from . import loop
from .loop import quiet

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
