"""What the notebook shows: a loop recorded and read, two ranks' overlap, Dynamo's view of the
exercise's models, compile time whole against regional, and CUDA graphs where there is CUDA."""

from __future__ import annotations

import time

import torch

from ...device import get_device, synchronize
from ...measure import compare
from . import models
from .attribution import is_collective
from .intervals import intersect, merge, total
from .loops import make_step, spec
from .plans import measured
from .trace import events, main_thread

DEMO_LOOP = spec("host", 4, seed=5)  # the notebook's loop: its metrics phase works in Python


def overlap(trace: dict) -> tuple[float, float]:
    """(seconds of collectives on other threads, the share of them the main thread spent
    running operators): how much of the communication hid behind compute."""
    evs, main = events(trace), main_thread(trace)
    comm = merge((e.ts, e.end) for e in evs if e.tid != main and is_collective(e.name))
    ops = merge((e.ts, e.end) for e in evs if e.tid == main and e.cat == "cpu_op")
    busy = total(comm)
    return busy / 1e6, (total(intersect(comm, ops)) / busy if busy else 0.0)


def fixed_vs_slow(repeats: int = 10):
    """The notebook's loop against the same loop with its metrics as tensor operations
    (interleaved pairs, one thread): what fixing the stall buys."""
    slow, fixed = make_step(DEMO_LOOP), make_step(spec("none", seed=5))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return compare(slow, fixed, warmup=2, repeats=repeats, labels=("slow loop", "fixed loop"))
    finally:
        torch.set_num_threads(threads)


def compile_seconds(where: str, depth: int, backend: str) -> float:
    """Seconds of the first training step of a fresh `depth`-block model compiled `where`
    ("whole" or "blocks") with `backend`, minus a steady step: its compile time."""
    import torch._dynamo

    torch._dynamo.reset()
    data = models.batch()
    model = models.apply(models.build("stack", depth=depth), where, backend=backend)
    start = time.perf_counter()
    models.train_step(model, data)
    first = time.perf_counter() - start
    start = time.perf_counter()
    models.train_step(model, data)
    return first - (time.perf_counter() - start)


def regional_rounds(depth: int, rounds: int, backend: str = "aot_eager") -> dict:
    """Compile time of the whole model and of its blocks, alternating, `rounds` times each,
    after one untimed compile of a 1-block model has paid the backend's one-off costs."""
    compile_seconds("blocks", 1, backend)
    out: dict[str, list[float]] = {"whole": [], "blocks": []}
    for i in range(rounds):
        for where in ("whole", "blocks") if i % 2 == 0 else ("blocks", "whole"):
            out[where].append(compile_seconds(where, depth, backend))
    torch._dynamo.reset()
    return out


def costs_table() -> str:
    """The committed Inductor measurement as a Markdown table, with its provenance."""
    data = measured()
    p = data["provenance"]
    lines = [
        "| model | compiled | first steps' compile (s) | steady step (ms) | eager step (ms) "
        "| eager / compiled (pairs) | graphs | frames compiled |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in data["plans"]:
        lines.append(
            f"| {r['model']} | {r['where']}, mode={r['mode']} | {r['compile_s']:.1f} | "
            f"{r['step_s'] * 1e3:.1f} | {r['eager_step_s'] * 1e3:.1f} | "
            f"{r['ratio_eager_over_compiled']:.2f}x | {r['graphs']} | {r['frames_compiled']} |"
        )
    lines.append(
        f"\nMeasured by `{p['command']}` on {p['machine']}, torch {p['torch']}, {p['threads']} "
        f"thread, {p['date']}, 1-minute load {min(p['load_1min'])}-{max(p['load_1min'])} "
        "(other work beside it: compile times are slower than on an idle machine)."
    )
    return "\n".join(lines)


def reduce_overhead(device: torch.device | None = None, repeats: int = 20) -> dict:
    """On CUDA: a launch-bound training step (a small batch through the stack's blocks) compiled
    with mode="default" and mode="reduce-overhead" (CUDA graphs), steady steps in interleaved
    pairs. Elsewhere: why not."""
    device = device or get_device()
    if device.type != "cuda":
        return {"applies": False, "why": "CUDA graphs record and replay CUDA kernels: a "
                f"{device.type} device has none (Inductor skips them on CPU tensors)"}  # fmt: skip
    import torch._dynamo

    torch._dynamo.reset()
    x = torch.randn(8, models.WIDTH, device=device)
    steps = {}
    for mode in ("default", "reduce-overhead"):
        model = models.build("stack").to(device)
        compiled = torch.compile(model, mode=mode)

        def step(compiled=compiled) -> None:
            torch.compiler.cudagraph_mark_step_begin()
            compiled(x).square().mean().backward()

        for _ in range(3):  # compile, then record the graphs
            step()
        synchronize(device)
        steps[mode] = step
    result = compare(steps["default"], steps["reduce-overhead"], warmup=2, repeats=repeats,
                     device=device, labels=("mode=default", "mode=reduce-overhead"))  # fmt: skip
    return {"applies": True, "comparison": result}
