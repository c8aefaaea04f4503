"""What notebook 13 shows: one launch on 2 processes measures every plan on the notebook's
model, what each rank holds, mixed precision and a sharded checkpoint; tables and a plot."""

from __future__ import annotations

import atexit
import shutil
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ...mode import pick
from .launch import backend_for, describe, torchrun
from .model import STRATEGIES
from .options import PLANS
from .plans import Scenario
from .scenarios import MODELS

KIND_NAMES = ("parameters", "gradients", "optimizer")


def workdir() -> Path:
    """A fresh folder for this kernel's files, removed when the kernel exits."""
    folder = Path(tempfile.mkdtemp(prefix="course13-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def demo_setup():
    """The notebook's model (a fresh copy each call), its optimizer's name, one rank's batch."""
    spec, optimizer, batch = MODELS["demo"]
    return spec.build(), optimizer, spec.batch(batch, seed=100)


def example_scenario(device_bytes: int) -> Scenario:
    """Exercise 2's shape of question, on the notebook's model."""
    spec, optimizer, batch = MODELS["demo"]
    return Scenario(
        spec.build(),
        optimizer,
        spec.batch(batch, seed=100),
        2,
        int(device_bytes),
        "the notebook's model",
    )


@dataclass
class Demo:
    """Everything the notebook's launch measured (largest over the ranks unless per rank)."""

    plans: dict  # plan -> peak, parameters, gradients, optimizer, gathers, gathered_bytes, seconds
    ranks: dict  # strategy -> [holdings of rank 0, rank 1]
    mixed_precision: dict
    checkpoint: dict
    where: str
    launch_s: float

    def median_s(self, plan: str) -> float:
        return statistics.median(self.plans[plan]["seconds"])

    def held(self, strategy: str, rank: int) -> int:
        return sum(self.ranks[strategy][rank][k] for k in KIND_NAMES)


def run_demo(timeout_s: float = 600) -> Demo:
    """Launch the notebook's measurements on 2 processes (gloo on a CPU, NCCL on 2+ GPUs)."""
    rounds, steps = pick(quick=3, full=7), pick(quick=1, full=3)
    print(f"launching the measurements on {describe(2)}: {rounds} timing rounds ...", flush=True)
    launch = torchrun("demo", ["--rounds", rounds, "--steps", steps], timeout_s=timeout_s)
    if launch.result is None:
        raise RuntimeError(launch.failure("the notebook's launch"))
    r = launch.result["result"]
    return Demo(
        r["plans"], r["ranks"], r["mixed_precision"], r["checkpoint"], describe(2), launch.seconds
    )


def _mib(b: float) -> str:
    return f"{b / 2**20:.2f}"


def holdings_table(demo: Demo, predicted: dict | None = None) -> str:
    """Markdown: what each rank held after a step, per strategy, beside a prediction."""
    head = "| strategy | rank | parameters MiB | gradients MiB | optimizer MiB | total MiB |"
    rows = [head, "|---|---|---|---|---|---|"]
    for strategy in STRATEGIES:
        for rank, h in enumerate(demo.ranks[strategy]):
            cells = [_mib(h[k]) for k in KIND_NAMES] + [_mib(demo.held(strategy, rank))]
            rows.append(f"| {strategy} | {rank} | " + " | ".join(cells) + " |")
        if predicted:
            p = predicted[strategy]
            cells = [_mib(p[k]) for k in KIND_NAMES] + [_mib(sum(p[k] for k in KIND_NAMES))]
            rows.append(f"| {strategy} | *predicted, fullest* | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def plans_table(demo: Demo) -> str:
    """Markdown: each plan's peak and holdings on its fullest rank, all-gathers and time."""
    ddp = demo.median_s("DDP")
    rows = [
        "| plan | peak MiB | held MiB | all-gathers per step | ms per step | x DDP's time |",
        "|---|---|---|---|---|---|",
    ]
    for plan, m in demo.plans.items():
        if "peak" not in m:  # no allocator counter on this platform (peak.cpu_counter_reason)
            m = {**m, "peak": float("nan"), **dict.fromkeys(KIND_NAMES, float("nan"))}
        held = sum(m[k] for k in KIND_NAMES)
        t = demo.median_s(plan)
        rows.append(
            f"| {plan} | {_mib(m['peak'])} | {_mib(held)} | {m['gathers']} | {t * 1e3:.1f} | "
            f"{t / ddp:.2f} |"
        )
    return "\n".join(rows)


def plot_plans(demo: Demo, title: str = ""):
    """Peak memory on the fullest rank beside time per step, for each plan."""
    import matplotlib.pyplot as plt

    names = list(PLANS)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.2))
    left.barh(names, [demo.plans[n].get("peak", 0) / 2**20 for n in names], color="#4c72b0")
    left.set_xlabel("peak MiB on the fullest rank")
    right.barh(names, [demo.median_s(n) * 1e3 for n in names], color="#dd8452")
    right.set_xlabel("ms per training step (median)")
    right.set_yticklabels([])
    for ax in (left, right):
        ax.invert_yaxis()
    fig.suptitle(title or demo.where)
    fig.tight_layout()
    plt.show()


def mixed_precision_table(demo: Demo) -> str:
    """Markdown: per policy, the dtypes a block computes in and the shards keep, the bytes
    all-gathered in one step and the time per step."""
    rows = [
        "| policy | block computes in | shards and gradients kept in | all-gathered per step MiB "
        "| ms per step |",
        "|---|---|---|---|---|",
    ]
    for name, m in demo.mixed_precision.items():
        rows.append(
            f"| {name} | {m['compute']} | {m['sharded']} / {m['gradient']} | "
            f"{_mib(m['gathered_bytes'])} | {m['median_s'] * 1e3:.1f} |"
        )
    return "\n".join(rows)


def checkpoint_summary(demo: Demo) -> str:
    c = demo.checkpoint
    files = ", ".join(f"`{n}` {b / 2**20:.2f} MiB" for n, b in c["files"].items())
    shards = " and ".join(f"{b / 2**20:.2f} MiB" for b in c["shard_bytes"])
    return (
        f"files written: {files}. Parameter shards held by the ranks: {shards}. Largest "
        f"difference from the trained model: {c['diff_before']:.3g} before loading, "
        f"{c['diff_after']:.3g} after."
    )


def on_gpus() -> bool:
    return backend_for(2) == "nccl"
