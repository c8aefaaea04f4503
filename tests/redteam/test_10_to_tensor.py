"""Red team, notebook 10 exercise 2 (`to_tensor(data, dtype=None)`), written blind: from the
notebooks, the generic check API and what the check prints, never its code or its tests.

Each case is a learner's answer, the verdict it deserves and, for a wrong one, the cause the
failing parts of the message must name (and causes they must not name). The check is cheap
(well under a second per call), so every case runs in CI.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from redteam_helpers import assert_verdict, open_holes, run_check

from course_utils.lessons import habits as lesson


def _native(a: np.ndarray) -> np.ndarray:
    """One copy into C order and the machine's byte order (the notebook's recipe)."""
    return np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("="))


def _odd_strides(a: np.ndarray) -> bool:
    """Strides a tensor cannot take: negative, or not a whole number of elements."""
    return any(s < 0 or s % a.itemsize for s in a.strides)


def _np_dtype(dtype: torch.dtype) -> np.dtype:
    return torch.empty(0, dtype=dtype).numpy().dtype


# --- valid: different code, same contract ----------------------------------------------------


def valid_try_then_copy(data, dtype=None):
    """Let torch say when it cannot describe the memory, and copy only then."""
    try:
        return torch.as_tensor(data, dtype=dtype)
    except ValueError:
        return torch.as_tensor(_native(np.asarray(data)), dtype=dtype)


def valid_from_numpy_then_to(data, dtype=None):
    """numpy arrays through from_numpy (shares), the dtype with .to (a no-op when equal)."""
    if not isinstance(data, np.ndarray):
        return torch.tensor(data, dtype=dtype)
    if not data.dtype.isnative or _odd_strides(data):
        data = data.astype(data.dtype.newbyteorder("="), order="C")
    t = torch.from_numpy(data)
    return t if dtype is None else t.to(dtype)


def valid_one_copy_into_target_dtype(data, dtype=None):
    """The dtype change done by numpy, without a copy when nothing changes, and at most one
    copy for everything a tensor cannot describe (flip, byte order, dtype) together."""
    if not isinstance(data, np.ndarray):
        return torch.as_tensor(data, dtype=dtype)
    want = data.dtype.newbyteorder("=") if dtype is None else _np_dtype(dtype)
    if not data.dtype.isnative or _odd_strides(data):
        return torch.from_numpy(np.ascontiguousarray(data, dtype=want))
    return torch.from_numpy(data.astype(want, copy=False))


def valid_byteswap_idiom(data, dtype=None):
    """The classic numpy idiom for foreign byte order: swap the bytes, then relabel them."""
    if isinstance(data, np.ndarray):
        if not data.dtype.isnative:
            data = data.byteswap().view(data.dtype.newbyteorder("="))
        if _odd_strides(data):
            data = data.copy()
    return torch.as_tensor(data, dtype=dtype)


# --- wrong: what a half-understanding learner writes ----------------------------------------


def wrong_torch_tensor_always(data, dtype=None):
    """'Safe': always a fresh tensor (fixed for byte order and flips, so nothing raises)."""
    if isinstance(data, np.ndarray):
        data = _native(data)
    return torch.tensor(data, dtype=dtype)


def wrong_contiguous_before_wrapping(data, dtype=None):
    """Believes a tensor needs C-contiguous memory: copies every view, slices and .T too."""
    if isinstance(data, np.ndarray) and not data.flags.c_contiguous:
        data = data.copy()
    if isinstance(data, np.ndarray) and not data.dtype.isnative:
        data = data.astype(data.dtype.newbyteorder("="))
    return torch.as_tensor(data, dtype=dtype)


def wrong_plain_as_tensor(data, dtype=None):
    """Tip 12 alone: as_tensor shares when it can, and raises where it cannot."""
    return torch.as_tensor(data, dtype=dtype)


def wrong_flips_only(data, dtype=None):
    """Copies negative strides, forgets the byte order (MNIST's idx headers raise)."""
    if isinstance(data, np.ndarray) and min(data.strides, default=0) < 0:
        data = data.copy()
    return torch.as_tensor(data, dtype=dtype)


def wrong_relabels_byte_order(data, dtype=None):
    """Relabels big-endian bytes as native without swapping them: shares, wrong values."""
    if isinstance(data, np.ndarray) and not data.dtype.isnative:
        data = data.view(data.dtype.newbyteorder("="))
    if isinstance(data, np.ndarray) and min(data.strides, default=0) < 0:
        data = data.copy()
    return torch.as_tensor(data, dtype=dtype)


def wrong_from_numpy_of_asarray(data, dtype=None):
    """Everything through numpy: a list of Python floats becomes float64, not torch's float32."""
    data = np.asarray(data)
    if not data.dtype.isnative or min(data.strides, default=0) < 0:
        data = _native(data)
    t = torch.from_numpy(data)
    return t if dtype is None else t.to(dtype)


def wrong_dtype_given_means_copy(data, dtype=None):
    """A dtype asked for is taken as a conversion: copied even when it is the data's own."""
    if dtype is not None:
        return torch.tensor(
            np.asarray(data) if isinstance(data, list) else _native(data), dtype=dtype
        )
    return valid_try_then_copy(data)


def wrong_numpy_astype_for_dtype(data, dtype=None):
    """Converts with numpy's astype, which copies by default, also for the same dtype."""
    if isinstance(data, np.ndarray) and dtype is not None:
        data = data.astype(_np_dtype(dtype))
    return valid_try_then_copy(data)


def wrong_floats_default_to_float32(data, dtype=None):
    """'torch works in float32': float64 arrays become float32 when no dtype is asked."""
    if dtype is None and isinstance(data, np.ndarray) and data.dtype.kind == "f":
        dtype = torch.float32
    return valid_try_then_copy(data, dtype)


def wrong_list_ignores_dtype(data, dtype=None):
    """Lists handled on their own, and the dtype forgotten there."""
    if isinstance(data, list):
        return torch.tensor(data)
    return valid_try_then_copy(data, dtype)


def wrong_list_always_float32(data, dtype=None):
    """Read the list case as 'lists are float32': a list of ints comes back float32."""
    if isinstance(data, list):
        return torch.tensor(data, dtype=dtype or torch.float32)
    return valid_try_then_copy(data, dtype)


def wrong_last_axis_flip_only(data, dtype=None):
    """Thinks of horizontal flips only: a vertical flip (a[::-1]) still raises."""
    if isinstance(data, np.ndarray) and (not data.dtype.isnative or data.strides[-1] < 0):
        data = _native(data)
    return torch.as_tensor(data, dtype=dtype)


def wrong_flip_or_byte_order(data, dtype=None):
    """if/elif: a flipped big-endian array (a FITS image, say) gets only the flip fixed."""
    if isinstance(data, np.ndarray):
        if min(data.strides, default=0) < 0:
            data = data.copy()
        elif not data.dtype.isnative:
            data = data.astype(data.dtype.newbyteorder("="))
    return torch.as_tensor(data, dtype=dtype)


def wrong_copies_twice(data, dtype=None):
    """Where a copy is needed, makes two: numpy's, then torch.tensor's."""
    if isinstance(data, np.ndarray) and (
        not data.dtype.isnative or min(data.strides, default=0) < 0
    ):
        return torch.tensor(_native(data), dtype=dtype)
    return torch.as_tensor(data, dtype=dtype)


def wrong_misses_strides_not_multiple_of_itemsize(data, dtype=None):
    """The solution notebook's own test (negative strides, byte order) and nothing else: a
    field of a packed record array (np.fromfile with a record dtype) has a stride that is
    not a whole number of elements, which no tensor can describe, and torch raises."""
    if isinstance(data, np.ndarray) and (
        not data.dtype.isnative or min(data.strides, default=0) < 0
    ):
        data = _native(data)
    return torch.as_tensor(data, dtype=dtype)


def _case(fn, expect="failed", cause=None, not_causes=()):
    kind = "valid" if fn.__name__.startswith("valid_") else "wrong"
    return pytest.param(fn, expect, cause, not_causes, id=f"{kind}-{fn.__name__[6:]}")


NOT_A_COPY = r"byte order|negative|flip|float64|dtype"  # causes of other mistakes
CASES = [
    _case(valid_try_then_copy, "passed"),
    _case(valid_from_numpy_then_to, "passed"),
    _case(valid_one_copy_into_target_dtype, "passed"),
    _case(valid_byteswap_idiom, "passed"),
    # not_causes narrowed after the fix that counts copies: its flip and byte-order parts now
    # fail rightly ("two copies": numpy's, then torch.tensor's), and their names say "flip"
    _case(wrong_torch_tensor_always, cause=r"copy|torch\.tensor", not_causes=(r"float64|dtype",)),
    _case(
        wrong_contiguous_before_wrapping,
        cause=r"(slice|transpos).*(copy|not show)|copy.*contiguous",
        not_causes=(r"byte order|float64",),
    ),
    _case(wrong_plain_as_tensor, cause=r"negative stride|byte order", not_causes=(r"float64",)),
    _case(wrong_flips_only, cause=r"byte order|native", not_causes=(r"negative|float64",)),
    _case(wrong_relabels_byte_order, cause=r"value", not_causes=(r"negative|float64",)),
    _case(wrong_from_numpy_of_asarray, cause=r"list.*float64|float64.*float32"),
    _case(wrong_dtype_given_means_copy, cause=r"float32 asked.*(copy|not show)"),
    _case(wrong_numpy_astype_for_dtype, cause=r"float32 asked.*(copy|not show)|astype"),
    _case(wrong_floats_default_to_float32, cause=r"float64|own dtype|dtype"),
    _case(wrong_list_ignores_dtype, cause=r"list.*(dtype|float)"),
    _case(wrong_list_always_float32, cause=r"list.*(int64|dtype)"),
    _case(wrong_last_axis_flip_only, cause=r"negative|flip|stride"),
    _case(wrong_flip_or_byte_order, cause=r"byte order|native|big-endian"),
    _case(wrong_copies_twice, cause=r"two cop|twice|copies|one copy"),
    _case(wrong_misses_strides_not_multiple_of_itemsize, cause=r"stride|record|raised"),
]


HOLES: dict[str, str] = {}  # all closed in the check (see README, "after")


@pytest.mark.parametrize("fn, expect, cause, not_causes", open_holes(CASES, HOLES))
def test_to_tensor(fn, expect, cause, not_causes):
    assert_verdict(run_check(lesson.check_to_tensor, fn), expect, cause, not_causes)


def test_cases_behave_as_written_on_their_own_specimens():
    """The wrong answers really are wrong somewhere a loader can hand over (so a case that
    passes the check is a hole of the check, not a harmless variant), and the valid ones
    right there too."""
    vflip = np.arange(12, dtype=np.float32).reshape(3, 4)[::-1]
    be_flip = np.arange(12, dtype=">f4").reshape(3, 4)[:, ::-1]
    f64 = np.linspace(0, 1, 6)
    rec = np.zeros(4, dtype=[("tag", "u1"), ("x", "<f4")])
    rec["x"] = [1.5, 2.5, 3.5, 4.5]
    ints = [1, 2, 3]
    assert wrong_floats_default_to_float32(f64).dtype == torch.float32
    assert wrong_list_ignores_dtype(ints, torch.float32).dtype == torch.int64
    assert wrong_list_always_float32(ints).dtype == torch.float32
    for wrong, specimen in [
        (wrong_last_axis_flip_only, vflip),
        (wrong_flip_or_byte_order, be_flip),
        (wrong_misses_strides_not_multiple_of_itemsize, rec["x"]),
    ]:
        with pytest.raises(ValueError):
            wrong(specimen)
    valids = [p.values[0] for p in CASES if p.id.startswith("valid-")]
    for valid in valids:
        for specimen in (vflip, be_flip, f64, rec["x"]):
            t = valid(specimen)
            assert t.dtype == torch.from_numpy(_native(specimen)).dtype
            assert np.array_equal(t.numpy(), specimen)
        assert valid(f64).dtype == torch.float64 and lesson.shares_memory(valid(f64), f64)
        assert valid(ints).dtype == torch.int64
