"""`course release`: the learner edition holds no reference answer, and still runs.

Fast: the edition is built once into a temporary folder; a fresh interpreter whose
`course_utils` is the edition's imports every module and finds each answer a placeholder that
raises ReferenceWithheld; no file holds a solution; the instructor's tools are absent. The
skip handler runs in a fresh IPython shell (it would change how this process displays).
Slow: learner notebooks run top to bottom there, as a learner runs them (learner_run), with no
cell error and every check not attempted or graded by the instructor; CI runs RUN_IN_CI,
COURSE_TESTS=all every notebook.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest
from check_helpers import status_of

from course_utils import cli, learner_run, withholding
from course_utils import release as release_mod
from course_utils.answers import is_withheld, learner_or_reference, withheld
from course_utils.authoring import check_code, check_id_of, code, new_notebook, read, write
from course_utils.checks import check, correct
from course_utils.errors import AuthoringError, ReferenceWithheld
from course_utils.probes import call_with, observe
from course_utils.protocol import NOT_APPLICABLE, NOT_ATTEMPTED
from course_utils.release import DEFAULT_INSTALL, release, stopping_cells, withhold
from course_utils.skipping import SKIPPED

ROOT = Path(__file__).resolve().parents[1]
ALL = os.environ.get("COURSE_TESTS") == "all"
# 01: a cell that is not a demo stops (no range test yet) and the demos using its results
# follow; 08: self-checks from shipped values, and a demo stopped by each kind of verdict
RUN_IN_CI = ("01_one_cycle", "08_gradient_clipping")
NOTEBOOKS = sorted(p.stem for p in (ROOT / "solutions").glob("*.ipynb"))
RUN = [n for n in NOTEBOOKS if ALL or n in RUN_IN_CI]


# An editable install of the course (pip install -e) resolves a submodule missing from the
# edition in the repository: a learner's install of the edition alone has no such finder.
ALONE = """
import sys

sys.meta_path[:] = [f for f in sys.meta_path if "Editable" not in getattr(f, "__name__", "")]
"""


@pytest.fixture(scope="module")
def edition(tmp_path_factory):
    out = tmp_path_factory.mktemp("learner") / "edition"
    summary = release(out, ROOT / "solutions", install_url="git+https://example.org/learners")
    alone = tmp_path_factory.mktemp("alone")
    (alone / "sitecustomize.py").write_text(ALONE, encoding="utf-8")
    summary.pythonpath = os.pathsep.join([str(out), str(alone)])
    return summary


def _python(edition, script: str) -> subprocess.CompletedProcess:
    """`script` in a fresh interpreter whose course_utils is the edition's, and only it."""
    env = {**os.environ, "PYTHONPATH": edition.pythonpath}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        cwd=edition.out,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


IMPORT_ALL = """
import importlib, json, pkgutil
import course_utils
from course_utils.answers import is_withheld, withheld_names
from course_utils.errors import ReferenceWithheld

modules = [m.name for m in pkgutil.walk_packages(course_utils.__path__, "course_utils.")]
loaded = {m: importlib.import_module(m) for m in modules if not m.endswith("__main__")}
raised = []
for module in loaded.values():
    for name, value in vars(module).items():
        if name in withheld_names() and is_withheld(value):  # checks.evaluate is no answer
            try:
                value()
            except ReferenceWithheld:
                raised.append(name)
grading = importlib.util.find_spec("course_utils.grading")
print(json.dumps({"file": course_utils.__file__, "withheld": withheld_names(),
                  "raised": sorted(set(raised)), "grading": grading is not None}))
"""


def test_no_reference_answer_is_importable_from_the_learner_edition(edition):
    run = _python(edition, IMPORT_ALL)
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert Path(got["file"]).is_relative_to(edition.out), "the edition's course_utils was used"
    names = {n for ns in edition.withheld.values() for n in ns}
    assert set(got["withheld"]) == names and len(names) >= 40
    assert set(got["raised"]) == names, "every answer's placeholder raises ReferenceWithheld"
    assert not got["grading"], "course grade's package is left out"
    assert {"ReferenceLARS", "exact_break_even", "reference_speedrun"} <= names


