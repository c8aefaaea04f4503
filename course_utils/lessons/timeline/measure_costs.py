"""Measure what each compile plan of exercise 2's models costs on this machine, with
TorchInductor: `python -m course_utils.lessons.timeline.measure_costs [--out FILE]`.

Each (model, plan) runs in a fresh process with an empty Inductor cache folder and the FX graph
cache off, after one unrelated compile has paid Inductor's one-off costs (imports, the C++
headers): what is timed is this model's own compile, as a job's first steps pay it. It times
the first FIRST_STEPS training steps one by one (compiles and recompiles happen there), then
the steady step of the compiled model and of the same model eager in interleaved pairs, one
thread each. compile_s = the first steps' time minus as many steady steps. Writes
compile_costs.py beside this file (a module, so that every install has it) (exercise 2's scenarios read it), with its provenance.
Minutes per plan on a 2-core CPU: it is run by hand, not by the notebook.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).parent
OUT = HERE / "compile_costs.py"
FIRST_STEPS, PAIRS = 12, 15
PLANS = [  # (model, where, mode)
    *[(m, w, "default") for m in ("stack", "logs-norm", "clamps", "counts-calls")
      for w in ("whole", "blocks")],
    ("stack", "whole", "reduce-overhead"),
]  # fmt: skip


def one(habit: str, where: str, mode: str) -> dict:
    """Measure one plan in this (fresh) process."""
    import torch
    import torch._inductor.config as inductor_config
    from torch._dynamo.utils import counters

    from .models import apply, batch, build, train_step

    inductor_config.fx_graph_cache = False
    torch.set_num_threads(1)
    warm = torch.compile(lambda t: (t.sin() + 1).relu().sum())  # Inductor's one-off costs
    warm(torch.randn(8))
    torch._dynamo.reset()
    counters.clear()
    data = batch()
    model = apply(build(habit), where, mode=mode)
    eager = build(habit)
    firsts = []
    for _ in range(FIRST_STEPS):
        start = time.perf_counter()
        train_step(model, data)
        firsts.append(time.perf_counter() - start)
    compiled_s, eager_s = [], []
    for i in range(2 * PAIRS):
        for which in (model, eager) if i % 2 == 0 else (eager, model):
            start = time.perf_counter()
            train_step(which, data)
            (compiled_s if which is model else eager_s).append(time.perf_counter() - start)
    step = statistics.median(compiled_s)
    return {
        "model": habit,
        "where": where,
        "mode": mode,
        "first_steps_s": firsts,
        "compile_s": sum(firsts) - FIRST_STEPS * step,
        "step_s": step,
        "eager_step_s": statistics.median(eager_s),
        "ratio_eager_over_compiled": statistics.median(
            e / c for e, c in zip(eager_s, compiled_s, strict=True)
        ),
        "graphs": int(counters["stats"]["unique_graphs"]),
        "frames_compiled": int(counters["frames"]["ok"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--one", nargs=3, metavar=("MODEL", "WHERE", "MODE"))
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(*args.one)))
        return
    rows, load = [], [os.getloadavg()[0]]
    for habit, where, mode in PLANS:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": tempfile.mkdtemp(prefix="l14-costs-")}
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "course_utils.lessons.timeline.measure_costs", "--one",
             habit, where, mode],
            capture_output=True, text=True, env=env, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            print(f"{habit} {where} {mode}: failed\n{done.stderr[-2000:]}", flush=True)
            continue
        row = json.loads(done.stdout.strip().splitlines()[-1])
        row["process_s"] = time.perf_counter() - start
        rows.append(row)
        load.append(os.getloadavg()[0])
        print(json.dumps(row), flush=True)
    import torch

    provenance = {
        "command": "python -m course_utils.lessons.timeline.measure_costs",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
        "torch": torch.__version__,
        "threads": 1,
        "load_1min": [round(x, 1) for x in load],
    }
    write(args.out, {"provenance": provenance, "plans": rows})


def write(path: Path, measured: dict) -> None:
    """The measurement as a Python module: `MEASURED = {...}`."""
    body = json.dumps(measured, indent=1).replace("null", "None")
    path.write_text(
        '"""Written by `python -m course_utils.lessons.timeline.measure_costs`: do not edit."""\n\n'
        f"MEASURED = {body}\n"
    )


if __name__ == "__main__":
    main()
