"""What notebook 06 shows: pickling by name, the scaling measurement, the multi-node command."""

from __future__ import annotations

import atexit
import json
import pickle
import pickletools
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from ...answers import is_withheld
from ...errors import ReferenceWithheld
from ...mode import pick
from .launch import describe_failure, torchrun
from .reference import reference_accumulate


def what_pickle_stores(fn) -> dict:
    """The bytes `pickle` makes of a function: a module name and a qualified name, no code."""
    blob = pickle.dumps(fn)
    names = [arg for op, arg, _ in pickletools.genops(blob) if isinstance(arg, str)]
    return {"bytes": len(blob), "names": names, "blob": blob}


def unpickle_in_fresh_process(blob: bytes) -> str:
    """What a spawned worker does with that pickle: import the module, look the name up.

    A fresh interpreter's `__main__` is not the notebook, so the lookup fails.
    """
    code = "import pickle, sys; pickle.loads(sys.stdin.buffer.read()); print('loaded')"
    run = subprocess.run([sys.executable, "-c", code], input=blob, capture_output=True, timeout=60)
    out = (run.stdout + run.stderr).decode().strip().splitlines()
    return out[-1] if out else f"exit code {run.returncode}"


@dataclass
class Scaling:
    """Seconds per optimizer step of each variant (raw samples), from bench.py."""

    samples: dict[str, list[float]]
    allreduces_per_step: dict[str, float]
    batch: int
    world: int
    device: str
    torch: str
    launch_s: float
    backend: str = "gloo"
    colleague_grad_ratio: float = float("nan")  # exercise 2: |its gradient| / |the mean|

    @property
    def on_cpu(self) -> bool:
        return self.backend != "nccl"

    @property
    def variants(self) -> list[str]:
        """The whole-step variants measured: one process, (on a CPU) one process with every
        core, and DDP. CPU threads mean nothing to a GPU's compute, so under NCCL the
        two-thread variant is not run."""
        names = ["1 process", "1 process, 2 threads", "DDP, 2 processes"]
        return [n for n in names if self.samples.get(n)]

    def where(self, cpus: int | None = None) -> str:
        """Processes, backend and devices: what every figure of this run was measured on."""
        if self.on_cpu:
            return f"{self.world} CPU processes, {self.backend}, one thread each" + (
                f", on {cpus} CPUs" if cpus else ""
            )
        gpus = f"cuda:0 to cuda:{self.world - 1}"
        return f"{self.world} processes, {self.backend.upper()}, one GPU each ({gpus})"

    def median(self, name: str) -> float:
        return statistics.median(self.samples[name])

    @property
    def speedup(self) -> float:
        """One process (one thread, or one GPU) over DDP on `world` processes, same global
        batch."""
        return self.median("1 process") / self.median("DDP, 2 processes")

    @property
    def efficiency(self) -> float:
        """Speedup per process: 1.0 is perfect scaling."""
        return self.speedup / self.world

    def to_dict(self) -> dict:
        return asdict(self)


def measure_scaling(timeout_s: float = 180) -> Scaling:
    """Launch bench.py on 2 processes (about 5 s on an idle 2-core CPU, more when loaded)."""
    if is_withheld(reference_accumulate):  # bench.py times it beside plain DDP
        raise ReferenceWithheld(
            "reference_accumulate",
            "this benchmark times the lesson's answer to exercise 2 (accumulation with no_sync) "
            "beside plain DDP, and the learner edition leaves that answer out",
        )
    # each process imports torch before the first step: say so, or the cell looks hung
    print("launching the benchmark: 2 processes under torchrun, each importing torch ...")
    with tempfile.TemporaryDirectory(prefix="course06-") as out:
        report = Path(out) / "bench.json"
        args = ["--out", report, "--rounds", pick(quick=5, full=15)]
        launch = torchrun(
            "course_utils.lessons.distributed.bench",
            args,
            module=True,
            learner=False,
            timeout_s=timeout_s,
        )
        if not report.exists():
            raise RuntimeError(describe_failure(launch, "the scaling benchmark"))
        r = json.loads(report.read_text())
    return Scaling(
        r["samples"], r["allreduces_per_step"], r["batch"], r["world"], r["device"],
        r["torch"], launch.seconds, r.get("backend", "gloo"), r["colleague_grad_ratio"],
    )  # fmt: skip


