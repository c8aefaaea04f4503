"""Lesson 12's demos: the baseline step, attention memory against sequence length, padding
waste, real-token throughput, and fused AdamW with bf16 autocast, each measured here."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from ...device import autocast, get_device, synchronize
from ...measure import Comparison, compare, steady_cpu
from ...memory import tensor_peak_bytes
from ...progress import trange
from .attention import naive_attention, qkv, score_bytes
from .model import TinyGPT, build, config, loss
from .text import Batch, lm_batches, pad_batches, waste


def train(model: TinyGPT, batches: list[Batch], *, lr: float = 3e-3, **adamw) -> dict:
    """Train on each batch once with AdamW; the losses and the real tokens per second."""
    device = next(model.parameters()).device
    opt = torch.optim.AdamW(model.parameters(), lr=lr, **adamw)
    losses, real = [], 0
    synchronize(device)
    start = time.perf_counter()
    for batch in batches:
        batch = batch.to(device)
        step_loss = loss(model, batch)
        opt.zero_grad(set_to_none=True)
        step_loss.backward()
        opt.step()
        losses.append(step_loss.detach())
        real += batch.real_targets
    synchronize(device)
    seconds = time.perf_counter() - start
    return {"losses": torch.stack(losses).tolist(), "tokens_per_s": real / seconds, "s": seconds}


def parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def peak_bytes(attention, B: int, H: int, T: int, D: int) -> int:
    """Peak bytes of the tensors `attention` allocates on random (B, H, T, D) inputs, forward
    only: every operator's output counted until it is freed (cu.tensor_peak_bytes), so a
    score matrix that lives for a moment counts in full."""
    q, k, v = qkv(B, H, T, D)
    return tensor_peak_bytes(lambda: attention(q, k, v))


def attention_memory(lengths, attention, B: int = 1, H: int = 4, D: int = 16) -> dict:
    """{T: (hand-written peak bytes, `attention`'s peak bytes, one score matrix's bytes)}."""
    return {
        T: (
            peak_bytes(naive_attention, B, H, T, D),
            peak_bytes(attention, B, H, T, D),
            score_bytes(B, H, T),
        )
        for T in lengths
    }


def plot_memory(table: dict, title: str = ""):
    from ...plots import lines

    Ts = list(table)
    series = {
        "hand-written": (Ts, [table[t][0] / 2**20 for t in Ts]),
        "SDPA": (Ts, [table[t][1] / 2**20 for t in Ts]),
        "one T x T score matrix": (Ts, [table[t][2] / 2**20 for t in Ts]),
    }
    return lines(
        series, xlabel="sequence length T", ylabel="MiB", title=title, logx=True, logy=True
    )


def step_comparison(attention, *, rows: int, T: int, repeats: int) -> Comparison:
    """One training step (forward + backward) of the notebook's model, hand-written attention
    against `attention`, same weights and batch, interleaved pairs."""
    cfg = config()
    device = get_device()
    slow = build(cfg=cfg, attention=naive_attention, device=device)
    fast = build(cfg=cfg, attention=attention, device=device)
    batch = lm_batches(rows, T, 1)[0].to(device)

    def step(model) -> Callable[[], None]:
        def run() -> None:
            loss(model, batch).backward()
            model.zero_grad(set_to_none=True)

        return run

    with steady_cpu(1):
        return compare(
            step(slow), step(fast), repeats=repeats, warmup=1, labels=("by hand", "SDPA")
        )


def lengths_summary(docs: list[torch.Tensor]) -> str:
    n = sorted(len(d) for d in docs)
    q = statistics.quantiles(n, n=10)
    return (
        f"{len(n)} documents, {sum(n):,} bytes; length median {statistics.median(n):.0f}, "
        f"10th percentile {q[0]:.0f}, 90th {q[-1]:.0f}, longest {n[-1]}"
    )


def real_token_rate(batches: list[Batch], *, repeats: int = 3, seed: int = 0) -> float:
    """Real tokens (targets that carry loss) per second of forward + backward over `batches`,
    with the notebook's model, one thread: the figure to compare batchings by."""
    from .packing import epoch

    torch.manual_seed(seed)
    model = TinyGPT(config()).to(get_device())
    run = epoch(model, batches)
    real = waste(batches).real
    with steady_cpu(1):
        run()
        times = []
        for _ in range(repeats):
            synchronize(get_device())
            start = time.perf_counter()
            run()
            synchronize(get_device())
            times.append(time.perf_counter() - start)
    return real / statistics.median(times)


def packing_comparison(docs, make_batches, *, rows: int, row_len: int, repeats: int) -> Comparison:
    """Padding each batch to its longest document against `make_batches`, the same documents
    (so the same real tokens): forward + backward over all of them, interleaved pairs."""
    from .packing import epoch

    torch.manual_seed(0)
    model = TinyGPT(config()).to(get_device())
    pad = epoch(model, pad_batches(docs, rows, row_len))
    mine = epoch(model, make_batches(docs, rows, row_len))
    with steady_cpu(1):
        return compare(pad, mine, repeats=repeats, warmup=1, labels=("padded", "yours"))


VARIANTS = ("float32, AdamW default", "fused AdamW", "fused AdamW + autocast")


def precision_rounds(attention, *, rows: int, T: int, rounds: int) -> dict[str, list[float]]:
    """Seconds per whole training step (forward, backward, AdamW) of the notebook's model in
    three variants, same weights and batch: float32 with AdamW's default implementation,
    fused AdamW, and fused AdamW with the forward under autocast (bf16 where that is the fast
    16-bit type, course_utils.device.amp_dtype). Each round times every variant once, in a
    rotating order, after two warm-up steps each; one thread on a CPU."""
    cfg, device = config(), get_device()
    batch = lm_batches(rows, T, 1)[0].to(device)

    def stepper(fused: bool, amp: bool) -> Callable[[], None]:
        model = build(cfg=cfg, attention=attention, device=device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=fused or None)

        def run() -> None:
            with autocast(device, enabled=amp):
                logits = model(batch.tokens)
            F.cross_entropy(logits.flatten(0, 1).float(), batch.targets.flatten()).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        return run

    steps = dict(
        zip(
            VARIANTS,
            (stepper(False, False), stepper(True, False), stepper(True, True)),
            strict=True,
        )
    )
    times: dict[str, list[float]] = {k: [] for k in VARIANTS}
    with steady_cpu(1):
        for run in steps.values():
            run()
            run()
        for r in trange(rounds, desc="timing rounds", leave=False, delay=2.0):
            for name in VARIANTS[r % 3 :] + VARIANTS[: r % 3]:
                synchronize(device)
                start = time.perf_counter()
                steps[name]()
                synchronize(device)
                times[name].append(time.perf_counter() - start)
    return times


def per_variant(rounds: dict[str, list[float]]) -> dict[str, tuple[float, float]]:
    """{variant: (median seconds per step, median over rounds of float32 time / its time)}."""
    base = rounds[VARIANTS[0]]
    return {
        name: (statistics.median(t), statistics.median(b / x for b, x in zip(base, t, strict=True)))
        for name, t in rounds.items()
    }
