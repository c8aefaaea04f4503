"""What the speed-run check watches while the learner's run runs: torch's classes (and the data
sets') patched for the length of the call, then put back. Each probe costs a set insert per
call it watches, well under a second per run.

- `module_births`: which nn.Modules were constructed during the call. A speed-run trains from
  scratch each time it is timed, so the model it returns (and each of its submodules) must be
  built during that call: a model kept from an earlier call, or a deepcopy of one (copying
  calls no `__init__`), was not.
- `data_reads`: which training images the call read (the data set's `__getitem__`), and the
  test split guarded: reading any of its images fails, as `held_out_accuracy` does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from torch import nn

from ... import checks as harness
from ...data import OfflineImages
from ...errors import HeldOutUsed

TEST_SPLIT = "cu.load_data().test"  # how the guard names the test split when it is read


@contextlib.contextmanager
def module_births() -> Iterator[set[int]]:
    """The ids of the nn.Modules constructed while the block runs. An id names one object for
    as long as it lives: a module alive before the block can never share an id with one born
    in it, so `stale(model, born)` cannot mistake an old model for a new one."""
    born: set[int] = set()
    init = nn.Module.__init__

    def watched_init(self, *args, **kwargs):
        born.add(id(self))
        return init(self, *args, **kwargs)

    nn.Module.__init__ = watched_init
    try:
        yield born
    finally:
        nn.Module.__init__ = init


def stale(model: nn.Module, born: set[int]) -> list[str]:
    """The names of the modules in `model` (itself: "the model") not built during the call."""
    return [name or "the model" for name, m in model.named_modules() if id(m) not in born]


@dataclass
class Reads:
    """Training images read during one call: distinct (data set, index) pairs."""

    train: set[tuple[int, int]] = field(default_factory=set)


def _dataset_classes() -> list[type]:
    classes: list[type] = [OfflineImages]
    with contextlib.suppress(ImportError):
        from torchvision.datasets import CIFAR10

        classes.append(CIFAR10)
    return classes


@contextlib.contextmanager
def data_reads() -> Iterator[Reads]:
    """Counts the training images read while the block runs and guards the test split: an
    item of a test split read by the learner's code raises HeldOutUsed (recorded in
    `held_out_reads`, in case the learner's code catches it). Both data sources are covered
    (the offline set and torchvision's CIFAR10), however they were reached."""
    reads = Reads()
    originals = {cls: cls.__getitem__ for cls in _dataset_classes()}

    def watched(getitem):
        def getitem_watched(self, index):
            if not getattr(self, "train", True):
                if harness._learner_depth > 0:
                    harness.held_out_reads.append(TEST_SPLIT)
                    raise HeldOutUsed(TEST_SPLIT)
            else:
                reads.train.add((id(self), int(index)))
            return getitem(self, index)

        return getitem_watched

    for cls, getitem in originals.items():
        cls.__getitem__ = watched(getitem)
    try:
        yield reads
    finally:
        for cls, getitem in originals.items():
            cls.__getitem__ = getitem


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
