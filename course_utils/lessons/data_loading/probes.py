"""What lesson 03's checks observe beside time: whether a loader's parts survive pickling as
spawn and forkserver do, how much parallel CPU work this machine can run right now, and how
tensors are pinned and copied (the bytes that cross to the device)."""

from __future__ import annotations

import hashlib
import io
import pickle
import threading
import time

import torch
from torch.overrides import TorchFunctionMode
from torch.utils.data import DataLoader

from ...checks import Part, correct, not_applicable


class _SpawnPickler(pickle.Pickler):
    """Pickles as spawn/forkserver do, and refuses what a fresh worker process cannot import."""

    def reducer_override(self, obj):
        try:
            module = getattr(obj, "__module__", None)
        except Exception:
            return NotImplemented
        if module == "__main__":
            name = getattr(obj, "__qualname__", None) or type(obj).__qualname__
            raise pickle.PicklingError(
                f"{name} is defined in the notebook itself (__main__), which a spawned worker cannot import"
            )
        return NotImplemented


def spawn_problems(loader: DataLoader) -> list[str]:
    """What would stop this loader's workers under spawn/forkserver: each thing a worker receives
    must pickle by reference to an importable module (no lambdas, nothing defined in __main__)."""
    problems = []
    for what in ("dataset", "collate_fn", "worker_init_fn"):
        try:
            _SpawnPickler(io.BytesIO(), protocol=pickle.HIGHEST_PROTOCOL).dump(
                getattr(loader, what)
            )
        except Exception as exc:
            problems.append(
                f"{what}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
            )
    return problems


_PROBE = bytes(1 << 20)  # 1 MiB: sha256 releases the GIL on it, so two threads run in parallel


def _hash(rounds: int) -> float:
    t0 = time.perf_counter()
    for _ in range(rounds):
        hashlib.sha256(_PROBE).digest()
    return time.perf_counter() - t0


