"""Where a returned model came from, watched while a speed-run's call runs (lessons 11 and 18):
which nn.Modules were built during the call, and which tensors hold values from before it.
torch's classes are patched for the length of the block, then put back.

- `module_births`: which nn.Modules were constructed during the call. A speed-run trains from
  scratch each time it is timed, so the model it returns (and each of its submodules) must be
  built during that call: a model kept from an earlier call, or a deepcopy of one (copying
  calls no `__init__`), was not.
- `weight_sources`: the tensors alive before the call, and which storages received their
  values in it (copied in, deep-copied, loaded with torch.load).
- `cpu_seconds`: the clock a timed call is read on, on a CPU.
- `watched_call`: one timed call with those watches (and a lesson's own) around it.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from torch import nn


def cpu_seconds() -> float:
    """CPU seconds of this process (all threads) and of its child processes that finished."""
    try:
        import resource
    except ImportError:  # Windows: this process only
        return time.process_time()
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + kids.ru_utime + kids.ru_stime


@contextlib.contextmanager
def module_births() -> Iterator[set[int]]:
    """The ids of the nn.Modules constructed while the block runs, by `__init__` or as a copy
    (`copy.deepcopy` and unpickling call `__setstate__`, not `__init__`: keeping the best
    epoch's model, torch's AveragedModel). An id names one object for as long as it lives: a
    module alive before the block can never share an id with one born in it, so `stale(model,
    born)` cannot mistake an old model for a new one. A copy's weights may still come from
    before the block: `weight_sources` sees that."""
    born: set[int] = set()
    init, setstate = nn.Module.__init__, nn.Module.__setstate__

    def watched_init(self, *args, **kwargs):
        born.add(id(self))
        return init(self, *args, **kwargs)

    def watched_setstate(self, state):
        born.add(id(self))
        return setstate(self, state)

    nn.Module.__init__, nn.Module.__setstate__ = watched_init, watched_setstate
    try:
        yield born
    finally:
        nn.Module.__init__, nn.Module.__setstate__ = init, setstate


def stale(model: nn.Module, born: set[int]) -> list[str]:
    """The names of the modules in `model` (itself: "the model") not built during the call."""
    return [name or "the model" for name, m in model.named_modules() if id(m) not in born]


def _storage(t: torch.Tensor) -> int:
    """The address of a tensor's storage (0 where it has none: meta, wrapper subclasses)."""
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return 0


@dataclass
class Sources:
    """Where weights came from during one call: the tensors alive before it, and the storages
    that received their values in the call, by channel. Every tensor named here is held until
    the call ends, so its memory cannot be reused by a new tensor and mistaken for it."""

    before: list[torch.Tensor]
    ids: set[int] = field(default_factory=set)
    storages: set[int] = field(default_factory=set)
    received: dict[int, str] = field(default_factory=dict)  # storage -> how

    def old(self, t) -> bool:
        if not isinstance(t, torch.Tensor):
            return False
        where = _storage(t)
        return id(t) in self.ids or (where != 0 and where in self.storages)

    def receive(self, t: torch.Tensor, how: str) -> None:
        """`t` now holds values from before the call, brought in as `how` says."""
        self.before.append(t)
        if where := _storage(t):
            self.received[where] = how

    def adopt(self, obj, how: str) -> None:
        """Count the tensors in `obj` (a state dict, a model, a list) as from before."""
        if isinstance(obj, torch.Tensor):
            self.ids.add(id(obj))
            self.storages.add(_storage(obj) or -1)
            self.receive(obj, how)
        elif isinstance(obj, dict):
            for v in obj.values():
                self.adopt(v, how)
        elif isinstance(obj, list | tuple):
            for v in obj:
                self.adopt(v, how)
        elif isinstance(obj, nn.Module):
            self.adopt(list(obj.state_dict(keep_vars=True).values()), how)

    def from_before(self, model: nn.Module) -> dict[str, str]:
        """The returned model's weights (parameters and buffers) that hold values from before
        the call: name -> how they got there."""
        out = {}
        for name, t in model.state_dict(keep_vars=True).items():
            where = _storage(t)
            if not where:
                continue
            if where in self.received:
                out[name] = self.received[where]
            elif self.old(t):
                out[name] = "the same tensors as before the call"
        return out


