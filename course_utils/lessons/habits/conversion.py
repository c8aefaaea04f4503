"""Lesson 10's second check: a tensor that shares the data's memory when torch can wrap it,
and the one copy that is needed when it cannot.

torch wraps a numpy array's memory when its description fits a tensor: a dtype torch has, in
the machine's byte order, strides that are non-negative whole numbers of elements, and the
dtype asked for. Anything else (a flipped view, big-endian bytes from a file, a field of a
packed record array, a dtype change, a Python list) must be copied, once, and the copy must
hold the same values in the right dtype.
"""

from __future__ import annotations

import numpy as np
import torch

from ...checks import check, correct
from ...probes import observe, specimen_rng
from .arrays import COPY_FLOOR, Specimen, specimens
from .probes import converted

__all__ = ["check_to_tensor", "expected_dtype", "specimens"]


def _dtype_name(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def expected_dtype(s: Specimen) -> torch.dtype:
    """The dtype asked for, else the data's own (in native byte order; a list: torch's)."""
    if s.dtype is not None:
        return s.dtype
    if isinstance(s.data, np.ndarray):
        return torch.from_numpy(np.zeros(1, s.data.dtype.newbyteorder("="))).dtype
    return torch.as_tensor(s.data).dtype


def _copy_cause(t: torch.Tensor, array: np.ndarray) -> str:
    if t.device.type != "cpu":
        return f"it lives on {t.device}: return the host tensor, move it once later"
    if _dtype_name(t) != str(array.dtype):
        return f"{array.dtype} became {t.dtype}: a change of dtype is a copy"
    return "it is a copy: torch.tensor, .copy(), .astype(...), .contiguous() and .clone() all copy"


def _judge(name: str, s: Specimen, seen: dict) -> object:
    """The verdict on what the learner's conversion of `s` gave (probes.converted): judged on
    this side's own copy of the specimen."""
    if "raised" in seen:
        said = f"your function raised {seen['raised']}: {seen['message']}"
        if seen["refused"] and isinstance(s.data, np.ndarray):
            said += "; torch cannot wrap this array: make the one copy it needs"
        return correct(name, False, said)
    t, thrown, want = seen["tensor"], int(seen["thrown"]), expected_dtype(s)
    if not isinstance(t, torch.Tensor):
        return correct(
            name, False, f"returned {getattr(t, 'type_name', type(t).__name__)}, not a tensor"
        )
    values = np.asarray(s.data)
    if t.device.type != "cpu" or tuple(t.shape) != values.shape:
        said = f"returned a {tuple(t.shape)} tensor on {t.device} for {values.shape} data"
        return correct(name, False, said + ": return a CPU tensor of the data's shape")
    if t.dtype != want:
        asked = (
            "asked for"
            if s.dtype is not None
            else "the data's own"
            if isinstance(s.data, np.ndarray)
            else "torch's for Python numbers"
        )
        return correct(name, False, f"returned {t.dtype}, expected {want} ({asked})")
    if s.can_share:
        if seen["shares"]:
            return correct(name, True, "a write to the array shows in the tensor: no copy")
        why = _copy_cause(t, values)
        return correct(name, False, f"a write to the array does NOT show in the tensor ({why})")
    with np.errstate(all="ignore"):  # a wrong answer's bytes may read as NaN or inf
        got, data = t.detach().numpy().astype(np.float64), values.astype(np.float64)
        close = np.allclose(got, data, rtol=1e-6)
    if not close:
        return correct(name, False, "the values differ from the data's: a copy must keep them")
    size = t.numel() * t.element_size()
    if size >= COPY_FLOOR and thrown >= 0.9 * size:
        said = (
            f"two copies where one suffices: numpy made a {thrown // 1024} kB copy that was "
            "thrown away, and the tensor holds another; wrap numpy's copy (as_tensor and "
            "from_numpy share it), or let torch make the only one"
        )
        return correct(name, False, said)
    return correct(name, True, "a copy, as it must be here, with the data's values")


SPECIMEN_SEEDS = (0, 1, 2)  # specimens' seed, drawn per run (the first in a notebook)


@check(
    "10-to-tensor",
    points=2,
    hint="Reread section 2: for each kind of input, can a tensor (a start, a dtype, a shape "
    "and strides in whole elements, the machine's byte order) describe its memory? Where it "
    "can, share it (lesson.shares_memory tells you); where it cannot, make exactly one copy "
    "into a layout a tensor can describe. The message names each case that copied, shared "
    "or converted wrongly.",
    in_kernel="whether a write to the array shows in the tensor, and the bytes numpy "
    "allocated and freed during the call (tracemalloc), read beside the learner's call",
)
def check_to_tensor(to_tensor) -> list:
    seed = specimen_rng().choice(SPECIMEN_SEEDS)
    return [
        _judge(name, s, observe(converted, to_tensor, name, seed))
        for name, s in specimens(seed).items()
    ]
