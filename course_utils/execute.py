"""Run one notebook with papermill in this process: the child side of `course grade`.

`python -m course_utils.execute IN OUT --cell-timeout S [--quick]` executes IN into OUT,
going on past failing cells (nbclient's allow_errors) and interrupting a cell that runs past
its limit. It always leaves OUT.status.json saying how the run ended, because a dead kernel
or a crash must become a reason in the grades, not a lost notebook.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def status_path(output: Path) -> Path:
    return output.with_name(output.name + ".status.json")


def execute(input_path: Path, output_path: Path, *, cell_timeout: float, quick: bool) -> dict:
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    status = {"outcome": "completed", "detail": ""}
    try:
        pm.execute_notebook(
            str(input_path),
            str(output_path),
            parameters={"quick": True} if quick else {},
            kernel_name="python3",
            execution_timeout=cell_timeout,
            allow_errors=True,  # one broken exercise must not stop the others' checks
            interrupt_on_timeout=True,  # a hanging cell is interrupted; the next cell runs
            progress_bar=False,
            cwd=str(input_path.parent),
        )
    except PapermillExecutionError:
        pass  # errors inside cells are expected; the grader reads them from the notebook
    except Exception as exc:  # dead kernel, kernel that never started, unreadable notebook
        name = type(exc).__name__
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        outcome = "kernel-died" if "DeadKernel" in name else "crashed"
        status = {"outcome": outcome, "detail": f"{name}: {detail}"[:300]}
    status_path(output_path).write_text(json.dumps(status))
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_utils.execute")
    parser.add_argument("input", type=Path)
    parser.add_argument("output", type=Path)
    parser.add_argument("--cell-timeout", type=float, default=600)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    execute(args.input, args.output, cell_timeout=args.cell_timeout, quick=args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