@contextlib.contextmanager
def weight_sources() -> Iterator[Sources]:
    """Which tensors existed when the block started, and which storages received their values
    while it ran: copied in (`Tensor.copy_`, as `load_state_dict` does), deep-copied
    (`copy.deepcopy` of a model or state dict) or loaded (`torch.load` of a file or buffer
    that `torch.save` did not write during the block). A speed-run's returned model may hold
    none of them."""
    import gc
    import warnings

    with warnings.catch_warnings():  # some lazily imported objects warn when their type is read
        warnings.simplefilter("ignore")
        before = [o for o in gc.get_objects() if issubclass(type(o), torch.Tensor)]
    sources = Sources(before, {id(t) for t in before})
    sources.storages = {w for w in map(_storage, before) if w}
    copy_ = torch.Tensor.copy_
    deepcopies = {cls: cls.__dict__["__deepcopy__"] for cls in (torch.Tensor, nn.Parameter)}
    load, save = torch.load, torch.save
    saved: set = set()  # paths and file objects torch.save wrote during the block

    def passed_on(src: torch.Tensor, how: str) -> str:
        earlier = sources.received.get(_storage(src))
        return f"{earlier}, then {how}" if earlier else how

    def copy_watched(self, src, *args, **kwargs):
        if sources.old(src):
            sources.receive(self, passed_on(src, "copied in (load_state_dict or Tensor.copy_)"))
        return copy_(self, src, *args, **kwargs)

    def deepcopy_watched(cls):
        def watched(self, memo):
            out = deepcopies[cls](self, memo)
            if sources.old(self):
                sources.receive(out, passed_on(self, "deep copies (copy.deepcopy)"))
            return out

        return watched

    def key(f):
        return os.path.abspath(f) if isinstance(f, str | os.PathLike) else id(f)

    def save_watched(obj, f, *args, **kwargs):
        saved.add(key(f))
        return save(obj, f, *args, **kwargs)

    def load_watched(f, *args, **kwargs):
        out = load(f, *args, **kwargs)
        if key(f) not in saved:  # a file or buffer from before the block, or made from one
            name = os.fspath(f) if isinstance(f, str | os.PathLike) else type(f).__name__
            sources.adopt(out, f"loaded with torch.load from {name}, not saved during the call")
        return out

    torch.Tensor.copy_, torch.load, torch.save = copy_watched, load_watched, save_watched
    for cls in deepcopies:
        cls.__deepcopy__ = deepcopy_watched(cls)
    try:
        yield sources
    finally:
        del torch.Tensor.copy_  # TensorBase's again
        torch.load, torch.save = load, save
        for cls, original in deepcopies.items():
            cls.__deepcopy__ = original
        sources.before.clear()


@dataclass
class WatchedCall:
    """One timed call of a speed-run, as both lessons' checks read it. `held_out`: the held-out
    reader it called (raised, or caught by the learner's code), which voids the rest; `watches`:
    what each extra watch yielded, in the order given."""

    model: object
    held_out: str | None
    wall: float
    cpu: float
    children_left: int
    stale: list[str]
    from_before: dict
    watches: tuple


def watched_call(speedrun, data, watches=(), device=None) -> WatchedCall:
    """`speedrun(data)` on one thread, synchronised before each clock, with module births,
    weight sources and `watches` (context managers) around it; a learner's set_num_threads
    does not last. The watches start before the clocks (the tensor census costs ~50 ms)."""
    from . import guards
    from .device import synchronize
    from .errors import HeldOutUsed
    from .measure import steady_cpu

    guards.held_out_reads.clear()
    children = set(multiprocessing.active_children())
    held_out = None
    with steady_cpu(1), contextlib.ExitStack() as stack:
        threads = torch.get_num_threads()
        born = stack.enter_context(module_births())
        sources = stack.enter_context(weight_sources())
        entered = tuple(stack.enter_context(w) for w in watches)
        synchronize(device)
        t0, cpu0 = time.perf_counter(), cpu_seconds()
        try:
            model = speedrun(data)
        except HeldOutUsed as exc:  # raised inside, and not caught by the learner's code
            held_out, model = exc.name, None
        finally:
            torch.set_num_threads(threads)
        synchronize(device)
        wall, cpu = time.perf_counter() - t0, cpu_seconds() - cpu0
        earlier = sources.from_before(model) if isinstance(model, nn.Module) else {}
    held_out = held_out or next(iter(guards.held_out_reads), None)  # caught inside
    return WatchedCall(
        model=model,
        held_out=held_out,
        wall=wall,
        cpu=cpu,
        children_left=len(set(multiprocessing.active_children()) - children),
        stale=stale(model, born) if isinstance(model, nn.Module) else [],
        from_before=earlier,
        watches=entered,
    )
