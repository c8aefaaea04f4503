"""What the speed-run check watches while the learner's run runs: torch's classes (and the data
sets') patched for the length of the call, then put back. Each probe costs a set insert per
call it watches, well under a second per run.

- `precision_watch`: fp16 autocast regions entered and losses scaled by a GradScaler.

- `module_births`, `stale`, `weight_sources`: where the returned model came from
  (course_utils.watching, shared with lesson 18's speed-run).
- `data_reads`: which training images the call read (the data set's `__getitem__`), and the
  test split guarded: reading any of its images fails, as `held_out_accuracy` does. DataLoader
  workers are watched too: a forked worker reports to a file (its memory is gone when it
  exits), and a data set sent to a spawned worker is pickled here, where it is seen.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.utils.data import DataLoader

from ... import checks as harness
from ... import guards
from ...data import OfflineImages
from ...errors import HeldOutUsed
from ...watching import Sources, module_births, stale, weight_sources  # noqa: F401

TEST_SPLIT = "cu.load_data().test"  # how the guard names the test split when it is read


@contextlib.contextmanager
def precision_watch() -> Iterator[dict[str, int]]:
    """Counts fp16 autocast regions entered and losses scaled by an enabled GradScaler, for
    as long as the block runs (torch's classes patched, then put back)."""
    seen = {"fp16": 0, "scaled": 0}
    autocast_cls, scaler_cls = torch.amp.autocast_mode.autocast, torch.amp.GradScaler
    enter, scale = autocast_cls.__enter__, scaler_cls.scale

    def watched_enter(self):
        if self._enabled and self.fast_dtype == torch.float16:
            seen["fp16"] += 1
        return enter(self)

    def watched_scale(self, outputs):
        if self.is_enabled():
            seen["scaled"] += 1
        return scale(self, outputs)

    autocast_cls.__enter__, scaler_cls.scale = watched_enter, watched_scale
    try:
        yield seen
    finally:
        autocast_cls.__enter__, scaler_cls.scale = enter, scale


@dataclass
class Reads:
    """Training images read during one call: distinct (data set, index) pairs, in this
    process and its forked DataLoader workers; `sent`: training sets pickled (to spawned
    workers, whose reads cannot be counted here)."""

    train: set[tuple[int, int]] = field(default_factory=set)
    sent: int = 0


def _dataset_classes() -> list[type]:
    classes: list[type] = [OfflineImages]
    with contextlib.suppress(ImportError):
        from torchvision.datasets import CIFAR10

        classes.append(CIFAR10)
    return classes


class _WorkerLog:
    """Where forked DataLoader workers write what they read: one line per read, appended."""

    def __init__(self) -> None:
        fd, self.path = tempfile.mkstemp(prefix="course-capstone-reads-")
        os.close(fd)
        self.parent, self._fds = os.getpid(), {}

    def in_worker(self) -> bool:
        return os.getpid() != self.parent

    def write(self, line: str) -> None:
        fd = self._fds.get(os.getpid())
        if fd is None:
            fd = self._fds[os.getpid()] = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        os.write(fd, (line + "\n").encode())

    def lines(self) -> list[str]:
        with open(self.path) as f:
            return f.read().splitlines()

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            os.remove(self.path)


@contextlib.contextmanager
def data_reads() -> Iterator[Reads]:
    """Counts the training images read while the block runs and guards the test split: an
    item of a test split read by the learner's code raises HeldOutUsed (recorded in
    `held_out_reads`, in case the learner's code catches it), and so does sending a test split
    to a spawned DataLoader worker. Both data sources are covered (the offline set and
    torchvision's CIFAR10), however they were reached."""
    reads, log = Reads(), _WorkerLog()
    classes = _dataset_classes()
    getitems = {cls: cls.__getitem__ for cls in classes}
    reducers = {cls: cls.__dict__.get("__reduce_ex__") for cls in classes}  # None: object's

    def held_out_read(what: str):
        harness.held_out_reads.append(what)
        if log.in_worker():
            log.write(f"held-out {what}")
        raise HeldOutUsed(TEST_SPLIT)

    def watched(getitem):
        def getitem_watched(self, index):
            if not getattr(self, "train", True):
                if guards._learner_depth > 0:
                    held_out_read(TEST_SPLIT)
            elif log.in_worker():
                log.write(f"read {id(self)} {int(index)}")
            else:
                reads.train.add((id(self), int(index)))
            return getitem(self, index)

        return getitem_watched

    def reduce_watched(self, protocol):
        if guards._learner_depth > 0 and not log.in_worker():
            if not getattr(self, "train", True):
                held_out_read(f"{TEST_SPLIT}, sent to a DataLoader worker")
            reads.sent += 1
        own = next((reducers[c] for c in type(self).__mro__ if reducers.get(c)), None)
        return (own or object.__reduce_ex__)(self, protocol)

    loader_iter = DataLoader.__iter__

    def iter_watched(self):
        if guards._learner_depth > 0 and _holds_test_split(self.dataset, classes):
            held_out_read(f"{TEST_SPLIT}, through a DataLoader")
        return loader_iter(self)

    DataLoader.__iter__ = iter_watched
    for cls, getitem in getitems.items():
        cls.__getitem__ = watched(getitem)
        cls.__reduce_ex__ = reduce_watched
    try:
        yield reads
    finally:
        DataLoader.__iter__ = loader_iter
        for cls, getitem in getitems.items():
            cls.__getitem__ = getitem
            if reducers[cls] is None:
                del cls.__reduce_ex__
            else:
                cls.__reduce_ex__ = reducers[cls]
        for line in log.lines():
            kind, _, rest = line.partition(" ")
            if kind == "read":
                data_set, index = rest.split()
                reads.train.add((int(data_set), int(index)))
            elif kind == "held-out":
                harness.held_out_reads.append(rest)
        log.remove()


def _holds_test_split(obj, classes: list[type], depth: int = 4) -> bool:
    """Whether a data set is, or wraps (Subset, ConcatDataset, the learner's own wrapper, a few
    levels down its attributes), a test split. A loader's workers may have started before
    the check (persistent_workers), out of the guard's reach: its iteration is not."""
    if isinstance(obj, tuple(classes)):
        return not getattr(obj, "train", True)
    if depth == 0:
        return False
    if isinstance(obj, list | tuple):
        return any(_holds_test_split(v, classes, depth - 1) for v in obj[:16])
    if isinstance(obj, torch.utils.data.Dataset):
        inner = getattr(obj, "__dict__", {}).values()
        return any(_holds_test_split(v, classes, depth - 1) for v in inner)
    return False


def float32_refused(model: nn.Module, device: torch.device) -> str | None:
    """Where the model holds floating weights other than float32: the error it raises on a
    float32 batch (the images it is judged on), else None. Models in float32 are not run."""
    dtypes = {p.dtype for p in model.parameters() if p.is_floating_point()} - {torch.float32}
    if not dtypes:
        return None
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            model(torch.zeros(2, 3, 32, 32, device=device))
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "RuntimeError"
        names = ", ".join(sorted(str(d).replace("torch.", "") for d in dtypes))
        return f"{names} weights; on float32 images it raised: {first}"
    finally:
        model.train(was_training)
    return None
