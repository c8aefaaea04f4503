"""Exercise 3's check: the bytes of memory traffic the learner predicts for the naive and the
fused attention, on shapes the learner has not seen, against the judge's count (traffic.py).
A message names a mistake only where the learner's number is exactly what it gives."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

from ...checks import Part, check, correct
from ...probes import observe, specimen_rng
from .probes import traffic_predictions
from .thresholds import THRESHOLDS
from .traffic import Shape, fused_bytes, keys_loaded, naive_bytes

# the first of each is the measured specimen; the judge draws among the others
SHAPES = {
    "tiles that divide T": (
        Shape(1, 8, 1024, 64, "bfloat16", 64, 64),
        Shape(2, 16, 2048, 128, "float16", 128, 128),
    ),
    "T not a multiple of the tiles": (
        Shape(2, 4, 1000, 64, "float16", 128, 64),
        Shape(1, 12, 777, 64, "bfloat16", 64, 32),
    ),
    "query tiles smaller than key tiles, float32": (
        Shape(4, 6, 1536, 32, "float32", 32, 64),
        Shape(1, 8, 900, 64, "float32", 16, 64),
    ),
}


def _naive_mistakes(s: Shape) -> dict[str, int]:
    e, heads, right = s.element_bytes, s.B * s.H, naive_bytes(s)
    scores, tensor, mask = heads * s.T * s.T * e, heads * s.T * s.D * e, s.T * s.T
    return {
        "the scores counted in float32 whatever the inputs' dtype":
            right - 6 * scores + 6 * heads * s.T * s.T * 4,
        "the scores written by each kernel but never read back": right - 3 * scores,
        "the causal mask taken to halve the T x T scores": right - 3 * scores,
        "the mask counted once per batch and head": right + (heads - 1) * mask,
        "the mask left out": right - mask,
        "q * scale left out (a kernel of its own)": right - 2 * tensor,
        "the bool (T, T) mask counted in the inputs' dtype (a bool is one byte)":
            right - mask + mask * e,
        "the scores moved 4 times, not 6 (q @ k^T writes them; masked_fill and softmax each "
        "read and write them; probs @ v reads them)": right - 2 * scores,
        "4 bytes per element whatever the dtype": naive_bytes(replace(s, dtype="float32")),
    }  # fmt: skip


def _fused_mistakes(s: Shape) -> dict[str, int]:
    row, heads, right = s.D * s.element_bytes, s.B * s.H, fused_bytes(s)
    loaded = keys_loaded(s)
    tiles = math.ceil(s.T / s.block_m)
    whole = sum(math.ceil((i + 1) * s.block_m / s.block_n) * s.block_n for i in range(tiles))
    return {
        "k and v read once, as if every query tile shared them":
            right - 2 * heads * row * (loaded - s.T),
        "every key tile read by every query tile (the causal loop stops at the diagonal)":
            right + 2 * heads * row * (tiles * s.T - loaded),
        "masked rows past T counted as loaded": right + 2 * heads * row * (whole - loaded),
        "the scores written and read as in the naive version": right + 2 * heads * s.T**2 * s.element_bytes,
        "every tile counted full, q and output rows past T too (a masked lane moves nothing)":
            heads * row * (2 * tiles * s.block_m + 2 * whole),
        "query tile i reading key tiles 0..i, which holds only when block_m == block_n":
            heads * row * (2 * s.T + 2 * sum(min(s.T, (i + 1) * s.block_n) for i in range(tiles))),
        "the output's write left out (each program stores its rows once)": right - heads * row * s.T,
        "4 bytes per element whatever the dtype": fused_bytes(replace(s, dtype="float32")),
    }  # fmt: skip


def _as_prediction(value, shape: Shape) -> tuple[float, float]:
    if not isinstance(value, Mapping) or set(value) != {"naive", "fused"}:
        raise TypeError(
            f'predict_traffic returned {value!r} for {shape}: return {{"naive": bytes, '
            '"fused": bytes}'
        )
    pair = float(value["naive"]), float(value["fused"])
    if not all(math.isfinite(v) for v in pair):
        raise ValueError(f"predict_traffic gave a number that is not finite for {shape}")
    return pair


def _verdict(name: str, shape: Shape, got: float, truth: int, mistakes: dict, which: str) -> Part:
    atol = THRESHOLDS["traffic_atol"].value
    said = f"{shape}: counted {truth:,} B, you predicted {got:,.0f} B"
    if abs(got - truth) <= atol:
        return correct(f"{which}: {name}", True, said)
    matching = [m for m, v in mistakes.items() if v != truth and abs(got - v) <= atol]
    if len(matching) == 1:
        said += f". Your number is exactly what this mistake gives: {matching[0]}"
    elif matching:
        said += ". Your number is what each of these mistakes gives: " + "; or ".join(matching)
    else:
        said += f" ({got / truth:.3g}x). Reread the code of the {which} version, kernel by kernel"
    return correct(f"{which}: {name}", False, said)


@check(
    "17-predict-traffic",
    points=2,
    hint="For each kernel, which tensors does it read and which does it write, and how many "
    "times over the whole run? In the fused kernel, how many query tiles reach each key tile?",
)
def check_predict_traffic(predict_traffic) -> list[Part]:
    rng = specimen_rng()
    shapes = {name: rng.choice(options) for name, options in SHAPES.items()}
    asked = observe(traffic_predictions, predict_traffic, [s.to_dict() for s in shapes.values()])
    if not isinstance(asked, list) or len(asked) != len(shapes):
        raise TypeError("predictions came back in another shape than one per Shape")
    parts = []
    for (name, shape), value in zip(shapes.items(), asked, strict=True):
        naive, fused = _as_prediction(value, shape)
        parts.append(
            _verdict(name, shape, naive, naive_bytes(shape), _naive_mistakes(shape), "naive")
        )
        parts.append(
            _verdict(name, shape, fused, fused_bytes(shape), _fused_mistakes(shape), "fused")
        )
    return parts
