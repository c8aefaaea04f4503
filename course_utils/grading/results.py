"""Each check's result: the judge's verdict when grading, else what the notebook shows.

Grading (`course grade`): a check's result is the verdict the judge reached outside the
sandbox (course_utils.grading.judge), reported over the witness pipe. Nothing the notebook
shows counts. A check with no verdict is told why from the run: the judge lost the session
(the cell was interrupted, the kernel died), or its cell never ran, raised before asking the
judge, or never asked (a rebound `lesson`, say).

A run without a judge (`course report`, and the checks still marked LEGACY in
course_utils.checks) reads the notebook instead: a result counts only when the grader's tagged
cell for that check completed without an error output, the run did not end inside that cell
(a dead kernel, a killed process, the notebook's time limit), the cell holds exactly one
result, for its own check id, and nothing but text or figures follows it.
"""

from __future__ import annotations

import re

from ..authoring import check_cells
from ..protocol import ERROR, MIME, MISSING, PASSED, STATUSES, TIMEOUT

RAN_TO_ITS_END = "a result counts only from a check that ran to its end"
# A message quotes what the learner's code returned or raised: a 20 MB string would otherwise
# land in grades.csv, the feedback and the state file (issue 32's red team, e05, wrote 131.8 MB
# into each). Real messages stay far below: the longest in the report run is under 1,000.
MESSAGE_CHARS = 4000


def _error(cell) -> tuple[str, str] | None:
    """(exception name, first line of its message) of the cell's error output, if any."""
    for out in cell.get("outputs", []):
        if out.get("output_type") == "error":
            lines = str(out.get("evalue", "")).strip().splitlines()
            return out.get("ename", "Error"), lines[0] if lines else ""
    return None


def _payloads(cell) -> list[tuple[int, object]]:
    """(output index, data) of every check result the cell shows."""
    return [
        (i, out["data"][MIME])
        for i, out in enumerate(cell.get("outputs", []))
        if out.get("output_type") in ("display_data", "execute_result")
        and MIME in out.get("data", {})
    ]


def _only_text_or_figures_after(cell, index: int) -> bool:
    """What may follow a check's result: printed text, and figures the inline backend flushes
    when the cell ends (a learner's function may plot while the check runs)."""
    for out in cell.get("outputs", [])[index + 1 :]:
        if out.get("output_type") == "stream":
            continue
        if set(out.get("data", {})) <= {"image/png", "image/svg+xml", "text/plain"}:
            continue
        return False
    return True


_NOT_DEFINED = re.compile(r"name '(\w+)' is not defined")
_DEFINES = r"^\s*(?:def|class)\s+{0}\b|^\s*{0}\s*(?::[^=]*)?=[^=]"


def _cause_above(executed, index: int, ename: str, evalue: str, cell_timeout: float) -> str:
    """Why a check cell raised NameError, when a cell above that defines the name failed:
    it timed out (interrupted) or raised. Empty when no such cell is found."""
    found = _NOT_DEFINED.search(evalue) if ename == "NameError" else None
    if not found:
        return ""
    defines = re.compile(_DEFINES.format(re.escape(found[1])), re.MULTILINE)
    for i in range(index - 1, -1, -1):
        cell = executed.cells[i]
        if cell.cell_type != "code" or not defines.search(cell.source):
            continue
        error = _error(cell)
        if error is None:
            return ""
        if error[0] == "KeyboardInterrupt":
            what = f"ran past the {cell_timeout:g} s cell limit and was interrupted"
        else:
            what = f"raised {error[0]}" + (f": {error[1]}" if error[1] else "")
        return f", because the cell above that defines {found[1]!r} (cell {i + 1}) {what}"
    return ""


def _ended_here(run_status: dict) -> str:
    return {
        "kernel-died": "the kernel died while this check cell ran (os._exit, a crash or out of memory)",
        "notebook-timeout": "the notebook's total time limit ended the run while this check cell ran",
        "tampered": "the executed notebook was changed by something other than the grader",
    }.get(
        run_status.get("outcome"),
        f"the run stopped while this check cell ran ({run_status.get('detail', '')})",
    )


