"""The book's own pages, written as MyST markdown from the course's data, never typed figures:
the cheat sheet (course_utils.techniques + committed results), the results per device
(docs/results), the glossary (docs/glossary.md), and each lesson's header and reference rows."""

from __future__ import annotations

import json
import re
from pathlib import Path

from ..references import ReferenceRow, reference_rows
from ..techniques import GUIDE_TIPS, TECHNIQUES, Technique

LINK = re.compile(r"\[([^\]]+)\]\(\.\./docs/([^)#\s]+)(#[^)\s]*)?\)")


def site_href(doc_path: str, anchor: str = "") -> str:
    """Where a repository path under docs/ lives in the site."""
    if doc_path == "glossary.md":
        return "glossary.html" + anchor
    if doc_path.startswith("results/") and doc_path.endswith(".md"):
        return doc_path[:-3] + ".html" + anchor
    return doc_path + anchor  # json, png and other files are copied as they are


LOCAL = re.compile(r"\[([^\]]+)\]\((#[^)\s]+)\)")


def rewrite_links(markdown: str) -> str:
    """Links into ../docs/ and to anchors of the same page become raw HTML links into the
    site: the book's link checker judges them (Sphinx does not know HTML anchors)."""
    markdown = LINK.sub(lambda m: f'<a href="{site_href(m[2], m[3] or "")}">{m[1]}</a>', markdown)
    return LOCAL.sub(lambda m: f'<a href="{m[2]}">{m[1]}</a>', markdown)


def glossary(source: Path) -> str:
    return rewrite_links(source.read_text(encoding="utf-8"))


def lesson_header(report: dict, lesson: str, how: str) -> str:
    env = report.get("env", {})
    where = f"{env.get('device_name', '?')} (`{env.get('device_class', '?')}`)"
    if how == "ran":
        how = f"Outputs from `{report.get('command', '?')}` on {where}, {report.get('date', '?')}"
        how += "; demos ran on the reference answers, exercises show the learner's starting code."
    else:
        what = "did not run this lesson" if how == "not run" else "ran an older version of it"
        how = f"The report run of {report.get('date', '?')} on {where} {what}:"
        how += " the page shows the notebook without outputs (run `course report` again)."
    return (
        f"```{{note}}\n{how}\n"
        f'<a href="downloads/{lesson}.ipynb">Download the learner notebook</a> or open it in '
        "Colab (badge "
        "above). Reference results of other devices are at the end of this page.\n```"
    )


def _rows_table(rows: list[ReferenceRow]) -> list[str]:
    lines = ["| device (class) | date, command | what | measured |", "|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r.device_name} (`{r.device_class}`) | {r.date}, `{r.command}` "
            f"| {r.what} | {r.figure} |"
        )
    return lines


def lesson_references(lesson: str, own_class: str, results: Path) -> str:
    rows = [r for r in reference_rows(lesson, results) if r.device_class != own_class]
    lines = ["## Reference results on other devices", ""]
    if not rows:
        lines.append(
            f"No committed run of another device class than `{own_class}` covers this lesson "
            "yet. The [results page](results.md) lists every committed run."
        )
        return "\n".join(lines)
    lines.append(
        f"From the committed runs in `docs/results` (device classes other than `{own_class}`):"
    )
    return "\n".join([*lines, "", *_rows_table(rows)])


def _runs(results: Path) -> list[tuple[str, dict]]:
    out = []
    for path in sorted(results.glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("runs"), dict):
            out.append((path.name, data))
    return out


def results_page(results: Path) -> str:
    """Every committed run side by side: one column per run, one row per headline effect;
    then every file in docs/results, linked."""
    runs = _runs(results)
    head = ["# Results per device", ""]
    head.append(
        "Each column is one committed `course report` run (`docs/results/*.json`): device, "
        "class, date and command in its header. Effect = baseline / improved (above 1 helped), "
        "the median of n interleaved pairs with its IQR, or one ratio (n=1, no spread)."
    )
    rows: dict[tuple[str, str], dict[str, str]] = {}
    for name, data in runs:
        for lesson, run in data["runs"].items():
            for e in run.get("effects", []):
                rows.setdefault((lesson, e["technique"]), {})[name] = _figure(e)
    cols = [
        f"{d['env'].get('device_name', '?')} (`{d['env'].get('device_class', '?')}`), "
        f"{d.get('date', '?')}, `{d.get('command', '?')}`"
        for _, d in runs
    ]
    table = ["| lesson | technique | " + " | ".join(cols) + " |", "|---|---|" + "---|" * len(cols)]
    for (lesson, technique), figures in sorted(rows.items()):
        cells = [figures.get(name, "not measured") for name, _ in runs]
        table.append(f"| [{lesson}]({lesson}.ipynb) | {technique} | " + " | ".join(cells) + " |")
    files = ["## Every file in docs/results", ""]
    for path in sorted(results.iterdir()):
        if path.is_file():
            files.append(f'- <a href="{site_href("results/" + path.name)}">{path.name}</a>')
    return "\n".join([*head, "", *table, "", *files, ""])


def _figure(effect: dict) -> str:
    n = effect.get("n", len(effect.get("ratios", [])))
    q1, q3 = effect.get("spread", [effect["ratio"]] * 2)
    return (
        f"{effect['ratio']:.2f}x (IQR {q1:.2f}-{q3:.2f}, n={n})"
        if n > 1
        else (f"{effect['ratio']:.2f}x (n=1)")
    )


def _measured(t: Technique, runs: list[tuple[str, dict]]) -> str:
    if not t.effect:
        return "no headline effect: graded for correctness"
    found = []
    for name, data in runs:
        for e in data["runs"].get(t.lesson, {}).get("effects", []):
            if e["technique"].startswith(t.effect):
                env = data["env"]
                found.append(
                    f"{_figure(e)} on {env.get('device_name', '?')} "
                    f"(`{env.get('device_class', '?')}`), {data.get('date', '?')} "
                    f'(<a href="{site_href("results/" + name)}">{name}</a>)'
                )
    return "; ".join(found) or "not measured in a committed run yet"


def cheat_sheet(results: Path, lessons: set[str]) -> str:
    """One row per technique of the `lessons` in the book."""
    runs = _runs(results)
    lines = [
        "# Cheat sheet",
        "",
        "One row per technique the course teaches. *Tip* is the tip number of Kuhn's "
        "[Faster Deep Learning Training with PyTorch – a 2021 Guide]"
        '(https://efficientdl.com/faster-deep-learning-in-pytorch-a-guide/); "beyond" marks '
        "techniques the guide predates. *Measured* is read from the committed runs in "
        "`docs/results`, with the file each figure comes from.",
        "",
        "| technique | tip | when it pays | device classes | measured | one line | lesson |",
        "|---|---|---|---|---|---|---|",
    ]
    for t in (t for t in TECHNIQUES if t.lesson in lessons):
        tip = f"{t.tip}: {GUIDE_TIPS[t.tip]}" if t.tip else "beyond"
        classes = ", ".join(f"`{c}`" for c in t.classes) or "none measured"
        code = t.code.replace("|", "\\|")
        lines.append(
            f"| {t.name} | {tip} | {t.pays} | {classes} | {_measured(t, runs)} "
            f"| `{code}` | [{t.lesson}]({t.lesson}.ipynb) |"
        )
    return "\n".join(lines) + "\n"
