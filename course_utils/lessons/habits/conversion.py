"""Lesson 10's second check: a tensor that shares the data's memory when torch can wrap it,
and the one copy that is needed when it cannot.

torch wraps a numpy array's memory when its description fits a tensor: a dtype torch has, in
the machine's byte order, strides that are non-negative whole numbers of elements, and the
dtype asked for. Anything else (a flipped view, big-endian bytes from a file, a field of a
packed record array, a dtype change, a Python list) must be copied, once, and the copy must
hold the same values in the right dtype.
"""

from __future__ import annotations

import tracemalloc
from dataclasses import dataclass

import numpy as np
import torch

from ...checks import check, correct
from .demo import shares_memory


@dataclass(frozen=True)
class Specimen:
    """Data as a pipeline hands it over, the dtype asked for, and whether memory can be shared."""

    data: object
    dtype: torch.dtype | None
    can_share: bool


def _packed_field(rng, n: int) -> np.ndarray:
    """The float32 field of a packed record array (what np.fromfile reads with a record dtype):
    a stride of 5 bytes, not a whole number of float32s."""
    records = np.zeros(n, dtype=[("tag", "u1"), ("x", "=f4")])
    records["x"] = rng.normal(size=n)
    return records["x"]


def specimens() -> dict[str, Specimen]:
    """The cases asked, small where sharing is judged and 64-96 kB where a copy is needed: a
    thrown-away copy stands out of the interpreter's own allocations, and under 32768
    elements torch compares them on one thread (fast on a busy machine)."""
    rng = np.random.default_rng(0)
    images = rng.normal(size=(8, 3, 4, 4)).astype(np.float32)
    big = rng.normal(size=(8, 3, 32, 32)).astype(np.float32)
    return {
        "float32 images": Specimen(images, None, True),
        "int64 labels": Specimen(rng.integers(0, 10, 16), None, True),
        "a column slice (strided view)": Specimen(
            rng.normal(size=(6, 8)).astype(np.float32)[:, ::2], None, True
        ),
        "a transposed matrix (x.T)": Specimen(rng.normal(size=(5, 3)).T, None, True),
        "float32 images, float32 asked for": Specimen(images.copy(), torch.float32, True),
        "a horizontally flipped image (negative strides)": Specimen(
            big.copy()[:, :, :, ::-1], None, False
        ),
        "a vertically flipped image (a[::-1], negative strides)": Specimen(
            big[0, 0].repeat(16, axis=0)[::-1], None, False
        ),
        "big-endian int32 read from a file (like MNIST's idx)": Specimen(
            rng.integers(0, 60000, 2**14).astype(">i4"), None, False
        ),
        "a flipped big-endian image (like a FITS file)": Specimen(
            big.astype(">f4")[:, :, ::-1], None, False
        ),
        "a field of a packed record array (stride 5 bytes)": Specimen(
            _packed_field(rng, 2**14), None, False
        ),
        "float64 features, float32 asked for": Specimen(
            rng.normal(size=(256, 64)), torch.float32, False
        ),
        "a Python list of floats": Specimen([0.5, 1.5, -2.0, 3.25], None, False),
        "a Python list of floats, float64 asked for": Specimen(
            [0.5, 1.5, -2.0, 3.25], torch.float64, False
        ),
        "a Python list of ints (torch's int64)": Specimen([3, 1, 4, 1, 5], None, False),
    }


def thrown_away_bytes(call):
    """`call()`'s result, and the bytes numpy allocated during the call and freed before it
    returned. numpy reports its data buffers to tracemalloc and torch's allocator does not,
    so a full-size number means numpy made a copy that the result does not hold: the result
    is a second copy."""
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    tracemalloc.reset_peak()
    try:
        out = call()
        after, peak = tracemalloc.get_traced_memory()
    finally:
        if started:
            tracemalloc.stop()
    return out, peak - after


COPY_FLOOR = 2**16  # bytes: the smallest copy judged; the interpreter's noise is a few kB


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


def _judge(name: str, s: Specimen, t, thrown: int = 0) -> object:
    want = expected_dtype(s)
    if not isinstance(t, torch.Tensor):
        return correct(name, False, f"returned {type(t).__name__}, not a tensor")
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
        if shares_memory(t, values):
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


@check(
    "10-to-tensor",
    points=2,
    hint="Reread section 2: for each kind of input, can a tensor (a start, a dtype, a shape "
    "and strides in whole elements, the machine's byte order) describe its memory? Where it "
    "can, share it (lesson.shares_memory tells you); where it cannot, make exactly one copy "
    "into a layout a tensor can describe. The message names each case that copied, shared "
    "or converted wrongly.",
)
def check_to_tensor(to_tensor) -> list:
    parts = []
    for name, s in specimens().items():
        try:
            t, thrown = thrown_away_bytes(
                lambda s=s: (
                    to_tensor(s.data) if s.dtype is None else to_tensor(s.data, dtype=s.dtype)
                )
            )
        except NotImplementedError:
            raise  # not attempted yet: the harness says so
        except (ValueError, TypeError, RuntimeError, BufferError) as exc:
            said = (
                f"your function raised {type(exc).__name__}: {str(exc).split('. ')[0].rstrip('.')}"
            )
            if isinstance(exc, ValueError | BufferError) and isinstance(s.data, np.ndarray):
                said += "; torch cannot wrap this array: make the one copy it needs"
            parts.append(correct(name, False, said))
            continue
        parts.append(_judge(name, s, t, thrown))
    return parts
