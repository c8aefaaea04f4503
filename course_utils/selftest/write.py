"""DIR/selftest.json and DIR/selftest.md of a self-test run, and the committed reference
copies docs/results/<class>-<device>-selftest.{json,md}."""

from __future__ import annotations

import json
import re
from pathlib import Path

from ..effects import fmt_spread


def _fmt(value) -> str:
    return "" if value is None else f"{value:.4g}"


def _cell(text) -> str:
    return str(text).replace("|", "/").replace("\n", " ")


def markdown(run) -> str:
    e = run.env
    lines = [
        "# Course self-test",
        "",
        f"- device: {e.get('device_name')} (`{e.get('device')}`), class `{e.get('device_class')}`"
        + (f", capability {e['capability']}" if e.get("capability") else ""),
        f"- torch {e.get('torch')}, CUDA {e.get('cuda') or 'none'}, driver "
        f"{e.get('driver') or 'none'}, Python {e.get('python')}, {e.get('threads')} threads of "
        f"{e.get('cpu_count')} CPUs",
        f"- {run.date}, `{run.command}`, quick mode {'on' if run.quick else 'off'}",
        f"- {run.summary()}",
        "",
        "## Checks (each with the lesson's reference answer)",
        "",
        "| item | status | measured | threshold | seconds | detail |",
        "|---|---|---|---|---|---|",
    ]
    for key, r in run.items.items():
        res = r.get("result") or {}
        if "/effect/" in key:
            continue
        detail = r.get("detail") or res.get("message", "")
        lines.append(
            f"| {_cell(key)} | {r['status']} | {_fmt(res.get('value'))} | "
            f"{_fmt(res.get('threshold'))} | {r.get('seconds', 0):.1f} | {_cell(detail)[:300]} |"
        )
    lines += [
        "",
        "## Headline effects (baseline / improved; above 1 the technique helped here)",
        "",
        "| item | status | baseline | improved | effect (IQR where n >= 2) | seconds |",
        "|---|---|---|---|---|---|",
    ]
    for key, r in run.items.items():
        if "/effect/" not in key:
            continue
        res = r.get("result") or {}
        if "ratio" in res:
            n = res.get("n", len(res["ratios"]))  # records from before n was kept: its ratios
            effect = f"{res['ratio']:.2f}x ({fmt_spread(n, res['spread'])})"
            lines.append(
                f"| {_cell(key)} | {r['status']} | {_fmt(res['baseline'])} {res['unit']} | "
                f"{_fmt(res['improved'])} {res['unit']} | {effect} | {r.get('seconds', 0):.1f} |"
            )
        else:
            lines.append(
                f"| {_cell(key)} | {r['status']} | | | | {r.get('seconds', 0):.1f} "
                f"({_cell(r.get('detail', ''))[:200]}) |"
            )
    flagged = [t for t in run.thresholds if t["unmeasured_here"]]
    lines += [
        "",
        f"## Thresholds ({len(flagged)} of {len(run.thresholds)} never measured on "
        f"{e.get('device_class')})",
        "",
        "| lesson | threshold | value | measured here | measured on | evidence |",
        "|---|---|---|---|---|---|",
    ]
    for t in run.thresholds:
        here = "; ".join(f"{m['check']}: {_fmt(m['value'])} ({m['status']})" for m in t["measured"])
        on = ", ".join(t["measured_on"]) or "(not stated)"
        flag = " **not measured on this class**" if t["unmeasured_here"] else ""
        lines.append(
            f"| {t['lesson']} | {t['name']} | {t['value']:g} | {_cell(here)} | {on}{flag} | "
            f"{_cell(t['evidence'])} |"
        )
    lines += [
        "",
        "## Estimated notebook run time here",
        "",
        "Estimated from each notebook's counted work and this device's rates "
        "(course_utils/selftest/estimate.py); `course report` measures the real figure.",
        "",
        "| notebook | full (est.) | budget | quick (est.) | self-test items here | rates |",
        "|---|---|---|---|---|---|",
    ]
    for s in run.estimates:
        over = " **over**" if s["over_budget"] else ""
        qover = " **over 60 s**" if s.get("quick_over_budget") else ""
        lines.append(
            f"| {s['notebook']} | {s['estimate_s']:.0f} s{over} | {s['budget_s']:.0f} s | "
            f"{s['quick_estimate_s']:.0f} s{qover} | {s['selftest_s']:.1f} s "
            f"({s['selftest_mode']}) | {_cell(s['rates']['source'])}, host x"
            f"{s['rates']['host']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def write(run, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "selftest.json").write_text(json.dumps(run.to_dict(), indent=1), encoding="utf-8")
    (out / "selftest.md").write_text(markdown(run), encoding="utf-8")


def reference_stem(env: dict) -> str:
    name = re.sub(r"[^a-z0-9]+", "-", str(env.get("device_name", "unknown")).lower()).strip("-")
    return f"{env.get('device_class')}-{name or 'unknown'}-selftest"


def publish(run, folder: Path) -> Path:
    """docs/results/<class>-<device>-selftest.{json,md}: only from a run where every item
    is ok, so a failed run never replaces a committed reference."""
    stem = reference_stem(run.env)
    if not run.ok:
        print(f"not written to {folder}/{stem}.*: not every item passed ({run.summary()})")
        return folder / f"{stem}.md"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{stem}.json").write_text(json.dumps(run.to_dict(), indent=1), encoding="utf-8")
    (folder / f"{stem}.md").write_text(markdown(run), encoding="utf-8")
    return folder / f"{stem}.md"
