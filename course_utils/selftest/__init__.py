"""`course selftest`: will every lesson run, pass and show its effect on this machine, and how
long would each notebook take?

Runs every registered check with its lesson's reference answer and every notebook's headline
effect, each in its own time-boxed process (items.py, runner.py, worker.py), estimates each
notebook's full-mode run time here (estimate.py), and writes DIR/selftest.json and .md
(write.py). Needs only the run-time dependencies: no nbformat, nbclient or papermill.
"""

from __future__ import annotations

import datetime
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..effects import fmt_spread
from .items import CHECK, Item, discover
from .runner import run_items

OK = ("passed", "not-applicable", "measured")


@dataclass
class Selftest:
    """One self-test run: where, how, each item's record, thresholds and estimates."""

    env: dict
    quick: bool
    date: str
    command: str
    seconds: float
    items: dict[str, dict]  # item key -> record (status, result, detail, seconds)
    thresholds: list[dict] = field(default_factory=list)
    estimates: list[dict] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(r["status"] in OK for r in self.items.values())

    def summary(self) -> str:
        good = sum(r["status"] in OK for r in self.items.values())
        bad = [k for k, r in self.items.items() if r["status"] not in OK]
        over = [e["notebook"] for e in self.estimates if e["over_budget"]]
        return (
            f"{good}/{len(self.items)} items ok on {self.env.get('device_class')} "
            f"({self.env.get('device_name')}) in {self.seconds:.0f} s"
            + (f"; not ok: {', '.join(bad)}" if bad else "")
            + (f"; over the full-mode budget here: {', '.join(over)}" if over else "")
        )

    def to_dict(self) -> dict:
        return {**asdict(self), "ok": self.ok}


def driver_version() -> str | None:
    """The NVIDIA driver's version (nvidia-smi), or None where there is none."""
    import shutil
    import subprocess

    if shutil.which("nvidia-smi") is None:
        return None
    try:
        run = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (
        run.stdout.strip().splitlines()[0] if run.returncode == 0 and run.stdout.strip() else None
    )


def item_line(item: Item, record: dict) -> str:
    """The one line printed per item."""
    result = record.get("result") or {}
    if item.kind == CHECK and result.get("value") is not None:
        extra = f"measured {result['value']:.4g}" + (
            f" vs {result['threshold']:.4g}" if result.get("threshold") is not None else ""
        )
    elif "ratio" in result:
        n = result.get("n", len(result["ratios"]))  # records from before n was kept: its ratios
        extra = f"{result['ratio']:.2f}x ({fmt_spread(n, result['spread'])})"
    else:
        extra = record.get("detail", "")
    return f"{item.key}: {record['status']} in {record.get('seconds', 0):.1f} s" + (
        f", {extra}" if extra else ""
    )


def selftest(
    out: Path = Path("selftest"),
    *,
    quick: bool = False,
    only: list[str] | None = None,
    budget: float | None = None,
    timeout: float | None = None,
    reference: Path | None = None,
    items: list[Item] | None = None,
) -> Selftest:
    """Run the self-test into `out` (resuming what a previous run there finished)."""
    from ..device import env_info
    from .estimate import estimates
    from .thresholds import threshold_rows
    from .write import publish, write

    out = Path(out)
    env = {**env_info(), "driver": driver_version()}
    items = items if items is not None else discover(only)
    header = {"quick": quick, "device_class": env["device_class"], "device": env["device_name"]}
    records = run_items(
        items,
        out,
        quick=quick,
        timeout=timeout or (300.0 if quick else 900.0),
        budget=budget,
        header=header,
        line=item_line,
    )
    keys = {i.key for i in items}
    run = Selftest(
        env,
        quick,
        datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "course selftest"
        + (" --quick" if quick else "")
        + (f" --only {','.join(only)}" if only else "")
        + (f" --budget {budget:g}" if budget else ""),
        0.0,
        {k: v for k, v in records.items() if k in keys},
    )
    # the run time of every item, this invocation's and those a resumed run kept
    run.seconds = sum(r.get("wall_seconds", r.get("seconds", 0.0)) for r in run.items.values())
    run.thresholds = threshold_rows(items, run.items, env["device_class"])
    run.estimates = estimates(items, run.items, env, quick=quick)
    write(run, out)
    if reference is not None:
        publish(run, reference)
    return run
