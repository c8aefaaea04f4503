"""What loaders hand over, for lesson 10's 10-to-tensor: the arrays (and lists) a conversion
is asked about, each with whether a tensor can share its memory, and how many bytes numpy
copied and threw away during a call. Both sides of the check build them (probes.py runs the
learner's conversion on them, conversion.py judges what came back)."""

from __future__ import annotations

import tracemalloc
from dataclasses import dataclass

import numpy as np
import torch

from .demo import shares_memory

__all__ = ["COPY_FLOOR", "Specimen", "shares_memory", "specimens", "thrown_away_bytes"]


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


def specimens(seed: int = 0) -> dict[str, Specimen]:
    """The cases asked, small where sharing is judged and 64-96 kB where a copy is needed: a
    thrown-away copy stands out of the interpreter's own allocations, and under 32768
    elements torch compares them on one thread (fast on a busy machine). `seed` moves the
    values, never a shape, a stride, a dtype or a byte order."""
    rng = np.random.default_rng(seed)
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