def _counted(cid: str, cell, index: int, executed, run_status: dict, cell_timeout: float):
    """(status, message, payload or None) for one check's tagged cell."""
    payloads = _payloads(cell)
    if run_status.get("outcome") != "completed" and _is_last(run_status, cell, index):
        status = TIMEOUT if run_status.get("outcome") == "notebook-timeout" else ERROR
        return status, f"{_ended_here(run_status)}: {RAN_TO_ITS_END}", None
    error = _error(cell)
    shown = " after showing a result" if payloads else ""
    if error and error[0] == "KeyboardInterrupt":
        return (
            TIMEOUT,
            f"the check ran past the {cell_timeout:g} s cell limit and was interrupted{shown}",
            None,
        )
    if error:
        detail = f": {error[1]}" if error[1] else ""
        cause = _cause_above(executed, index, *error, cell_timeout)
        tail = f" ({RAN_TO_ITS_END})" if payloads else ""
        return ERROR, f"the check cell raised {error[0]}{detail}{cause}{shown}{tail}", None
    if not payloads:
        return MISSING, "the check cell produced no result", None
    if len(payloads) > 1:
        return (
            ERROR,
            f"the check cell showed {len(payloads)} check results, not one: {RAN_TO_ITS_END}, once",
            None,
        )
    at, payload = payloads[0]
    if not isinstance(payload, dict) or payload.get("check_id") != cid:
        claimed = payload.get("check_id") if isinstance(payload, dict) else type(payload).__name__
        return ERROR, f"the result shown in this check's cell is for {claimed!r}, not {cid!r}", None
    if not _only_text_or_figures_after(cell, at):
        return ERROR, f"something was displayed after this check's result: {RAN_TO_ITS_END}", None
    return payload.get("status", ERROR), payload.get("message", ""), payload


def _is_last(run_status: dict, cell, index: int) -> bool:
    """Whether `cell` is the last one the run started (known by its id, else its index)."""
    last = run_status.get("last_cell")
    return last is not None and last in (cell.get("id"), index)


def _before_this_check(run_status: dict, index: int) -> str:
    return {
        "kernel-died": "the kernel died before this check ran (a cell crashed the Python process, e.g. os._exit or out of memory)",
        "notebook-timeout": "the notebook ran past its total time limit before this check ran",
        "tampered": "the executed notebook was changed by something other than the grader",
        "crashed": f"execution stopped before this check ran ({run_status.get('detail', '')})",
    }.get(run_status.get("outcome"), "the check cell produced no result")


def _from_verdict(row: dict, verdict: dict, points: float) -> dict:
    status = verdict.get("status")
    status = status if status in STATUSES else ERROR
    return {
        **row,
        "status": status,
        "points": min(float(verdict.get("points") or 0.0), points) if status == PASSED else 0.0,
        "value": verdict.get("value"),
        "threshold": verdict.get("threshold"),
        "device_class": verdict.get("device_class", ""),
        "message": str(verdict.get("message", "")),
        "hint": str(verdict.get("hint", "")),
        "parts": verdict.get("parts", []),
        "unit": str(verdict.get("unit") or ""),
        "better": str(verdict.get("better") or ""),
    }


def _no_verdict(cid: str, cell, index: int, executed, run_status: dict, cell_timeout: float):
    """(status, message) for a judged check that reached no verdict."""
    lost = run_status.get("lost", {}).get(cid)
    error = _error(cell)
    if error and error[0] == "KeyboardInterrupt" and not _at_limit(cell, cell_timeout):
        return ERROR, (
            f"the check cell raised KeyboardInterrupt after {_duration(cell):.3g} s, before its "
            f"{cell_timeout:g} s limit: the grader interrupts a cell only at its limit"
        )
    ended_here = run_status.get("outcome") != "completed" and _is_last(run_status, cell, index)
    if lost is not None:
        interrupted = (error and error[0] == "KeyboardInterrupt") or (
            run_status.get("outcome") == "notebook-timeout" and ended_here
        )
        if interrupted:
            return (
                TIMEOUT,
                f"the check ran past the {cell_timeout:g} s cell limit and was interrupted",
            )
        if ended_here:  # the run's own record says why: a dead kernel, not only a lost session
            return ERROR, f"{_ended_here(run_status)}: no verdict was reached"
        return ERROR, f"the check did not finish: {lost}"
    if ended_here:
        status = TIMEOUT if run_status.get("outcome") == "notebook-timeout" else ERROR
        return status, f"{_ended_here(run_status)}: no verdict was reached"
    if error and error[0] == "KeyboardInterrupt":
        return TIMEOUT, f"the check ran past the {cell_timeout:g} s cell limit and was interrupted"
    if error:
        detail = f": {error[1]}" if error[1] else ""
        cause = _cause_above(executed, index, *error, cell_timeout)
        return ERROR, f"the check cell raised {error[0]}{detail}{cause}"
    return ERROR, (
        "the check cell ran but never asked the grader's judge for a verdict (was the name "
        "`lesson`, or the check, redefined above it?)"
    )


