"""What the float32-island check observes of a learner's `stable_scores`: the precision each of
its operations computed in, and three probe calls that tell its possible mistakes apart.

A message names a cause only where a probe confirmed it: "switch autocast off" only when the
same call is right outside autocast, "cast q and k" only when it is right given float32
inputs, "not softmax(q @ k.T)" only when it is wrong even in float32.
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from . import demo

# conversions and views move or relabel numbers; they do not compute with them
_NOT_COMPUTE = {
    "_to_copy", "copy_", "clone", "detach", "alias", "lift_fresh", "lift_fresh_copy", "t",
    "transpose", "permute", "view", "_unsafe_view", "reshape", "expand", "unsqueeze",
    "squeeze", "select", "slice", "as_strided", "contiguous", "_reshape_alias", "empty_like",
    "zeros_like", "ones_like", "empty", "zeros", "ones", "full", "scalar_tensor", "_to_dense",
}  # fmt: skip
_MATMUL = {"mm", "bmm", "matmul", "addmm", "baddbmm", "dot", "mv"}
_SIXTEEN = (torch.float16, torch.bfloat16)


def _short(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


class OpLog:
    """Computing operations as (aten name, dtypes of the floating inputs, output dtype), in
    order, and what they say about precision."""

    def __init__(self, ops=()):
        self.ops: list[tuple[str, tuple[torch.dtype, ...], torch.dtype]] = list(ops)

    def in_sixteen_bits(self) -> list[str]:
        """What computed in 16 bits, in words, each once, in order: 'the matmul q @ k.T
        (float16)', 'softmax (on float16 scores)'."""
        said: list[str] = []
        for name, ins, out in self.ops:
            low = [d for d in (*ins, out) if d in _SIXTEEN]
            if not low:
                continue
            if name in _MATMUL:
                words = f"the matmul q @ k.T ({_short(out)})"
            elif "softmax" in name:
                words = f"softmax (on {_short(low[0])} scores)"
            else:
                words = f"{name} ({_short(low[0])})"
            if words not in said:
                said.append(words)
        return said

    def matmul_dtypes(self) -> list[torch.dtype]:
        return [out for name, _, out in self.ops if name in _MATMUL]

    def to_data(self) -> list:
        return [[name, [_short(d) for d in ins], _short(out)] for name, ins, out in self.ops]

    @classmethod
    def from_data(cls, data) -> OpLog:
        """The log `to_data` wrote (a probe's reading); a name that is no dtype is refused."""
        return cls(
            (str(name), tuple(_dtype(d) for d in ins), _dtype(out)) for name, ins, out in data
        )


def _dtype(name) -> torch.dtype:
    dtype = getattr(torch, str(name), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"not a dtype: {name!r}")
    return dtype


class OpPrecisions(OpLog, TorchDispatchMode):
    """Record each computing operation below autocast (so after its casts): the aten name,
    the dtypes of its floating inputs and of its floating output."""

    def __init__(self):
        TorchDispatchMode.__init__(self)
        OpLog.__init__(self)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if name not in _NOT_COMPUTE:
            ins = tuple(
                t.dtype
                for t in tree_leaves((args, kwargs or {}))
                if isinstance(t, torch.Tensor) and t.is_floating_point()
            )
            for t in tree_leaves(out):
                if isinstance(t, torch.Tensor) and t.is_floating_point():
                    self.ops.append((name, ins, t.dtype))
        return out


def observe(
    stable_scores, case: str, seed: int, autocast: bool, cast: bool = False, probe: bool = True
) -> tuple[float, str, OpLog]:
    """(largest probability error vs float64, output dtype, the ops' precisions) of one call
    on score_inputs(case, seed) (`cast`: as float32), under CPU fp16 autocast or without any.
    The call runs in a probe (probes.island_reading); the error is computed here. In a
    diagnosis (`probe`: not the graded call) an exception counts as an infinite error: that
    setting does not work, which is evidence."""
    from ...probes import LearnerRaised
    from ...probes import observe as run
    from .probes import island_reading

    q, k = demo.score_inputs(case, seed=seed)
    try:
        seen = run(island_reading, stable_scores, case, seed, autocast, cast, probe)
        log = OpLog.from_data(seen["ops"])
        if seen.get("raised"):
            return float("inf"), "error", log
        out = torch.as_tensor(seen["out"])
        error = (out.double() - demo.true_scores(q, k)).abs().max().item()
    except (LearnerRaised, RuntimeError, TypeError, ValueError):
        if not probe:
            raise
        return float("inf"), "error", OpLog()
    return (error if error == error else float("inf")), _short(out.dtype), log


def diagnose(stable_scores, case: str, seed: int, seen: OpLog, tol: float) -> str:
    """Why the graded call (fp16 autocast, float16 inputs) was off, from what it computed in
    and from three probes: no autocast around the same inputs, float32 inputs under the same
    autocast, float32 inputs without autocast (the function itself)."""
    off_error, _, _ = observe(stable_scores, case, seed, autocast=False)
    cast_error, _, _ = observe(stable_scores, case, seed, autocast=True, cast=True)
    plain_error, _, plain = observe(stable_scores, case, seed, autocast=False, cast=True)
    low = seen.in_sixteen_bits()
    said = f"in 16 bits it computed {', '.join(low)}" if low else "nothing ran in 16 bits"
    if plain_error > tol:
        if plain.in_sixteen_bits():
            return (
                f"{said}; even on float32 q and k with no autocast around it, your function "
                f"computes {', '.join(plain.in_sixteen_bits())}: it turns to 16 bits itself. "
                "The island must compute in float32 (or float64)"
            )
        return (
            f"{said}; in float32 (float32 inputs, no autocast) its probabilities are also off "
            f"by {plain_error:.3g}: it is not softmax(q @ k.T, dim=-1). Keep the function, "
            "change only the precision"
        )
    if any(d in _SIXTEEN for d in seen.matmul_dtypes()):
        if off_error <= tol:
            return (
                f"{said}. Outside autocast the same call, on the same float16 q and k, is right: "
                "inside the region, autocast casts a matmul's inputs to float16 whatever dtype "
                "you gave them. Switch autocast off for q.device.type around the island"
            )
        if cast_error <= tol:
            return (
                f"{said}. Given float32 q and k under the same autocast it is right: it computes "
                "on the float16 inputs it receives. Cast q and k to float32 inside the island"
            )
        return (
            f"{said}. It is right only given float32 q and k AND with autocast off around it, "
            "neither alone: the island needs both"
        )
    matmuls = seen.matmul_dtypes()
    if low and matmuls:
        return (
            f"{said}, while the matmul itself ran in {_short(matmuls[-1])}: the scores went "
            "back to 16 bits before the softmax. Keep them in float32 until the softmax is done"
        )
    return f"{said}; in float32 the same function is right: compare each op's dtype with float32"
