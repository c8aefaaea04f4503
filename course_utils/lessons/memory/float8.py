"""Float8 on any device: the two formats, their round trip, and the tensors the lesson scales.

torch has both OCP formats as dtypes (https://docs.pytorch.org/docs/stable/tensor_attributes.html):
float8_e4m3fn (4 exponent bits, 3 mantissa bits, max 448, no inf) and float8_e5m2 (5 and 2,
max 57344). A cast rounds to the nearest float8 value; in torch 2.14 a value beyond the max
becomes NaN in e4m3fn, so a scale must bring the largest magnitude under the format's max.
"""

from __future__ import annotations

import torch

from .model import DEFAULT, Size, batch, build, loss_of

FORMATS = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


def format_table() -> str:
    """Markdown: each format's max, eps (spacing above 1), smallest normal, and the measured
    relative round-trip error of N(0, 1) samples (no scale: they fit both formats)."""
    x = torch.randn(100_000, generator=torch.Generator().manual_seed(0))
    lines = [
        "| format | bits (exp, mantissa) | max | eps | smallest normal | round-trip error, N(0, 1) |",
        "|---|---|---|---|---|---|",
    ]
    for name, dtype in FORMATS.items():
        info = torch.finfo(dtype)
        error = row_errors(x[None], x.to(dtype).float()[None])[0]
        bits = name[1], name[3]
        lines.append(
            f"| {name} | {bits[0]}, {bits[1]} | {info.max:g} | {info.eps:g} | {info.tiny:.3g} | "
            f"{error:.2%} |"
        )
    return "\n".join(lines)


def flushed(x: torch.Tensor, approx: torch.Tensor) -> float:
    """The fraction of x's nonzero entries whose round trip gives 0: lost, not rounded."""
    nonzero = x != 0
    return ((approx == 0) & nonzero).sum().item() / max(nonzero.sum().item(), 1)


def row_errors(x: torch.Tensor, approx: torch.Tensor) -> list[float]:
    """Per row: ||approx - x|| / ||x|| (a zero row: max |approx|, which must be 0); inf where
    `approx` is not finite."""
    x, approx = x.double(), approx.double()
    errors = []
    for row, got in zip(x, approx, strict=True):
        if not torch.isfinite(got).all():
            errors.append(float("inf"))
        elif row.abs().max() == 0:
            errors.append(got.abs().max().item())
        else:
            errors.append(((got - row).norm() / row.norm()).item())
    return errors


def gpt_tensors(size: Size = DEFAULT, seed: int = 0) -> dict[str, torch.Tensor]:
    """The GPT's real tensors of the first block's MLP on text, one row per token: the input of
    its second matmul (the GELU's output, an activation) and that input's gradient."""
    model = build(size, seed)
    tokens, targets = batch(size, seed)
    seen = {}

    def keep(module, args):
        seen["activation"] = args[0]
        args[0].register_hook(lambda g: seen.__setitem__("gradient", g))

    handle = model.blocks[0].down.register_forward_pre_hook(keep)
    loss_of(model, tokens, targets).backward()
    handle.remove()
    return {name: t.detach().flatten(0, 1).clone() for name, t in seen.items()}


def specimen(case: dict, seed: int) -> torch.Tensor:
    """A (rows, cols) float32 tensor from plain fields: rows of N(0, 1) times a scale spread
    over `spread` decades; `outliers` rows times `outlier`; `channel`: one column times it;
    `negative`: every entry <= 0;
    `zero_row`: the last row all zeros; `gpt`: the GPT's MLP activation instead."""
    g = torch.Generator().manual_seed(seed)
    if "gpt" in case:
        x = gpt_tensors(Size(**case["gpt"]), seed)["activation"][: case["rows"]]
    else:
        x = torch.randn(case["rows"], case["cols"], generator=g)
        x = x * 10 ** (-case["spread"] * torch.rand(case["rows"], 1, generator=g))
    for row in torch.randperm(len(x), generator=g)[: case.get("outliers", 0)].tolist():
        x[row] *= case["outlier"]
    if case.get("channel"):  # one feature far above the rest in every row, as in LLMs
        x[:, torch.randint(0, x.shape[1], (1,), generator=g)] *= case["channel"]
    if case.get("negative"):
        x = -x.abs()
    if case.get("zero_row"):
        x[-1] = 0.0
    return x.float().contiguous()
