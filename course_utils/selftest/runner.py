"""Run self-test items one at a time, each in its own process, time-boxed and resumable.

The state file (DIR/state.json) records every finished item as it finishes, so a run that
was interrupted (Ctrl-C, a lost Colab runtime) continues where it stopped. A child that runs
past its limit is killed with every process it started (torchrun ranks, DataLoader workers);
one that dies without a result is recorded as crashed, with the end of its log as the reason.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

from ..processes import kill_tree
from .items import LESSONS, Item

STATE = "state.json"
RERUN = ("skipped",)  # statuses a resumed run tries again: the budget ran out before them


def _context():
    """A fork server that has imported torch, the harness and every lesson's selftest module
    once: each item starts in a fresh fork of it in about a second, instead of paying those
    imports again (4-6 s on a loaded 2-core machine). Spawn where there is no fork server
    (Windows). Imports only: the server never touches a CUDA device, so its forks can."""
    if "forkserver" in mp.get_all_start_methods():
        ctx = mp.get_context("forkserver")
        lessons = [f"course_utils.lessons.{name}.selftest" for _, name in LESSONS.values()]
        ctx.set_forkserver_preload(["course_utils.selftest.worker", *lessons])
        return ctx
    return mp.get_context("spawn")


def _child_env() -> dict:
    """The settings a child must see now (the fork server kept those it started with)."""
    names = ("COURSE_", "OMP_", "CUDA_", "PYTORCH_", "TORCH")
    return {k: v for k, v in os.environ.items() if k.startswith(names)}


def _log_tail(path: Path, lines: int = 3) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(line.strip() for line in text[-lines:])[:300]


def run_one(item: Item, out: Path, *, quick: bool, timeout: float) -> dict:
    """Run `item` in a child process; its record: status, result, detail, seconds."""
    (out / "logs").mkdir(parents=True, exist_ok=True)
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", item.key)
    result_path, log_path = out / "logs" / f"{stem}.json", out / "logs" / f"{stem}.log"
    result_path.unlink(missing_ok=True)
    from .worker import run_item

    ctx = _context()
    child = ctx.Process(
        target=run_item,
        args=(item, quick, _child_env(), str(result_path), str(log_path)),
        name=f"selftest {item.key}",
    )
    t0 = time.perf_counter()
    child.start()
    child.join(timeout)
    wall = time.perf_counter() - t0
    if child.is_alive():
        kill_tree(child.pid)
        child.join(5)
        return {
            "status": "timeout",
            "detail": f"still running after {timeout:.0f} s: killed",
            "seconds": wall,
        }
    if result_path.exists():
        record = json.loads(result_path.read_text(encoding="utf-8"))
        record["wall_seconds"] = wall
        return record
    code = child.exitcode
    how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
    tail = _log_tail(log_path)
    return {
        "status": "crashed",
        "detail": f"{how}" + (f": {tail}" if tail else ""),
        "seconds": wall,
    }


def load_state(out: Path, header: dict) -> dict[str, dict]:
    """Records of the items a previous run with the same header finished."""
    path = out / STATE
    if not path.exists():
        return {}
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        return {}
    if state.get("header") != header:
        return {}
    return {k: v for k, v in state.get("items", {}).items() if v.get("status") not in RERUN}


def save_state(out: Path, header: dict, records: dict[str, dict]) -> None:
    tmp = out / (STATE + ".tmp")
    tmp.write_text(json.dumps({"header": header, "items": records}, indent=1), encoding="utf-8")
    tmp.replace(out / STATE)


def run_items(
    items: list[Item],
    out: Path,
    *,
    quick: bool,
    timeout: float,
    budget: float | None,
    header: dict,
    line: Callable[[Item, dict], str],
) -> dict[str, dict]:
    """Every item's record, running those the state file does not hold yet."""
    from ..progress import tqdm

    out.mkdir(parents=True, exist_ok=True)
    records = load_state(out, header)
    done = [i for i in items if i.key in records]
    if done:
        print(f"resuming: {len(done)} of {len(items)} items done before", file=sys.stderr)
    t0 = time.perf_counter()
    bar = tqdm(items, desc="selftest", unit="item")
    for item in bar:
        if item.key in records:
            continue
        bar.set_postfix_str(item.key)
        left = None if budget is None else budget - (time.perf_counter() - t0)
        if left is not None and left < 5:
            record = {
                "status": "skipped",
                "detail": f"the {budget:.0f} s budget was spent",
                "seconds": 0.0,
            }
        else:
            record = run_one(
                item, out, quick=quick, timeout=timeout if left is None else min(timeout, left)
            )
        records[item.key] = record
        save_state(out, header, records)
        bar.write(line(item, record), file=sys.stderr)
    return records
