"""Lesson 10's demos: the slow loop, the fixed loop and every habit alone, timed; copies and
conversions; a model whose eval mode matters. The counting instrument is in spy.py."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from ...device import get_device, synchronize
from ...measure import steady_cpu, time_fn
from ...progress import tqdm
from . import loop
from .loop import HABITS, quiet

# --- timing: the slow loop, the fixed loop, and every habit alone --------------------------


def time_runs(
    fns: dict[str, Callable], steps: int, rounds: int, eval_every: int = 10, progress: bool = False
) -> dict:
    """Seconds per run of each `fn(model, data, steps, device, eval_every)`, interleaved: each
    round runs every function once, in a rotating order, on a fresh model (built untimed)."""
    device, data, names = get_device(), loop.make_data(), list(fns)
    samples: dict[str, list[float]] = {n: [] for n in names}
    with steady_cpu():
        for r in tqdm(range(rounds), desc="timing rounds", disable=not progress, leave=False):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                model = loop.make_model().to(device)
                synchronize(device)
                t0 = time.perf_counter()
                quiet(fns[name], model, data, steps, device, eval_every)
                synchronize(device)
                samples[name].append(time.perf_counter() - t0)
    return samples


def ratio(samples: dict, slower: str, faster: str) -> float:
    """Median over rounds of slower/faster: a pair ratio, robust to load that drifts."""
    return statistics.median(a / b for a, b in zip(samples[slower], samples[faster], strict=True))


def _keep(habits: tuple[str, ...]) -> Callable:
    def run(model, data, steps, device, eval_every):
        return loop.variant_train(model, data, steps, device, habits, eval_every)

    run.__name__ = f"keep_{'_'.join(habits) or 'none'}"
    return run


def ablation(steps: int, rounds: int) -> dict[str, float]:
    """Added ms per step when only one habit is left in the fixed loop, for every habit; plus
    the slow and the fixed loops themselves (keys 'slow' and 'fixed')."""
    fns = {"slow": loop.slow_train, "fixed": _keep(())}
    fns |= {h: _keep((h,)) for h in HABITS}
    samples = time_runs(fns, steps, rounds, progress=True)
    med = {k: statistics.median(v) / steps * 1e3 for k, v in samples.items()}
    return {"slow": med["slow"], "fixed": med["fixed"]} | {h: med[h] - med["fixed"] for h in HABITS}


def plot_ablation(costs: dict[str, float], title: str = ""):
    """One bar per habit: what it adds to a step when it is the only one left, and that as a
    share of the whole gain (slow - fixed). Habits interact (anomaly mode also slows the
    validation forwards), so the shares need not add up to 100%."""
    import matplotlib.pyplot as plt

    habits = sorted(HABITS, key=lambda h: -costs[h])
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.4), width_ratios=(1, 2.6))
    left.bar(["slow", "fixed"], [costs["slow"], costs["fixed"]], color=["C3", "C2"])
    left.set(ylabel="ms per step", title="the whole loop")
    right.barh(habits[::-1], [costs[h] for h in habits[::-1]], color="C0")
    gain = costs["slow"] - costs["fixed"]
    for i, h in enumerate(habits[::-1]):  # labels right of zero, so none covers a tick label
        label = f" {costs[h]:+.2f} ms ({costs[h] / gain:.0%} of the gain)"
        right.text(max(costs[h], 0), i, label, va="center", fontsize=8)
    right.axvline(0, color="grey", linewidth=0.8)
    right.set(xlabel="ms added per step, this habit alone", title=title or "each habit's cost")
    right.set_xlim(min(0, *(costs[h] for h in habits)) * 1.1, max(costs[h] for h in habits) * 1.6)
    fig.tight_layout()
    return fig


# --- exercises 2 and 3: copies, and a model whose eval mode matters -------------------------


def shares_memory(t: torch.Tensor, array: np.ndarray) -> bool:
    """Whether a write to `array` shows in `t` (one element changed, then put back)."""
    if not isinstance(t, torch.Tensor) or t.device.type != "cpu" or t.dim() != array.ndim:
        return False
    first = (0,) * array.ndim
    old = array[first].item()
    array[first] = old + 7
    try:
        return t[first].item() == array[first].item()  # the array's own rounding of old + 7
    finally:
        array[first] = old


def conversion_timings(n_mib: int = 64) -> dict[str, float]:
    """Milliseconds to turn a float32 array of `n_mib` MiB into a tensor, three ways."""
    array = np.ones(n_mib * 2**18, dtype=np.float32)
    ways = {
        "torch.tensor": lambda: torch.tensor(array),
        "torch.as_tensor": lambda: torch.as_tensor(array),
        "torch.from_numpy": lambda: torch.from_numpy(array),
    }
    return {k: time_fn(f, warmup=1, repeats=5, device="cpu").median * 1e3 for k, f in ways.items()}


def eval_specimen(seed: int = 0) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """A small trained classifier with BatchNorm and Dropout (so train and eval mode differ),
    and its validation data; returned in train mode, as a training loop leaves it. Trained on
    one CPU thread: with another thread count the 16 AdamW steps end elsewhere (up to 0.03 per
    weight, torch 2.14), and the check's side and the learner's must build the same model."""
    data = loop.make_data(n=1024)
    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Linear(128, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Dropout(0.5), nn.Linear(64, 10)
    )
    optimizer = torch.optim.AdamW(model.parameters(), 1e-2)
    x, y = torch.from_numpy(data.x), torch.from_numpy(data.y)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for i in range(0, 1024, 64):
            loss = nn.functional.cross_entropy(model(x[i : i + 64]), y[i : i + 64])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    finally:
        torch.set_num_threads(threads)
    return model.train(), torch.from_numpy(data.x_val), torch.from_numpy(data.y_val)


def zero_grad_effect() -> dict[str, float]:
    """How far one AdamW step moves a parameter whose gradient is zero vs None (set_to_none):
    a zero gradient still gets weight decay and momentum; None is skipped entirely."""
    moved = {}
    for label, none in (("grad zeroed (set_to_none=False)", False), ("grad None (default)", True)):
        p = nn.Parameter(torch.ones(4))
        optimizer = torch.optim.AdamW([p], lr=0.1, weight_decay=0.1)
        p.grad = torch.ones(4)
        optimizer.step()  # a first step builds momentum
        optimizer.zero_grad(set_to_none=none)
        before = p.detach().clone()
        optimizer.step()
        moved[label] = (p.detach() - before).abs().max().item()
    return moved


def optimizer_timings(rounds: int = 5) -> dict[str, float]:
    """ms per AdamW step on the many-small-tensors model: for-loop, foreach, fused (where
    this torch and device have it)."""
    device, out = get_device(), {}
    ways = {"for-loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}
    for label, kw in ways.items():
        model = loop.make_model().to(device)
        for p in model.parameters():
            p.grad = torch.randn_like(p)
        try:
            optimizer = torch.optim.AdamW(model.parameters(), 1e-3, **kw)
            optimizer.step()
        except (RuntimeError, ValueError) as exc:  # fused is missing for this device or dtype
            print(f"{label}: not available here ({str(exc).splitlines()[0][:90]})")
            continue
        with steady_cpu():
            out[label] = time_fn(optimizer.step, warmup=2, repeats=rounds).median * 1e3
    return out
