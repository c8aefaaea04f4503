"""What lesson 15's notebook shows: where a step's memory goes, the three checkpointing plans,
offload on this device, the float8 formats and scalings on the GPT's tensors, torchao's path."""

from __future__ import annotations

import importlib.util

import torch

from .float8 import flushed, gpt_tensors, row_errors
from .levers import baseline, held_bytes, measure, policy_contexts, step_levers, wrapper
from .model import DEFAULT, Size, batch, build, loss_of
from .policies import logged_ops, recording


def _mib(n: float) -> str:
    return f"{n / 2**20:.2f} MiB"


def step_memory(size: Size, seed: int = 0) -> dict[str, int]:
    """Bytes of one AdamW step's parts: parameters, gradients, optimizer states (measured after
    one step) and what the forward holds for backward (levers.held_bytes)."""
    model = build(size, seed)
    tokens, targets = batch(size, seed)
    loss, activations = held_bytes(lambda: loss_of(model, tokens, targets))
    loss.backward()
    optimizer = torch.optim.AdamW(model.parameters())
    optimizer.step()
    nbytes = lambda ts: sum(t.numel() * t.element_size() for t in ts)  # noqa: E731
    states = [t for s in optimizer.state.values() for t in s.values() if torch.is_tensor(t)]
    return {
        "parameters": nbytes(model.parameters()),
        "gradients": nbytes(p.grad for p in model.parameters()),
        "optimizer states (AdamW)": nbytes(states),
        "activations held for backward": activations,
    }


def memory_table(parts: dict[str, int]) -> str:
    total = sum(parts.values())
    lines = ["| part | bytes | share |", "|---|---|---|"]
    lines += [f"| {k} | {_mib(v)} | {v / total:.0%} |" for k, v in parts.items()]
    return "\n".join(lines)


def operators_seen(size: Size, seed: int = 0) -> list[str]:
    """The operators a selective-checkpointing policy is asked about in one block's forward."""
    regions: list = []
    ask = lambda ctx, op, *args, **kwargs: False  # noqa: E731  recompute all, only listen
    step_levers(size, wrapper("selective", recording(ask, regions)), seed)
    return logged_ops(regions[:1])


def plans_table(size: Size, policy, seed: int = 0) -> tuple[str, dict]:
    """Held bytes and recomputed FLOPs of no, selective (`policy`) and full checkpointing."""
    base = baseline(size, seed)
    rows = {
        "none": base["none"],
        "selective (your policy)": measure(size, "selective", policy_contexts(policy), seed),
        "full": base["full"],
    }
    lines = ["| checkpointing | held after forward | recomputed in backward |", "|---|---|---|"]
    for name, got in rows.items():
        lines.append(f"| {name} | {_mib(got['held'])} | {got['recomputed'] / 1e6:.1f} MFLOP |")
    return "\n".join(lines), rows


def offload_on_this_device(size: Size, seed: int = 0) -> dict:
    """Held bytes with and without save_on_cpu, and where the saved tensors live."""
    plain = step_levers(size, None, seed)
    off = step_levers(size, None, seed, offload=True)
    return {"held": plain["held"], "held with save_on_cpu": off["held"], "device": "cpu"}


def _tensorwise(x: torch.Tensor, fp8: torch.dtype) -> torch.Tensor:
    """The round trip through one scale for the whole tensor: its largest magnitude to the max."""
    scale = x.abs().max() / torch.finfo(fp8).max
    return (x / scale).to(fp8).float() * scale


def scaling_table(to_float8, outlier: float = 1e4, size: Size = DEFAULT, seed: int = 0) -> str:
    """Tensorwise e4m3 and e5m2, and rowwise e4m3 (`to_float8`), on the GPT's activation and gradient,
    3 rows scaled by `outlier` (an outlier token): mean and worst row error, entries flushed."""
    lines = [
        "| tensor | scaling | mean row error | worst row | flushed to 0 |",
        "|---|---|---|---|---|",
    ]
    for name, x in gpt_tensors(size, seed).items():
        x = x.clone()
        x[:3] *= outlier
        q, scale = to_float8(x)
        trips = {
            "tensorwise e4m3": _tensorwise(x, torch.float8_e4m3fn),
            "rowwise e4m3 (yours)": q.float() * scale,
            "tensorwise e5m2": _tensorwise(x, torch.float8_e5m2),
        }
        for how, approx in trips.items():
            errors = row_errors(x, approx)
            lines.append(
                f"| {name} | {how} | {sum(errors) / len(errors):.2%} | {max(errors):.2%} | "
                f"{flushed(x, approx):.2%} |"
            )
    return "\n".join(lines)


def torchao_status() -> str:
    """Whether torchao's float8 training can run here, and what is missing if not."""
    if importlib.util.find_spec("torchao") is None:
        return (
            "torchao is not installed here (pip install torchao): its float8 path is shown, not run"
        )
    if not torch.cuda.is_available():
        return "torchao is installed, but float8 matmuls need a CUDA GPU of compute capability 8.9+"
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) < (8, 9):
        return f"this GPU is sm_{major}{minor}: float8 matmuls need sm_89 (Ada) or sm_90 (H100)+"
    return f"torchao and an sm_{major}{minor} GPU: convert_to_float8_training can run here"