def plot_scaling(s: Scaling):
    """Throughput of one step's global batch, and the all-reduces per step with no_sync."""
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.4))
    names = s.variants
    rates = [s.batch / s.median(n) for n in names]
    bars = left.bar(names, rates, color=[f"C{i}" for i in range(len(names))])
    left.bar_label(bars, labels=[f"{r:,.0f}" for r in rates], padding=2)
    left.set(ylabel="samples / s", title=f"global batch {s.batch}: {s.where()}")
    left.margins(y=0.15)
    acc = ["accumulate x4", "accumulate x4 + no_sync"]
    ms = [1e3 * s.median(n) for n in acc]
    bars = right.bar(acc, ms, color=["C3", "C4"])
    labels = [
        f"{m:.1f} ms, {s.allreduces_per_step[n]:g} all-reduces"
        for n, m in zip(acc, ms, strict=True)
    ]
    right.bar_label(bars, labels=labels, padding=2)
    right.set(ylabel="ms per optimizer step", title="4 micro-batches per step")
    right.margins(y=0.2)
    fig.tight_layout()
    return fig


def multinode_command(script: str = "ddp_train.py", nnodes: int = 2, nproc: int = 2) -> str:
    """The torchrun line to type on EVERY machine (same line on all; host0 is any one)."""
    return (
        f"torchrun --nnodes {nnodes} --nproc-per-node {nproc} \\\n"
        "    --rdzv-backend c10d --rdzv-endpoint host0.example.org:29400 --rdzv-id job42 \\\n"
        f"    {script} --epochs 2"
    )


def workdir() -> Path:
    """A fresh folder for this notebook's scripts, so two notebooks (or a grader's parallel
    jobs) never overwrite each other's; removed when the kernel exits."""
    path = Path(tempfile.mkdtemp(prefix="course06-"))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def scaling_table(s: Scaling) -> str:
    """The measured step times as a Markdown table (figures come from the run, not prose)."""
    rows = [f"| {n} | {1e3 * s.median(n):.1f} | {s.batch / s.median(n):,.0f} |" for n in s.variants]
    rows.append(
        f"| all-reduce of one step's gradients, alone | {1e3 * s.median('all-reduce alone'):.1f} | |"
    )
    head = "| variant | ms per step (median) | samples/s |\n|---|---|---|\n"
    return f"Measured on {s.where()}, global batch {s.batch}:\n\n" + head + "\n".join(rows)


def scaling_verdict(s: Scaling, cpus: int | None) -> str:
    """Speedup and efficiency, beside what they would be if nothing overlapped.

    No-overlap estimate: the one-process compute t1 split perfectly over the ranks, then the
    all-reduce alone: t1 / (world * (t1 / world + t_ar)). Above it, DDP's bucketed
    all-reduce overlapped backward; below it, the processes also fought over cores, caches
    and memory bandwidth.
    """
    compute, comm = s.median("1 process"), s.median("all-reduce alone")
    serial = compute / (s.world * (compute / s.world + comm))
    where = "above" if s.efficiency > serial else "below"
    return (
        f"Here ({s.where(cpus)}) DDP ran a step "
        f"**{s.speedup:.2f}x** as fast as one process: scaling efficiency "
        f"**{s.efficiency:.0%}**. Perfectly halved compute followed by the all-reduce alone "
        f"({1e3 * comm:.1f} ms, against {1e3 * compute:.1f} ms of compute for the whole batch) "
        f"would give **{serial:.0%}**; the run came out {where} that estimate."
    )