def test_no_file_of_the_learner_edition_holds_a_solution(edition):
    """No solution region anywhere (protocol.py and authoring.py name the marker in quotes),
    no answer defined in a lesson or a notebook (errors.py's ReferenceUsed is no answer)."""
    found = []
    for path in edition.out.rglob("*"):
        if not (path.is_file() and path.suffix in (".py", ".ipynb", ".md", ".toml")):
            continue
        text, rel = path.read_text(encoding="utf-8"), path.relative_to(edition.out)
        if any(line.strip().strip('",') == "### BEGIN SOLUTION" for line in text.splitlines()):
            found.append(f"{rel}: a solution region")
        if rel.parts[:2] == ("course_utils", "lessons") or path.suffix == ".ipynb":
            for marker in ("def reference_", "class Reference"):
                if marker in text.replace("class ReferenceLAMB", ""):
                    found.append(f"{rel}: {marker}")
    assert not found
    for gone in ("grading", "report.py", "lessons/distributed/reference_scripts.py"):
        assert not (edition.out / "course_utils" / gone).exists()


def test_the_learner_edition_has_every_notebook_installing_from_its_own_url(edition):
    assert edition.notebooks == [f"{n}.ipynb" for n in NOTEBOOKS]
    for name in edition.notebooks:
        text = (edition.out / "notebooks" / name).read_text(encoding="utf-8")
        assert "git+https://example.org/learners" in text and DEFAULT_INSTALL not in text
    assert (edition.out / "pyproject.toml").exists() and (edition.out / "README.md").exists()


def test_the_edition_withholds_every_lessons_answers_under_other_names(edition):
    """Issue 33: a wrapper around `habits/loop.variant_train` earned 10-fast-train's points in
    the edition. Every ANSWERS_ELSEWHERE entry is withheld there, but an instrument another
    lesson measures with outside a demo, which the summary names."""
    elsewhere = withholding.every_answer_elsewhere()
    entries = {e for es in elsewhere.values() for e in es}
    assert "course_utils.lessons.habits.loop:variant_train" in entries
    withheld = {f"{m}:{n}" for m, ns in edition.withheld.items() for n in ns}
    withheld |= {
        f"{m.removesuffix('.__init__')}:{n}" for m, ns in edition.withheld.items() for n in ns
    }
    assert entries - set(edition.shared) <= withheld
    assert set(edition.shared) <= {"course_utils.memory:activation_bytes"}, edition.shared
    assert "measure with it" in str(edition) or not edition.shared


def test_a_learners_own_name_or_another_objects_attribute_is_no_harness_answer():
    """`factor` defined in the learner's cell, and `model.training`, are not the harness's
    `factor` or `training`; `cu.evaluate` and `lesson.factor` are."""
    helpers = frozenset({"factor", "training", "evaluate"})
    own = "def schedule(k):\n    def factor(s):\n        return k\n    return factor\n"
    assert release_mod._answers_used(own, set(helpers), helpers) == (set(), set())
    assert release_mod._answers_used("model.training\nevaluate(m)", set(helpers), helpers) == (
        set(),
        set(),
    )
    used = release_mod._answers_used("cu.evaluate(m)\nlesson.factor(2)", set(helpers), helpers)
    assert used == ({"evaluate", "factor"}, set())


def test_the_edition_ships_the_documents_its_notebooks_link_to(edition):
    """83 links to ../docs/glossary.md were dead in the edition (issue 33)."""
    dead = []
    for name in edition.notebooks:
        path = edition.out / "notebooks" / name
        for link in set(re.findall(r"\]\((\.\./[^)#\s]+)", path.read_text(encoding="utf-8"))):
            if not (path.parent / link).resolve().exists():
                dead.append(f"{name}: {link}")
    assert not dead
    assert list((edition.out / "docs" / "results").glob("*.json"))
    assert (edition.out / "setup.py").exists(), "a wheel built from the edition ships docs/"


def test_the_editions_environment_file_is_a_learners(edition):
    text = (edition.out / "environment.yml").read_text(encoding="utf-8")
    for tool in ("nbgrader", "dask", "sphinx", "papermill", "ruff"):
        assert tool not in text
    for needed in ("torch>=", "jupyterlab", "ipywidgets", "nbval", "- -e ."):
        assert needed in text


def test_colab_badges_open_the_edition_hosted_on_github(edition, tmp_path):
    text = (edition.out / "notebooks" / "00_measuring.ipynb").read_text(encoding="utf-8")
    assert "colab.research.google.com/github/faster-pytorch-training/course" in text
    assert "Colab badges still open the full course" in str(edition)
    url = "git+https://github.com/acme/course-edition.git@v1"
    assert release_mod.edition_repository(url) == "acme/course-edition"
    assert release_mod.edition_repository(DEFAULT_INSTALL) is None
    texts, _ = release_mod.learner_notebooks(ROOT / "solutions", set(), url)
    assert all("colab.research.google.com/github/acme/course-edition/blob/main/notebooks/"
               in t for t in texts.values())  # fmt: skip
    assert not any("github/faster-pytorch-training/course" in t for t in texts.values())


