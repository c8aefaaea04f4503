"""Run a check as `course grade` does, without a notebook: the judge in this process, the
learner's side in a child process, the two talking over the judge's socket.

`remote_verdict("00-step-timer", "course_utils.lessons.measuring.reference:reference_time_step")`
starts a Judge on a fresh socket, and a child Python that imports the answer(s) by
"module:qualname", and calls the registered check with $COURSE_JUDGE set: the check body runs
here on Remote answers, each probe runs in the child. What a check needs to survive that
(every call to the learner's code through a probe, results that cross as data, no state shared
between a probe and the body) is what this tests; notebook-mode tests cannot see it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import importlib, sys
from course_utils.checks import REGISTRY
from course_utils.selftest.items import lesson_checks
check_id, refs = sys.argv[1], sys.argv[2:]
lesson_checks(check_id.split("-", 1)[0])
answers = []
for ref in refs:
    module, _, name = ref.partition(":")
    obj = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    answers.append(obj)
REGISTRY[check_id](*answers)
"""


def remote_verdict(
    check_id: str,
    *answers: str,
    quick: bool = True,
    timeout: float = 600,
    paths: tuple[Path | str, ...] = (),
) -> dict:
    """The judge's verdict (a CheckResult dict) on the answers named "module:qualname",
    importable in the child from the repository root or from `paths` (e.g. tests/redteam)."""
    from course_utils import mode
    from course_utils.grading.judge import Judge

    verdicts: dict[str, dict] = {}
    lost: dict[str, str] = {}

    def report(cid: str, verdict: dict | None, detail: str) -> None:
        if verdict is None:
            lost[cid] = detail
        else:
            verdicts[cid] = verdict

    was = mode.is_quick()
    mode.set_quick(quick)
    with tempfile.TemporaryDirectory(prefix="judge-test-") as tmp:
        judge = Judge(Path(tmp) / "judge.sock", lambda: (0, check_id), report).start()
        env = {
            **os.environ,
            "COURSE_JUDGE": str(Path(tmp) / "judge.sock"),
            "COURSE_GRADING": "1",
            "COURSE_QUICK": "1" if quick else "0",
            "PYTHONPATH": os.pathsep.join(
                [str(ROOT), *map(str, paths), os.environ.get("PYTHONPATH", "")]
            ),
        }
        try:
            done = subprocess.run(
                [sys.executable, "-c", CHILD, check_id, *answers],
                env=env,
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        finally:
            judge.close()
            mode.set_quick(was)
    if check_id in lost:
        return {"check_id": check_id, "status": "lost", "message": lost[check_id]}
    if check_id not in verdicts:
        raise AssertionError(f"no verdict; the learner side printed:\n{done.stdout}\n{done.stderr}")
    return verdicts[check_id]