def parallel_speedup(seconds: float = 0.1) -> float:
    """How much faster two CPU-bound threads finish their work than one does, right now.

    About 2 on an idle machine with two free cores; near 1 when other programs hold the CPU,
    on one core with hyper-threads, or under a one-CPU quota. Workers cannot beat it.
    """
    rounds = max(4, int(seconds / max(_hash(2) / 2, 1e-6)))
    serial = _hash(rounds)
    threads = [threading.Thread(target=_hash, args=(rounds,)) for _ in range(2)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    parallel = time.perf_counter() - t0
    serial = (serial + _hash(rounds)) / 2  # before and after, for load that changes meanwhile
    return 2 * serial / parallel


def no_parallel_reason(parallel: float, least: float) -> str:
    """Why no loader can show a multi-process speed-up here: two threads ran under `least`x
    as fast as one (`parallel`, from parallel_speedup)."""
    return (
        f"two threads of CPU work ran {parallel:.2f}x as fast as one here (under {least}x: the "
        "CPU is busy with other programs or has one core), so no loader could show a "
        "multi-process speedup"
    )


def _nb_flag(func_name: str, args: tuple, kwargs: dict) -> bool:
    if "non_blocking" in kwargs:
        return bool(kwargs["non_blocking"])
    if func_name == "copy_":
        return len(args) > 2 and bool(args[2])
    return any(a is True for a in args[1:])  # .to(device, dtype, non_blocking) / .cuda(dev, nb)


_COPIES = ("to", "cuda", "copy_", "as_tensor", "asarray", "tensor")  # calls that can cross
_FROM_HOST_DATA = ("as_tensor", "asarray", "tensor")  # a tensor made from Python values


class TransferSpy(TorchFunctionMode):
    """Records how tensors are pinned and copied, and the bytes that cross to another device.

    Without an accelerator pinned memory cannot exist, so `simulate` makes chosen tensors
    report is_pinned() and turns pin_memory() into a plain copy that counts as pinned.

    Given the batch's element counts (`batch_numels`: images, labels), a crossing is the
    batch's ("images", "labels": the same number of elements, in whatever dtype) or "other"
    (constants such as mean and std, copied or made on the device from Python values); the
    batch's crossings are counted in `copies`, `sources` and `crossed_bytes`, the others in
    `others`, each with the call (`call`, set by the probe per batch) it happened in. Without
    it (a collate's pins), a 4-D tensor counts as images and anything else as labels."""

    def __init__(self, simulate: bool, cuda_as: str | None = None):
        super().__init__()
        self.simulate, self.pinned_ids, self.cuda_as = simulate, set(), cuda_as
        self.pinned_pageable, self.crossed_bytes = 0, 0
        self.copies: list[tuple[bool, bool]] = []  # the batch's: (source was pinned, non_blocking)
        self.sources: list[str] = []  # "images" or "labels", per copy of the batch
        self.dtypes: list[str] = []  # the dtype each copy of the batch arrived in
        self.others: list[dict] = []  # other tensors that crossed: call, shape, flags
        self.batch_numels: tuple[int, int] | None = None
        self.call = 0

    def is_pinned(self, t: torch.Tensor) -> bool:
        return id(t) in self.pinned_ids if self.simulate else t.is_pinned()

    def _kind(self, t: torch.Tensor) -> str:
        if self.batch_numels is None:
            return "images" if t.dim() == 4 else "labels"
        images, labels = self.batch_numels
        return {images: "images", labels: "labels"}.get(t.numel(), "other")

    def _stand_in(self, value):
        """`cuda` device arguments replaced by the stand-in device (`cuda_as`)."""
        is_cuda = (isinstance(value, torch.device) and value.type == "cuda") or (
            isinstance(value, str) and value.startswith("cuda")
        )
        return torch.device(self.cuda_as) if is_cuda else value

    def _crossed(
        self, kind: str, dst: torch.Tensor, pinned: bool, non_blocking: bool, src=None
    ) -> None:
        if kind == "other":
            self.others.append(
                {
                    "call": self.call,
                    "shape": list(dst.shape),
                    "pinned": pinned,
                    "non_blocking": non_blocking,
                }
            )
            return
        # A copy that changes the dtype converts on the device when non_blocking, so the source's
        # dtype crosses; a blocking one converts on the CPU first (ATen's copy_kernel_cuda:
        # "If non_blocking is true - type conversions are performed on the GPU")
        arrived = src if non_blocking and src is not None else dst
        self.crossed_bytes += dst.numel() * arrived.element_size()
        self.copies.append((pinned, non_blocking))
        self.sources.append(kind)
        self.dtypes.append(str(arrived.dtype).removeprefix("torch."))

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if self.cuda_as:
            args = tuple(self._stand_in(a) for a in args)
            kwargs = {k: self._stand_in(v) for k, v in kwargs.items()}
            if name == "cuda":
                func, name, args = torch.Tensor.to, "to", (args[0], torch.device(self.cuda_as))
        if name == "is_pinned" and self.simulate:
            return id(args[0]) in self.pinned_ids
        if name == "pin_memory":
            if not self.is_pinned(args[0]) and self._kind(args[0]) != "other":
                self.pinned_pageable += 1
            if self.simulate:
                out = args[0].clone()
                self.pinned_ids.add(id(out))
                return out
        out = func(*args, **kwargs)
        if name in _COPIES and args and isinstance(args[0], torch.Tensor):
            src = args[1] if name == "copy_" else args[0]
            dst = args[0] if name == "copy_" else out
            if isinstance(src, torch.Tensor) and isinstance(dst, torch.Tensor):
                if dst.device != src.device:
                    flags = self.is_pinned(src), _nb_flag(name, args, kwargs)
                    self._crossed(self._kind(src), dst, *flags, src=src)
        elif name in _FROM_HOST_DATA and isinstance(out, torch.Tensor) and out.device.type != "cpu":
            # made on the device from Python values: a blocking copy from pageable memory
            self._crossed("other", out, False, False)
        return out


_HOST_READS = ("numpy", "__array__", "item", "tolist", "cpu", "__bool__", "__float__", "__int__")
# calls that may take tensors on two devices (copies; a GPU also copies a CPU value on setitem)
_CROSSING = (*_COPIES, "copy_", "__setitem__", "clone", "pin_memory", "is_pinned", "detach")


def _tensors(values) -> list[torch.Tensor]:
    out = []
    for v in values:
        if isinstance(v, torch.Tensor):
            out.append(v)
        elif isinstance(v, list | tuple):
            out.extend(_tensors(v))
    return out


def _to_host(name: str, args: tuple, kwargs: dict) -> bool:
    """A `.to(...)` whose target is the CPU (a device, a string or another tensor)."""
    if name != "to":
        return False
    for v in (*args[1:], kwargs.get("device"), kwargs.get("other")):
        if isinstance(v, torch.Tensor):
            v = v.device
        if isinstance(v, torch.device | str):
            try:
                return torch.device(v).type == "cpu"
            except (RuntimeError, TypeError):
                continue
    return False


class DeviceFaults(TorchFunctionMode):
    """Records, on a stand-in device, what a real accelerator refuses or pays for: an operation
    that raised on a tensor there mixed with one on the CPU (a 0-d CPU tensor is a scalar,
    allowed), and calls that read a device tensor back to the host (`.numpy()`, `.cpu()`, ...).
    What it records is observed, so an error it explains is the code's, not the stand-in's."""

    def __init__(self):
        super().__init__()
        self.host_reads: list[str] = []  # ".numpy()", ...
        self.mixed: list[str] = []  # "sub: meta (32, 3, 5, 7), cpu (1, 3, 1, 1)", ...

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        first = args[0] if args else None
        on_device = isinstance(first, torch.Tensor) and first.device.type != "cpu"
        mixed = None
        if on_device and (name in _HOST_READS or _to_host(name, args, kwargs)):
            self.host_reads.append(f".{name}()" if not name.startswith("__") else name)
        elif name not in _CROSSING:
            ts = _tensors((*args, *kwargs.values()))
            if len({t.device.type for t in ts if t.dim() or t.device.type != "cpu"}) > 1:
                shown = ", ".join(f"{t.device.type} {tuple(t.shape)}" for t in ts)
                mixed = f"{name or func}: {shown}"
        try:
            return func(*args, **kwargs)
        except Exception:
            if mixed:  # kept only when it raised: some ops take a CPU index tensor, say
                self.mixed.append(mixed)
            raise


def raised_info(exc: BaseException) -> dict:
    """An exception as data: its type's name, its first line, and whether it says an operation
    is not implemented (as the meta device says of an op it lacks)."""
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return {
        "type": type(exc).__name__,
        "message": first,
        "not_implemented": isinstance(exc, NotImplementedError),
    }


def faults_info(faults: DeviceFaults) -> dict:
    """What a DeviceFaults saw, as data."""
    return {"host_reads": list(faults.host_reads), "mixed": list(faults.mixed)}


def _as_data(exc, faults) -> tuple[dict, dict]:
    exc = exc if isinstance(exc, dict) else raised_info(exc)
    faults = faults if isinstance(faults, dict) else faults_info(faults)
    return exc, faults


def stand_in_fault(exc, faults, stand_in: str) -> str | None:
    """Why code raised on the stand-in, when the cause was observed and a real accelerator
    refuses it as well: a read back to the host, or tensors on two devices in one operation.
    None when nothing observed explains it (an op the stand-in lacks, say). `exc` and
    `faults`: the exception and the DeviceFaults, or `raised_info` and `faults_info` of them."""
    exc, faults = _as_data(exc, faults)
    raised = f" ({exc['type']}: {exc['message']})"
    host_reads, mixed = list(faults["host_reads"]), list(faults["mixed"])
    if host_reads:
        calls = list(dict.fromkeys(host_reads))
        why = (
            "numpy works on host memory only, so on a GPU this raises as well"
            if {".numpy()", "__array__"} & set(calls)
            else "the data is copied to the host: on a GPU a device-to-host copy and a wait "
            "per batch"
        )
        return (
            f"your code called {', '.join(calls)} on a tensor on the {stand_in} device (a "
            f"stand-in for a GPU){raised}: {why}; keep the work in torch, where the batch is"
        )
    if mixed:
        return (
            f"one operation got tensors on two devices ({mixed[0]}){raised}, which a GPU "
            "refuses too: make what it combines with the batch on the batch's device"
        )
    return None


def stand_in_limit(exc, stand_in: str, unseen: str) -> str:
    """What to say when the stand-in could not run code and nothing observed blames the code
    (`exc`: the exception, or its `raised_info`)."""
    exc = exc if isinstance(exc, dict) else raised_info(exc)
    why = (
        "an operation the stand-in does not implement: its limit, not your code's fault"
        if exc["not_implemented"]
        else "no device fault (a read back to the host, tensors on two devices) was seen, so "
        "it is not counted against you"
    )
    return (
        f"the {stand_in} device (a stand-in for a GPU) could not run your code "
        f"({exc['type']}: {exc['message']}); {why}; {unseen}: not observed"
    )


def stand_in_part(name: str, exc, faults, unseen: str) -> Part:
    """The part for code that raised on the meta stand-in: failed, naming the observed device
    fault, or not-applicable, the stand-in's limit, when nothing observed explains it."""
    fault = stand_in_fault(exc, faults, "meta")
    if fault:
        return correct(name, False, fault)
    return not_applicable(name, stand_in_limit(exc, "meta", unseen))


# --- scenarios the checks build ---------------------------------------------------------------


def uint8_batch(n: int = 64, size: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """A uint8 batch of random images and labels, the same on every call."""
    g = torch.Generator().manual_seed(3)
    images = torch.randint(0, 256, (n, 3, size, size), dtype=torch.uint8, generator=g)
    return images, torch.randint(0, 10, (n,), generator=g)


class Bookended:
    """A loader whose first batch and end of epoch each wait `edge_s` more (workers starting,
    the last batch's wait), billed to the dataset's loading time."""

    def __init__(self, loader: DataLoader, edge_s: float, data):
        self.loader, self.edge_s, self.data = loader, edge_s, data

    def __len__(self) -> int:
        return len(self.loader)

    def _wait(self) -> None:
        t0 = time.perf_counter()
        time.sleep(self.edge_s)
        self.data.loading_s += time.perf_counter() - t0

    def __iter__(self):
        if self.edge_s:
            self._wait()
        yield from self.loader
        if self.edge_s:
            self._wait()