def test_a_reference_answer_becomes_a_placeholder_and_its_private_helpers_go():
    source = textwrap.dedent('''\
        """A lesson's answers."""

        from __future__ import annotations

        from ...checks import reference


        def _only_the_answer_uses_me(x):
            return x + 1


        def _shared(x):
            return x


        @reference
        def reference_double(x):
            return _only_the_answer_uses_me(x) * 2


        class ReferenceLAMB:  # kept: not an answer
            pass


        def helper(x):
            return _shared(x)
        ''')
    text, names = withhold(source, "course_utils.lessons.toy.reference")
    assert names == ["reference_double"]
    assert 'reference_double = withheld("reference_double")' in text
    assert "from ...answers import withheld" in text
    assert "_only_the_answer_uses_me" not in text and "def _shared" in text
    assert "class ReferenceLAMB" in text
    compile(text, "reference.py", "exec")


def test_a_check_that_needs_a_withheld_reference_is_graded_by_the_instructor(capsys):
    reference_triple = withheld("reference_triple")

    @check("test-withheld-ref", points=1)
    def check_triple(fn):
        return [correct("same", observe(call_with, fn, 2) == reference_triple(2), "fn(2)")]

    def triple(x):
        return 3 * x

    result = check_triple(triple)
    assert result.status == NOT_APPLICABLE and "graded by your instructor" in result.message
    with pytest.raises(ReferenceWithheld, match="its check needs the lesson's reference"):
        learner_or_reference(triple, reference_triple, "triple")


def test_a_demo_without_a_reference_stops_until_the_answer_passes(capsys):
    reference_half = withheld("reference_half")

    @check("test-withheld-demo", points=1)
    def check_half(fn):
        return [correct("half", observe(call_with, fn, 4) == 2, "fn(4)")]

    def half(x):
        raise NotImplementedError()

    assert status_of(check_half, half) == NOT_ATTEMPTED
    with pytest.raises(ReferenceWithheld, match="needs your `half` to pass its check first"):
        learner_or_reference(half, reference_half, "half")

    def half(x):  # noqa: F811  (the learner writes it)
        return x / 2

    assert status_of(check_half, half) == "passed"
    assert learner_or_reference(half, reference_half, "half") is half
    assert is_withheld(reference_half) and not is_withheld(half)


SHELL = """
from IPython.core.interactiveshell import InteractiveShell
from course_utils import skipping
from course_utils.answers import withheld

shell = InteractiveShell.instance()
assert skipping.install(shell)
shell.user_ns["reference_x"] = withheld("reference_x")
cells = [
    "a = 1",
    "a, half_made = 2, 3\\nb = reference_x(3)\\nprint('not reached')",
    "c = b + 1",
    "print(c)",
    "print(a, 'ran')",
    "print(half_made)",
    "print(undefined_name)",
]
print([shell.run_cell(cell).success for cell in cells])
"""


def test_run_all_goes_on_past_a_cell_that_needs_a_withheld_answer(edition):
    """Stopped: the cell (what it newly bound removed), then each cell needing what it binds
    (each says why in a line, and its reply is ok); any other NameError is still an error."""
    run = _python(edition, SHELL)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.strip().splitlines()
    assert lines[-1] == "[True, True, True, True, True, True, False]"
    assert lines[0].startswith("(skipped: `reference_x` is the lesson's reference answer")
    assert "(skipped: `b` comes from a cell above" in lines[1] and "`c` comes" in lines[2]
    assert "not reached" not in run.stdout and "2 ran" in run.stdout, "a name it had, kept"
    assert "(skipped: `half_made` comes" in run.stdout, "a name it made, removed"
    assert "NameError" in run.stdout


def _solution(cells: list) -> nbformat.NotebookNode:
    return new_notebook(cells, "toy.ipynb")


SELF_CHECK_08 = """
from torch import nn
from course_utils.errors import CheckFailed
from course_utils.lessons import clipping as lesson

def clipped_step(model, loss_fn, x, y, optimizer, max_norm):
    optimizer.zero_grad(set_to_none=True)
    loss_fn(model(x), y).backward()
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return norm

def clipped_after_step(model, loss_fn, x, y, optimizer, max_norm):
    optimizer.zero_grad(set_to_none=True)
    loss_fn(model(x), y).backward()
    optimizer.step()
    return nn.utils.clip_grad_norm_(model.parameters(), max_norm)

def accumulated(model, loss_fn, micro_batches, optimizer, max_norm):
    optimizer.zero_grad(set_to_none=True)
    for x, y in micro_batches:
        (loss_fn(model(x), y) / len(micro_batches)).backward()
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return norm

def clipped_each(model, loss_fn, micro_batches, optimizer, max_norm):
    optimizer.zero_grad(set_to_none=True)
    for x, y in micro_batches:
        (loss_fn(model(x), y) / len(micro_batches)).backward()
        norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return norm

for check, answer in [(lesson.check_clipped_step, clipped_step),
                      (lesson.check_clipped_step, clipped_after_step),
                      (lesson.check_accumulated_clipped_step, accumulated),
                      (lesson.check_accumulated_clipped_step, clipped_each)]:
    try:
        print("VERDICT", check(answer).status)
    except CheckFailed as exc:
        print("VERDICT", exc.status, exc.summary)
"""


