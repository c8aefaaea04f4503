"""Why an answer of exercise 1 (04-loss-scale) is wrong, named only from what its probe saw
(probes.rescued_reading): the loss scale each backward pass used (the gradient reaching the
model's output against float32's), whether a pass began with inf/NaN left in .grad, the dtype
and the values of the gradients returned. Issue 34: the messages named "a smaller scale" for a
search that lowered it but kept the failed try's inf in .grad, "a scale too small" for a right
scale divided out in float16, and "a larger scale" for gradients divided by it twice."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from . import demo

GOOD_SCALE = (
    2.0**13
)  # at or above it the smallest gradients keep their bits (grad_error's evidence)


def fp32_output_grad_max(snapshot: str, seed: int) -> float:
    """The largest gradient of F.mse_loss reaching the model's output, in float32."""
    model, x, y = demo.snapshot(snapshot, seed=seed)
    out = model(x).detach().requires_grad_()
    F.mse_loss(out, y).backward()
    return float(out.grad.abs().max())


def scales_used(passes: list[dict], fp32_max: float) -> list[float]:
    """The loss scale of each backward pass: its output gradient over float32's."""
    return [float(p["out_grad_max"]) / fp32_max for p in passes]


def as_power(scale: float) -> str:
    if not scale > 0 or math.isinf(scale):
        return f"{scale:.3g}"
    return f"2^{round(math.log2(scale))}"


def _fp16_numbers_only(grads) -> bool:
    """Every nonzero value returned is a float16 number (a division or cast in float16)."""
    for g in grads:
        g = torch.as_tensor(g).detach().float()
        nz = g[g != 0]
        if nz.numel() and not bool((nz.half().float() == nz).all()):
            return False
    return True


def diagnose(grads, reference, seen: dict, fp32_max: float, zero_limit: float) -> str:
    """The cause of a failed snapshot, confirmed by the probe's readings, or what differs."""
    passes, dtypes = list(seen.get("passes", [])), [str(d) for d in seen.get("dtypes", [])]
    scales = scales_used(passes, fp32_max)
    used = f"your backward ran at a loss scale of about {as_power(scales[-1])}" if scales else ""
    if not all(torch.isfinite(torch.as_tensor(g)).all() for g in grads):
        if len(passes) > 1 and any(bool(p["nonfinite_grad"]) for p in passes[1:]):
            tried = ", ".join(as_power(s) for s in scales)
            return (
                f"inf/NaN in your gradients: your function tried {len(passes)} scales ({tried}), "
                "but each backward after an overflow added onto the inf/NaN the failed try "
                "left in .grad: zero .grad before each try (model.zero_grad(set_to_none=True))"
            )
        where = f"{used} and " if used else ""
        return (
            f"inf/NaN in your gradients: {where}the scaled gradients overflowed fp16 (max "
            "65504) on this snapshot's large gradients: use a smaller scale here, or lower it "
            "and try again when torch.isfinite finds an overflow in the gradients"
        )
    low = sorted({d for d in dtypes if d in ("float16", "bfloat16")})
    if low:
        return (
            f"you returned {' and '.join(low)} gradients: the small ones underflow again "
            "there; divide by the scale in float32 and return float32"
        )
    if scales and scales[-1] < 0.5:
        return (
            f"{used}, below 1: the loss was divided by the scale, not multiplied, so the "
            "gradients shrank further into fp16's underflow before any division could restore "
            "them; multiply the loss by the scale, then divide the gradients by it"
        )
    norm = torch.cat([torch.as_tensor(g).float().flatten() for g in grads]).norm()
    ref = torch.cat([r.flatten() for r in reference]).norm()
    ratio = (norm / ref).item()
    if ratio > 8 or ratio < 1 / 8:
        said = f"your gradients are {ratio:.3g}x the true ones"
        if not scales:
            return f"{said}: divide by the scale you multiplied the loss by, once"
        if ratio > 8 and 0.5 <= ratio / scales[-1] <= 2:
            return (
                f"{said}, about the loss scale your backward ran at "
                f"({as_power(scales[-1])}): divide by the scale afterwards"
            )
        return f"{said}, and {used}: divide the gradients by that scale, once"
    zeros = demo.zero_fraction(grads)
    if zeros > zero_limit:
        if scales and scales[-1] < 2:
            return (
                f"{zeros:.0%} of gradient entries are exactly zero: your backward ran unscaled "
                "(the gradient reaching the output was float32's), so they underflowed fp16: "
                "scale the loss"
            )
        if scales and scales[-1] >= 16 and _fp16_numbers_only(grads):
            return (
                f"{zeros:.0%} of gradient entries are exactly zero, though {used}, and every "
                "value you return is a float16 number: the division by the scale (or a cast "
                "after it) ran in float16, where the small ones underflow again; divide in float32"
            )
        if scales:
            return f"{zeros:.0%} of gradient entries are exactly zero: {used}, too small to lift them into fp16's range"
        return f"{zeros:.0%} of gradient entries are exactly zero: they underflowed fp16"
    if scales and scales[-1] < GOOD_SCALE:
        return f"gradients are finite but inaccurate: {used}, too small for the smallest ones to keep their bits in fp16"
    return (
        "gradients are finite but inaccurate: compare each with float32's, in the order and "
        "shape of model.parameters()"
    )
