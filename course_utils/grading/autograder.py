"""The grading side of a Gradescope autograder (`python -m course_utils.grading.autograder run`),
run inside Gradescope's container by the zip's `run_autograder`; `course export gradescope`
(gradescope.py) writes the zip.

Gradescope must never see "autograder failed": a results.json with a score and the reason is
written before grading starts (in case the run is stopped), after it (whatever happened to
the notebook), and by run_autograder itself should Python not start at all.
$COURSE_AUTOGRADER_ROOT replaces /autograder (tests), $COURSE_AUTOGRADER_PYTHON the Python.

Each check is two tests (see gradescope.py): `NN-check`, always visible, with its score and a
one-line status; `NN-check: details`, 0 points, with its messages and hint at the exported
visibility. Gradescope hides a learner's total while an after_due_date or after_published test
is not yet shown (docs/specs.md), so the summary (`output`, always visible) states the points.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import sys
import time
from importlib import metadata
from pathlib import Path

from ..authoring import read
from ..mode import UNTIMED_PLATFORMS
from ..protocol import (
    ERROR,
    FAILED,
    MISSING,
    NOT_APPLICABLE,
    NOT_ATTEMPTED,
    PASSED,
    TIMEOUT,
)
from .feedback import explain
from .gradescope import CONFIG, TORCH_FAMILY, AutograderConfig, points_per_check
from .records import Graded, Row, Submission
from .settings import RunSettings
from .submission import grade_submission

# the variables run_autograder reads (gradescope.RUN_AUTOGRADER): tests point them elsewhere
ROOT_ENV, PYTHON_ENV = "COURSE_AUTOGRADER_ROOT", "COURSE_AUTOGRADER_PYTHON"


def find_uploads(folder: Path) -> list[Path]:
    """Every notebook uploaded, at any depth, skipping hidden folders (.ipynb_checkpoints)
    and macOS's __MACOSX copies."""
    if not folder.is_dir():
        return []
    return sorted(
        p
        for p in folder.rglob("*.ipynb")
        if not any(
            part.startswith(".") or part == "__MACOSX" for part in p.relative_to(folder).parts
        )
    )


# each check's status in one visible line: no message, no hint (those are in its details)
STATUS_LINE = {
    PASSED: "Passed.",
    FAILED: "Failed.",
    NOT_ATTEMPTED: "Not attempted yet.",
    ERROR: "Error: the check stopped before its verdict.",
    TIMEOUT: "Timed out: a cell ran past its time limit.",
    MISSING: "Did not run: the notebook stopped before this check.",
    NOT_APPLICABLE: "Not applicable on this grading machine (0 points here).",
}
# when a learner sees a check's details, after the status line
SHOWN = {
    "hidden": "Its details go to your instructor only.",
    "after_due_date": "Its details (`{name}`) are shown after the due date.",
    "after_published": "Its details (`{name}`) are shown once grades are published.",
    "visible": "Its details: `{name}`.",
}


def _score_test(r: Row, output: str) -> dict:
    """A check's points and status as a test every learner sees at once (of all its points:
    a check this machine cannot judge still counts in the lesson's total)."""
    return {
        "name": r.check,
        "score": r.points,
        "max_score": r.max_points,
        "status": "passed" if r.status in (PASSED, NOT_APPLICABLE) else "failed",
        "output": output,
        "output_format": "md",
        "visibility": "visible",
        "extra_data": {
            "status": r.status,
            "value": r.value,
            "threshold": r.threshold,
            "device_class": r.device_class,
        },
    }


def _tests(r: Row, notes: dict[str, str], visibility: str) -> list[dict]:
    """A check's two Gradescope tests: its score with a status line, always visible; its
    explanation (messages, note, hint) at `visibility`, worth nothing."""
    details = f"{r.check}: details"
    line = f"{STATUS_LINE.get(r.status, r.status)} {SHOWN[visibility].format(name=details)}"
    score = _score_test(r, line)
    lead = [] if r.status != NOT_APPLICABLE else ["**Not applicable on this grading machine:**", ""]
    explained = {
        "name": details,
        "score": 0.0,
        "max_score": 0.0,
        "status": score["status"],
        "output": "\n".join(lead + explain(r, notes)),
        "output_format": "md",
        "visibility": visibility,
        "extra_data": {"details_of": r.check, "status": r.status},
    }
    return [score, explained]


