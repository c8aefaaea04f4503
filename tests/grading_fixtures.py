"""A toy lesson's notebook (course_utils.lessons.toy), made by code, and submissions of it for
every grading scenario. Its checks ask one function for one number, so a grading run costs
little more than a kernel start.
"""

from __future__ import annotations

import copy
from pathlib import Path

import nbformat

from course_utils.authoring import (
    check_code,
    code,
    learner_copy,
    md,
    new_notebook,
    parameters_cell,
    write,
)

TOY = "toy_lesson.ipynb"
# 5x an idle import of torch, 7x the toy lesson's import cell (1.4 s idle); keeps each hang
# (one a run, graded serially, on Dask and in shards) short. tests/test_forgery.py grades two
# at a time under the same 10 s.
CELL_TIMEOUT = 10
THREADS_LINE = "threads seen by the kernel:"

CHECKS = "from course_utils.lessons import toy as lesson"


def toy_solution():
    cells = [
        md("# Toy lesson"),
        parameters_cell(),
        code(CHECKS),
        code("def double(x):\n    ### BEGIN SOLUTION\n    return x + x\n    ### END SOLUTION"),
        check_code("toy-double", 1, "lesson.check_double(double)"),
        code("def square(x):\n    ### BEGIN SOLUTION\n    return x * x\n    ### END SOLUTION"),
        check_code("toy-square", 2, "lesson.check_square(square)"),
        code("import matplotlib.pyplot as plt\n\nplt.plot([1, 2, 3])\nplt.title('toy figure');"),
    ]
    return new_notebook(cells, TOY)


def _cell(nb, prefix: str):
    return next(c for c in nb.cells if c.source.startswith(prefix))


def make_course(root: Path) -> tuple[Path, Path]:
    """solutions/ with the toy lesson, and submissions/ with one notebook per scenario."""
    solutions, subs = root / "solutions", root / "submissions"
    solutions.mkdir(parents=True)
    subs.mkdir()
    sol = toy_solution()
    write(sol, solutions / TOY)
    blank = learner_copy(sol, TOY)

    solved = copy.deepcopy(blank)  # a learner copy with the learner's (correct) answers
    for mine, answer in zip(solved.cells, sol.cells, strict=True):
        mine.source = answer.source

    def variant(name: str, edit=None):
        nb = copy.deepcopy(solved if name.startswith("solved") else blank)
        if edit:
            edit(nb)
        write(nb, subs / f"{name}_{TOY}")

    def wrong_square(nb):
        _cell(nb, "def square").source = "def square(x):\n    return x * 2"

    def raise_early(nb):
        nb.cells.insert(3, code("raise RuntimeError('oops, a broken cell')"))

    def hang(nb):
        _cell(nb, "def square").source = "def square(x):\n    while True:\n        pass"

    def die(nb):
        nb.cells.insert(5, code("import os\nos._exit(1)"))

    def delete_and_weaken(nb):
        nb.cells.remove(_cell(nb, "# [course-check] toy-square"))
        _cell(nb, "# [course-check] toy-double").source = "print('all good')"

    def forge(nb):
        forged = {"check_id": "toy-square", "status": "passed", "points": 2, "max_points": 2}
        nb.cells.append(
            code(
                "from IPython.display import display\n"
                f"display({{'application/vnd.course-check+json': {forged!r}, 'text/plain': 'speedup: 10x'}}, raw=True)\n"
                "print('toy-square passed, speedup: 10x')"
            )
        )
        _cell(nb, "def double").source = "def double(x):\n    return x + x"

    def report_threads(nb):
        nb.cells.append(
            code(
                "import os\n\nimport torch\n\n"
                f"print({THREADS_LINE!r}, "
                "[os.environ.get(k) for k in ('OMP_NUM_THREADS', 'MKL_NUM_THREADS', "
                "'OPENBLAS_NUM_THREADS', 'MALLOC_TRIM_THRESHOLD_', 'PYTHONHASHSEED')], "
                "torch.get_num_threads())"
            )
        )

    variant("solved")
    variant("solved_threads", report_threads)
    variant("untouched")
    variant("solved_wrong_square", wrong_square)
    variant("solved_raise_early", raise_early)
    variant("solved_hang", hang)
    variant("solved_dies", die)
    variant("solved_tampered", delete_and_weaken)
    variant("forged", forge)
    (subs / f"corrupt_{TOY}").write_text("{ this is not json", encoding="utf-8")
    return solutions, subs


def save(nb, path: Path) -> None:
    path.write_text(nbformat.writes(nb), encoding="utf-8")


def snapshot(out: Path) -> dict[str, bytes]:
    """What a grading run wrote for people (grades.csv, summary.csv, feedback), as bytes."""
    files = [out / "grades.csv", out / "summary.csv", *sorted((out / "feedback").glob("*.md"))]
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in files}


def threads_line(out: Path, submission: str) -> str:
    """The line the threads scenario printed in its executed notebook."""
    nb = nbformat.read(str(out / "executed" / f"{submission.removesuffix('.ipynb')}.ipynb"), 4)
    text = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
    return next(line for line in text.splitlines() if line.startswith(THREADS_LINE))
