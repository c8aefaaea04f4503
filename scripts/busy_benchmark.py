"""Each notebook's quick-mode run time alone and beside one busy process (issue: usable on a
shared 2-core machine; goal: beside one busy process within ~2.5x of the idle time).

    python scripts/busy_benchmark.py 00 01 04     # notebook prefixes; all when none given

Runs `course report --quick --only NN` for each notebook twice, idle then beside a process that
spins one core, and prints the run times and their ratio. Measure on an otherwise idle machine.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPIN = "import time\nend = time.time() + 3600\nwhile time.time() < end: pass"


def run_time(prefix: str, out: Path) -> float:
    cmd = [
        sys.executable,
        "-m",
        "course_utils",
        "report",
        "--quick",
        "--only",
        prefix,
        "--out",
        str(out),
    ]
    subprocess.run(cmd, cwd=ROOT, capture_output=True, check=False)
    runs = json.loads((out / "results.json").read_text())["runs"]
    return next(r["seconds"] for name, r in runs.items() if name.startswith(prefix))


def main(prefixes: list[str]) -> None:
    prefixes = prefixes or sorted(p.stem[:2] for p in (ROOT / "solutions").glob("*.ipynb"))
    print(f"{'notebook':>8} {'idle s':>8} {'busy s':>8} {'ratio':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        for prefix in prefixes:
            idle = run_time(prefix, Path(tmp) / f"idle-{prefix}")
            spinner = subprocess.Popen([sys.executable, "-c", SPIN])
            try:
                time.sleep(1)
                busy = run_time(prefix, Path(tmp) / f"busy-{prefix}")
            finally:
                spinner.kill()
            print(f"{prefix:>8} {idle:8.1f} {busy:8.1f} {busy / idle:6.2f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