def _refused(graded: Graded) -> bool:
    """Graded without being run, every check for one reason: an unreadable upload, a copy of
    another lesson, a notebook that forges results (`grade_submission`'s early returns)."""
    rows = graded.rows
    return (
        graded.executed is None
        and all(r.status == ERROR for r in rows)
        and len({r.message for r in rows}) == 1
    )


def _unrun(checks: dict[str, float], why: str) -> list[dict]:
    """Every check at 0 of its points, when the notebook could not be graded at all."""
    return [
        {
            "name": cid,
            "score": 0.0,
            "max_score": points,
            "status": "failed",
            "output": f"Not graded: {why}",
            "output_format": "md",
            "visibility": "visible",  # about the upload, not a hint: the learner can fix it
            "extra_data": {
                "status": "not-graded",
                "value": None,
                "threshold": None,
                "device_class": "",
            },
        }
        for cid, points in checks.items()
    ]


def _graded_with() -> dict:
    """This machine's Python, torch and torchvision, beside the exporter's (a mismatch shows)."""

    def version(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    return {"python": platform.python_version(), **{n: version(n) for n in TORCH_FAMILY}}


def _results(
    config: AutograderConfig | None, tests: list[dict], summary: str, started: float
) -> dict:
    extra = {"platform": "gradescope", "graded_with": _graded_with()}
    if config is not None:
        extra |= {k: getattr(config, k) for k in ("lesson", "quick", "course_version", "commit")}
        extra["speed_graded"] = config.grade_speed
        extra["visibility"] = config.visibility
        extra["exported_with"] = config.versions
    return {
        "score": sum(t["score"] for t in tests),
        "execution_time": round(time.monotonic() - started),
        "output": summary,
        "output_format": "md",
        "stdout_visibility": "hidden",
        "extra_data": extra,
        "tests": tests,
    }


def _finite(value):
    """JSON that strict parsers accept: inf and nan (a timer's ratio, say) become strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def write_results(results: dict, path: Path) -> None:
    """Whole or not at all: a kill mid-write leaves the previous file, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(_finite(results), indent=1, allow_nan=False), encoding="utf-8")
    tmp.replace(path)


@contextlib.contextmanager
def _grading_env(config: AutograderConfig):
    """The kernel's environment: no timing graded (unless asked), the offline data set."""
    saved = dict(os.environ)
    if not config.grade_speed:
        os.environ["COURSE_PLATFORM"] = "gradescope"
    os.environ.setdefault("COURSE_DATASET", "offline")
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _summary(rows: list[Row], config: AutograderConfig, earned: float, possible: float) -> str:
    device = next((r.device_class for r in rows if r.device_class), "unknown")
    lines = [
        f"**{config.lesson}: {earned:g} / {possible:g} points**, graded on Gradescope "
        f"(a `{device}` device, {'quick' if config.quick else 'full'} mode)."
    ]
    untimed = [
        f"{r.check} ({p['name']})"
        for r in rows
        for p in r.parts
        if p["status"] == NOT_APPLICABLE and UNTIMED_PLATFORMS["gradescope"] in p["message"]
    ]
    if untimed:
        lines.append(
            f"Measured and shown here, not graded: {', '.join(untimed)}. "
            f"{UNTIMED_PLATFORMS['gradescope'][0].upper()}{UNTIMED_PLATFORMS['gradescope'][1:]}."
        )
    if any(r.status == NOT_APPLICABLE for r in rows):
        lines.append(
            "A check this grading machine cannot judge earns 0 of its points here; your "
            "instructor can grade it on other hardware."
        )
    stopped = [r.check for r in rows if r.status in ("missing", "timeout")]
    if stopped:
        lines.append(
            f"{len(stopped)} check(s) did not finish ({', '.join(stopped)}): their details say why."
        )
    return "\n\n".join(lines)


def _upload_problem(folder: Path, uploads: list[Path], lesson: str) -> str:
    """Why there is no single notebook to grade: none, or several, named."""
    if uploads:
        names = ", ".join(p.relative_to(folder).as_posix() for p in uploads)
        return (
            f"your submission has {len(uploads)} notebooks ({names}): upload only your copy of "
            f"`{lesson}.ipynb`, so that it is clear which one to grade"
        )
    files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    return (
        f"no notebook (.ipynb) in your submission (received: {', '.join(files[:10]) or 'nothing'})"
        f": upload your copy of `{lesson}.ipynb` (any file name)"
    )


