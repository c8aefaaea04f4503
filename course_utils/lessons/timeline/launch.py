"""Two processes from a notebook (course_utils.launch: a free port, a line per rank as it
starts, a deadline, the failing rank's own error), each recording loops as DDP training."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from ... import launch as harness

WORLD = 2


class LaunchFailed(RuntimeError):
    """Raised when the two-process recording did not finish: the failing rank's own error."""


def record_ranks(loops: list[dict], *, timeout_s: float = 240) -> list[list[dict]]:
    """For each loop (loops.spec dicts), the traces of its two ranks, recorded by one launch of
    worker.py on 2 CPU processes (gloo, one thread each)."""
    print(f"recording {len(loops)} loop(s) on {WORLD} CPU processes (gloo): the processes start "
          "in a few seconds ...", flush=True)  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="course14-") as folder:
        spec = Path(folder) / "loops.json"
        spec.write_text(json.dumps(loops))
        job = harness.Torchrun(
            ["-m", "course_utils.lessons.timeline.worker", str(spec), folder],
            nproc=WORLD,
            timeout_s=timeout_s,
            env={"COURSE_DEVICE": "cpu"},
        )
        done = job.finish()
        if done.returncode != 0 or not (Path(folder) / "done").exists():
            why = "it did not finish in time" if done.timed_out else done.rank_error()
            raise LaunchFailed(f"recording on {WORLD} processes failed: {why}")
        return [
            [json.loads((Path(folder) / f"{i}-rank{r}.json").read_text()) for r in range(WORLD)]
            for i in range(len(loops))
        ]
