"""What notebook 16 shows: one launch measures tensor parallelism (a block split by hand, by
`parallelize_module`, with sequence parallelism) and the pipeline schedules on 2 processes; in
full mode a second launch runs the schedules on 4. Tables and plots of what they measured."""

from __future__ import annotations

import atexit
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ...launch_result import backend_for, describe, start
from ...mode import is_quick, pick
from .pipeline import predicted_bubble
from .thresholds import THRESHOLDS

WORKER = "course_utils.lessons.parallel.worker"


def workdir() -> Path:
    """A fresh folder for this kernel's files, removed when the kernel exits."""
    folder = Path(tempfile.mkdtemp(prefix="course16-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


@dataclass
class Demo:
    """What the notebook's launches measured: `tensor` (one dict per rank), `pipeline` (one
    dict per schedule and number of micro-batches: every rank's timeline), `more_stages` (the
    same on 4 processes, full mode only), where it ran and how long the launches took."""

    tensor: list[dict]
    pipeline: list[dict]
    where: str
    launch_s: float
    more_stages: list[dict] = field(default_factory=list)

    def run(self, schedule: str, micro_batches: int, stages: int = 2) -> dict:
        runs = self.pipeline if stages == 2 else self.more_stages
        return next(
            r for r in runs if (r["schedule"], r["micro_batches"]) == (schedule, micro_batches)
        )


def _launch(task: str, nproc: int, micro: str, steps: int):
    running = start(
        WORKER,
        task,
        ["--micro-batches", micro, "--steps", steps],
        nproc=nproc,
        timeout_s=THRESHOLDS["demo_launch_timeout_s"].value,
    )
    done = threading.Event()
    threading.Thread(target=_heartbeat, args=(done, time.perf_counter()), daemon=True).start()
    try:
        launch = running.finish()
    finally:
        done.set()
    if launch.result is None:
        raise RuntimeError(launch.failure(f"the notebook's launch on {nproc} processes"))
    return launch


def _heartbeat(done: threading.Event, began: float, every_s: float = 5.0) -> None:
    """A line every few seconds while the ranks work: a cell silent that long looks hung."""
    while not done.wait(every_s):
        print(f"  ... still measuring ({time.perf_counter() - began:.0f} s)", flush=True)


def run_demo() -> Demo:
    """Launch the notebook's measurements (gloo on a CPU, NCCL on enough GPUs)."""
    steps = pick(quick=1, full=3)
    print(f"launching the measurements on {describe(2)} ...", flush=True)
    first = _launch("demo", 2, "4,8", steps)
    result = first.result["result"]
    demo = Demo(result["tensor"], result["pipeline"], describe(2), first.seconds)
    if not is_quick():
        print(f"and the schedules on {describe(4)} (full mode) ...", flush=True)
        more = _launch("pipeline", 4, "4,8", steps)
        demo.more_stages, demo.launch_s = (
            more.result["result"]["pipeline"],
            demo.launch_s + more.seconds,
        )
    return demo


def _collectives(counts: dict) -> str:
    said = [f"{c} {k.replace('_', '-')} ({b:,} B)" for k, (c, b) in sorted(counts.items())]
    return ", ".join(said) or "none"


def tensor_table(demo: Demo) -> str:
    """Markdown: each way of splitting the block, against the block whole on one process."""
    rank0 = demo.tensor[0]
    rows = [
        "| split | max \\|split - whole\\| | forward sends | backward sends | parameters per rank "
        "| saved for backward per rank |",
        "|---|---|---|---|---|---|",
    ]
    for name in ("by hand", "parallelize_module", "sequence parallel"):
        m = rank0[name]
        worst = max(r[name]["max_diff"] for r in demo.tensor)
        rows.append(
            f"| {name} | {worst:.1e} | {_collectives(m['comms']['forward'])} | "
            f"{_collectives(m['comms']['backward'])} | {m['held_bytes']:,} B of "
            f"{rank0['whole_bytes']:,} | {m['saved_bytes']:,} B |"
        )
    return "\n".join(rows)


def bubble_table(demo: Demo) -> str:
    """Markdown: per schedule and micro-batches, the idle share predicted and measured, the
    micro-batches each rank held at once, and the peak of its saved bytes."""
    rows = [
        "| stages | schedule | micro-batches | bubble predicted | idle measured (per rank) | "
        "micro-batches held at once | peak saved for backward |",
        "|---|---|---|---|---|---|---|",
    ]
    for runs in (demo.pipeline, demo.more_stages):
        for r in runs:
            ranks = r["ranks"]
            rows.append(
                f"| {r['stages']} | {r['schedule']} | {r['micro_batches']} | "
                f"{predicted_bubble(r['stages'], r['micro_batches']):.2f} | "
                + ", ".join(f"{x['idle']:.2f}" for x in ranks)
                + " | "
                + ", ".join(str(x["in_flight"]) for x in ranks)
                + " | "
                + ", ".join(f"{x['peak_saved'] / 1024:.0f} KiB" for x in ranks)
                + " |"
            )
    return "\n".join(rows)


def plot_timelines(demo: Demo, micro_batches: int = 4, stages: int = 2):
    """Each rank's forwards and backwards over time, GPipe above 1F1B."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 1, figsize=(10, 1.2 + 0.55 * stages * 2), sharex=True)
    for ax, schedule in zip(axes, ("GPipe", "1F1B"), strict=True):
        run = demo.run(schedule, micro_batches, stages)
        for rank, mine in enumerate(run["ranks"]):
            for kind, mb, began, ended in mine["events"]:
                colour = "#4c72b0" if kind == "F" else "#dd8452"
                ax.barh(rank, (ended - began) * 1e3, left=began * 1e3, color=colour,
                        edgecolor="white")  # fmt: skip
                ax.text((began + ended) / 2 * 1e3, rank, f"{kind}{mb}", ha="center",
                        va="center", fontsize=7, color="white")  # fmt: skip
        ax.set_yticks(range(stages), [f"rank {r}" for r in range(stages)])
        ax.invert_yaxis()
        bubble = predicted_bubble(stages, micro_batches)
        ax.set_title(f"{schedule}, {micro_batches} micro-batches: bubble (p-1)/(m+p-1) = {bubble:.2f}",
                     fontsize=9)  # fmt: skip
    axes[-1].set_xlabel("ms since the step started (F: forward, B: backward of micro-batch n)")
    fig.tight_layout()
    plt.show()


def on_gpus() -> bool:
    return backend_for(2) == "nccl"