def _duration(cell) -> float | None:
    """How long the cell ran, as papermill (in the grader's process) recorded it."""
    papermill = (cell.get("metadata") or {}).get("papermill") or {} if cell is not None else {}
    duration = papermill.get("duration")
    return float(duration) if isinstance(duration, int | float) else None


def _at_limit(cell, cell_timeout: float) -> bool:
    """Whether a KeyboardInterrupt in `cell` can be the grader's: it interrupts at the cell's
    limit, so a cell that raised one well before it raised it itself (unknown: the grader's)."""
    duration = _duration(cell)
    return duration is None or duration >= 0.9 * cell_timeout


def read_results(executed, sol, lesson: str, run_status: dict, cell_timeout: float) -> list[dict]:
    """One result per solution check (see the module docstring). `run_status` is how the run
    ended (`outcome`, `detail`), `last_cell`, the id (else index) of the last cell started,
    and when grading the judge's `verdicts` and `lost` sessions by check id."""
    from ..checks import LEGACY

    results = []
    judged = "verdicts" in run_status
    for cid, (_, sol_cell) in check_cells(sol, lesson).items():
        points = float(sol_cell.metadata.get("nbgrader", {}).get("points", 1))
        row = {
            "check": cid,
            "points": 0.0,
            "max_points": points,
            "value": None,
            "threshold": None,
            "device_class": "",
        }
        index = (
            next(
                (
                    i
                    for i, c in enumerate(executed.cells)
                    if c.metadata.get("course", {}).get("check") == cid
                ),
                None,
            )
            if executed is not None
            else None
        )
        cell = executed.cells[index] if index is not None else None
        verdict = run_status.get("verdicts", {}).get(cid) if judged else None
        if verdict is not None and cid not in LEGACY:
            results.append(_from_verdict(row, verdict, points))
            continue
        ran = cell is not None and (cell.get("outputs") or _is_last(run_status, cell, index))
        if judged and cid not in LEGACY and (ran or cid in run_status.get("lost", {})):
            status, message = _no_verdict(cid, cell, index, executed, run_status, cell_timeout)
            results.append({**row, "status": status, "message": message})
            continue
        if not ran:
            results.append(
                {**row, "status": MISSING, "message": _before_this_check(run_status, index)}
            )
            continue
        status, message, payload = _counted(cid, cell, index, executed, run_status, cell_timeout)
        if payload is None:
            results.append({**row, "status": status, "message": message})
            continue
        status = status if status in STATUSES else ERROR
        results.append(
            {
                **row,
                "status": status,
                "points": min(float(payload.get("points") or 0.0), points)
                if status == PASSED
                else 0.0,
                "value": payload.get("value"),
                "threshold": payload.get("threshold"),
                "device_class": payload.get("device_class", ""),
                "message": message,
                "hint": payload.get("hint", ""),
                "parts": payload.get("parts", []),
                "unit": str(payload.get("unit") or ""),
                "better": str(payload.get("better") or ""),
            }
        )
    return [_bounded(r) for r in results]


def _short(text: str) -> str:
    if len(text) <= MESSAGE_CHARS:
        return text
    return f"{text[:MESSAGE_CHARS]}… ({len(text) - MESSAGE_CHARS:,} more characters not kept)"


def _bounded(row: dict) -> dict:
    """`row` with its texts cut to MESSAGE_CHARS, and a value that is not a number as text."""
    value = row.get("value")
    if value is not None and not isinstance(value, (int, float)):
        value = _short(str(value))
    parts = [
        {**p, "message": _short(str(p.get("message", "")))} if isinstance(p, dict) else p
        for p in row.get("parts", [])[:20]
    ]
    texts = {k: _short(str(row[k])) for k in ("message", "hint") if k in row}
    return {**row, **texts, "value": value, **({"parts": parts} if "parts" in row else {})}