def test_the_edition_self_checks_lesson_08s_steps_against_values_it_ships(edition):
    """08-clipped-step and 08-accum-clip have no reference in the edition: they compare with
    the steps `course release` computed with it (lessons/clipping/shipped_steps.py), values
    only; a wrong answer is still told its mistake (the replays ship)."""
    shipped = edition.out / "course_utils" / "lessons" / "clipping" / "shipped_steps.py"
    assert "def " not in shipped.read_text()
    run = _python(edition, SELF_CHECK_08)
    assert run.returncode == 0, run.stderr[-3000:]
    verdicts = [line for line in run.stdout.splitlines() if line.startswith("VERDICT")]
    assert verdicts[0] == "VERDICT passed", run.stdout[-3000:]
    assert verdicts[1].startswith("VERDICT failed") and "after optimizer.step()" in verdicts[1]
    assert verdicts[2] == "VERDICT passed", run.stdout[-3000:]
    assert verdicts[3].startswith("VERDICT failed") and "EVERY micro-batch" in verdicts[3]


def test_a_cell_that_runs_an_answer_must_be_a_demo():
    nb = _solution([code("x = lesson.reference_double(2)")])
    with pytest.raises(AuthoringError, match="is not tagged demo"):
        stopping_cells(nb, "toy.ipynb", {"reference_double"})
    nb.cells[0].metadata["tags"] = ["demo"]
    assert stopping_cells(nb, "toy.ipynb", {"reference_double"}) == [0]


def test_a_check_may_not_depend_on_a_cell_that_stops_in_the_learner_edition():
    cells = [
        code('fn = cu.checks.learner_or_reference(double, lesson.reference_double, "double")'),
        code("answer = fn(2)"),
        check_code("toy-check", 1, "lesson.check_it(answer)"),
    ]
    with pytest.raises(AuthoringError, match="reads `answer` \\(cell 1\\)"):
        stopping_cells(_solution(cells), "toy.ipynb", {"reference_double"})
    cells[2] = check_code("toy-check", 1, "lesson.check_it(double)")
    assert stopping_cells(_solution(cells), "toy.ipynb", {"reference_double"}) == [0, 1]


def test_a_release_that_fails_its_checks_writes_nothing(tmp_path):
    solutions = tmp_path / "solutions"
    solutions.mkdir()
    write(_solution([code("t = lesson.reference_time_step(step, sync)")]), solutions / "00_x.ipynb")
    with pytest.raises(AuthoringError, match="00_x.ipynb, cell 0: runs"):
        release(tmp_path / "edition", solutions)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["solutions"]


def test_course_release_passes_its_arguments(monkeypatch, tmp_path):
    seen = {}
    monkeypatch.setattr(
        "course_utils.release.release", lambda out, **kw: seen.update(out=out, **kw) or "done"
    )
    assert cli.main(["release", str(tmp_path / "x"), "--install-url", "git+https://e/l"]) == 0
    assert seen == {
        "out": tmp_path / "x",
        "solutions": Path("solutions"),
        "install_url": "git+https://e/l",
    }


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("name", RUN)
def test_every_learner_notebook_runs_top_to_bottom_in_the_learner_edition(name, edition, tmp_path):
    nb = read(edition.out / "notebooks" / f"{name}.ipynb")
    run = learner_run.run(
        nb, workdir=tmp_path, name=name, cell_timeout=600, PYTHONPATH=edition.pythonpath
    )
    assert not [f"cell {c.index} raised {c.error}" for c in run.errors]
    verdicts = {k: v for c in run.cells for k, v in c.verdicts.items()}
    assert verdicts and set(verdicts.values()) <= {NOT_ATTEMPTED, NOT_APPLICABLE}
    skipped = [
        i
        for i, cell in enumerate(nb.cells)
        if any(f"({SKIPPED}" in out.get("text", "") for out in cell.get("outputs", []))
    ]
    exercise = [i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("solution")]
    assert not [i for i in skipped if check_id_of(nb.cells[i]) or i in exercise]
    assert skipped or name not in RUN_IN_CI, "the notebooks run in CI exercise the skips"