def grade_upload(root: Path, config: AutograderConfig, checks: dict[str, float], started: float):
    """Find the one uploaded notebook and grade it with `grade_submission`, as `course grade`
    does."""
    folder = root / "submission"
    uploads = find_uploads(folder)
    if len(uploads) != 1:
        why = _upload_problem(folder, uploads, config.lesson)
        return _results(config, _unrun(checks, why), f"**Not graded**: {why}.", started)
    sub = Submission(uploads[0], uploads[0].relative_to(folder).as_posix())
    solution = read(root / "source" / "solutions" / f"{config.lesson}.ipynb")
    run = RunSettings(config.cell_timeout, config.notebook_timeout, config.quick)
    with _grading_env(config):
        graded = grade_submission(
            sub.name,
            sub.path.name,
            sub.path.read_bytes(),
            {config.lesson: solution},
            run,
            lesson=config.lesson,
        )
    rows, notes = graded.rows, graded.notes
    if len(rows) == 1 and not rows[0].check:  # unreadable, or not this lesson's notebook
        why = f"{rows[0].message} (this assignment grades `{config.lesson}.ipynb`)"
        return _results(config, _unrun(checks, why), f"**Not graded**: {why}.", started)
    if _refused(graded):  # the reason is about the upload, not a hint: shown at once
        why = f"{rows[0].message} (this assignment grades `{config.lesson}.ipynb`)"
        tests = [_score_test(r, f"Not graded: {why}") for r in rows]
        return _results(config, tests, f"**Not graded**: {why}.", started)
    tests = [t for r in rows for t in _tests(r, notes, config.visibility)]
    earned, possible = sum(t["score"] for t in tests), sum(t["max_score"] for t in tests)
    return _results(config, tests, _summary(rows, config, earned, possible), started)


def hide_from_learners(root: Path) -> list[Path]:
    """As root, make what the learner's code must not read or write root's alone: the source
    (solutions, config), the results folder, and the installed course (its reference answers;
    the kernel imports the answer-free copy instead). The learner's code runs as a grading user
    (course_utils.grading.sandbox), which then cannot reach them."""
    if os.geteuid() != 0:
        return []
    import course_utils

    hidden = [root / "source", root / "results"]
    installed = Path(course_utils.__file__).parent
    if {"site-packages", "dist-packages"} & set(installed.parts):  # not a working copy
        hidden.append(installed)
    for path in hidden:
        if path.exists():
            os.chmod(path, 0o700)
    return hidden


def run(root: Path) -> dict:
    """Grade /autograder/submission into /autograder/results/results.json, whatever happens:
    written before grading (in case the run is stopped) and after it, once no process of the
    learner's code is left (the sandbox's, or the grading user's, all killed by then)."""
    started = time.monotonic()
    out = root / "results" / "results.json"
    (root / "results").mkdir(parents=True, exist_ok=True)
    hide_from_learners(root)
    try:
        config = AutograderConfig(**json.loads((root / "source" / CONFIG).read_text()))
        checks = points_per_check(root / "source" / "solutions" / f"{config.lesson}.ipynb")
    except Exception as exc:  # a broken zip: the instructor's to fix, said to everyone
        why = f"the autograder is broken ({type(exc).__name__}: {exc}); please tell your instructor"
        results = _results(None, [], f"**Not graded**: {why}.", started)
        write_results(results, out)
        return results
    stopped = (
        "the grader was stopped before it finished (past Gradescope's time limit, "
        f"{config.time_limit_minutes} min, or its memory limit)"
    )
    unfinished = _results(config, _unrun(checks, stopped), f"**Not graded**: {stopped}.", started)
    write_results(unfinished, out)  # what Gradescope reads if this run is stopped
    try:
        results = grade_upload(root, config, checks, started)
    except Exception as exc:  # the grader's own failure must still reach the learner
        why = f"the grader failed ({type(exc).__name__}: {str(exc)[:200]}); tell your instructor"
        results = _results(config, _unrun(checks, why), f"**Not graded**: {why}.", started)
    write_results(results, out)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_utils.grading.autograder")
    parser.add_argument("command", choices=["run"])
    parser.add_argument("--root", type=Path, default=Path(os.environ.get(ROOT_ENV, "/autograder")))
    args = parser.parse_args(argv)
    results = run(args.root)
    print(results["output"])  # the autograder's stdout: for the instructor
    for t in results["tests"]:
        if "details_of" not in t["extra_data"]:
            print(f"{t['name']}: {t['score']:g}/{t['max_score']:g} {t['extra_data']['status']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
