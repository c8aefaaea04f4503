"""Run times and check verdicts alone and beside busy processes (issue: usable on a shared
2-core machine). Measure on an otherwise idle machine.

    python scripts/busy_benchmark.py 00 01 04     # notebook prefixes; all when none given
    python scripts/busy_benchmark.py --check 11 --repeat 10 --busy 0,1,2

Notebooks: runs `course report --quick --only NN` for each notebook twice, idle then beside a
process that spins one core, and prints the run times and their ratio (goal: within ~2.5x).

`--check 11`: runs the capstone's reference through its speed-run check `--repeat` times at
each `--busy` level (that many processes spinning a core each), every run in a fresh process
in quick mode, and prints each run's verdict and ratio, then per level how many passed and
the median ratio against the idle one (issue 15: 10/10 beside one, 5/5 beside two, ratios
within 1.5x of idle).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPIN = "import time\nend = time.time() + 3600\nwhile time.time() < end: pass"
CAPSTONE_RUN = """
import json, statistics
from course_utils.lessons import capstone as lesson
parts = lesson.check_speedrun.__wrapped__(lesson.reference_speedrun)  # the body: parts only
time_part = next((p for p in parts if p.name == "time to target"), None)
print("RESULT " + json.dumps({
    "passed": all(p.status == "passed" for p in parts),
    "ratio": time_part.value if time_part else None,
    "message": "; ".join(f"{p.name}: {p.message}" for p in parts),
}))
"""


@contextmanager
def spinning(n: int):
    """`n` processes spinning one core each, for as long as the block runs."""
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(n)]
    try:
        time.sleep(1 if n else 0)
        yield
    finally:
        for p in spinners:
            p.kill()
            p.wait()


def run_time(prefix: str, out: Path) -> float:
    cmd = [sys.executable, "-m", "course_utils", "report", "--quick", "--only", prefix]
    subprocess.run([*cmd, "--out", str(out)], cwd=ROOT, capture_output=True, check=False)
    runs = json.loads((out / "results.json").read_text())["runs"]
    return next(r["seconds"] for name, r in runs.items() if name.startswith(prefix))


def notebooks(prefixes: list[str]) -> None:
    prefixes = prefixes or sorted(
        p.stem.split("_")[0] for p in (ROOT / "solutions").glob("*.ipynb")
    )
    print(f"{'notebook':>8} {'idle s':>8} {'busy s':>8} {'ratio':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        for prefix in prefixes:
            idle = run_time(prefix, Path(tmp) / f"idle-{prefix}")
            with spinning(1):
                busy = run_time(prefix, Path(tmp) / f"busy-{prefix}")
            print(f"{prefix:>8} {idle:8.1f} {busy:8.1f} {busy / idle:6.2f}", flush=True)


def capstone_once() -> dict:
    env = {**os.environ, "COURSE_QUICK": "1", "COURSE_DATASET": "offline"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    t0 = time.perf_counter()
    run = subprocess.run(
        [sys.executable, "-c", CAPSTONE_RUN], cwd=ROOT, env=env, capture_output=True, text=True
    )
    line = next((x for x in run.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        return {"passed": False, "ratio": None, "message": run.stderr.strip()[-300:]}
    return {**json.loads(line[7:]), "seconds": time.perf_counter() - t0}


def capstone(repeat: int, levels: list[int]) -> None:
    medians = {}
    for busy in levels:
        results = []
        with spinning(busy):
            for i in range(repeat):
                r = capstone_once()
                results.append(r)
                verdict = "pass" if r["passed"] else "FAIL"
                ratio = f"{r['ratio']:.2f}x" if r["ratio"] else "-"
                print(f"busy {busy} run {i + 1}: {verdict} {ratio}  {r['message']}", flush=True)
        ratios = [r["ratio"] for r in results if r["ratio"]]
        medians[busy] = statistics.median(ratios) if ratios else float("nan")
        passed = sum(r["passed"] for r in results)
        print(f"busy {busy}: {passed}/{repeat} passed, median ratio {medians[busy]:.2f}x", end="")
        if ratios:
            print(f" (range {min(ratios):.2f}-{max(ratios):.2f})", end="")
        if 0 in medians and busy != 0:
            print(f", {medians[busy] / medians[0]:.2f} of idle", end="")
        print(flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("prefixes", nargs="*")
    parser.add_argument("--check", choices=["11"], help="a check's verdicts instead")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--busy", default="0,1,2", help="comma-separated spinner counts")
    args = parser.parse_args()
    if args.check:
        capstone(args.repeat, [int(b) for b in args.busy.split(",")])
    else:
        notebooks(args.prefixes)


if __name__ == "__main__":
    main()
