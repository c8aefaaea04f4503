"""course_utils.authoring: learner notebooks made from solution notebooks, with solutions
stubbed, outputs cleared, nbgrader metadata set, the same bytes every time, and malformed
markers refused with the notebook and cell named."""

from __future__ import annotations

import nbformat
import pytest

from course_utils import authoring
from course_utils.authoring import (
    LEARNER_PIPELINE,
    REPOSITORY,
    assign,
    check_code,
    code,
    dumps,
    learner_copy,
    md,
    new_notebook,
    parameters_cell,
    read,
    setup_cell,
    write,
)
from course_utils.errors import AuthoringError, CourseError

NAME = "01_demo.ipynb"

SOLUTION_IN_FUNCTION = '''
def double(x):
    """Twice x."""
    ### BEGIN SOLUTION
    y = x + x
    return y
    ### END SOLUTION
'''

SOLUTION_AT_TOP_LEVEL = """
factor = 3
### BEGIN SOLUTION
result = factor * 2
### END SOLUTION
print(result)
"""

SOLUTION_IN_METHOD = """
class Scaler:
    def scale(self, x):
        if x is None:
            return None
        else:
            ### BEGIN SOLUTION
            return 2 * x
            ### END SOLUTION
"""


def demo_solution() -> nbformat.NotebookNode:
    """A small solution notebook: prose, parameters, setup, three solution cells, two checks."""
    nb = new_notebook(
        [
            md("# Demo lesson\n\nDoubling, measured."),
            parameters_cell(),
            setup_cell(None),
            code(SOLUTION_IN_FUNCTION),
            check_code("demo-double", 2, "check_double(double)"),
            code(SOLUTION_AT_TOP_LEVEL),
            code(SOLUTION_IN_METHOD),
            check_code("demo-scale", 1.5, "check_scale(Scaler)"),
        ],
        NAME,
    )
    # outputs and counts from a run, as a solution notebook has after `course report`
    nb.cells[3].outputs = [nbformat.v4.new_output("stream", text="ran\n")]
    nb.cells[3].execution_count = 4
    nb.cells[4].outputs = [
        nbformat.v4.new_output("execute_result", data={"text/plain": "1"}, execution_count=5)
    ]
    nb.cells[4].execution_count = 5
    nb.cells[4].metadata["execution"] = {"iopub.status.busy": "2024-01-01T00:00:00Z"}
    return nb


@pytest.fixture
def course(tmp_path):
    """A course folder with solutions/01_demo.ipynb and no notebooks/ yet."""
    (tmp_path / "solutions").mkdir()
    write(demo_solution(), tmp_path / "solutions" / NAME)
    return tmp_path


# --- the learner copy ---------------------------------------------------------------------------


def test_solution_regions_become_the_stub_at_the_begin_lines_indentation():
    learner = learner_copy(demo_solution(), NAME)
    assert learner.cells[3].source == (
        'def double(x):\n    """Twice x."""\n    # YOUR CODE HERE\n    raise NotImplementedError()'
    )
    assert learner.cells[5].source == (
        "factor = 3\n# YOUR CODE HERE\nraise NotImplementedError()\nprint(result)"
    )
    assert learner.cells[6].source.endswith(
        "        else:\n            # YOUR CODE HERE\n            raise NotImplementedError()"
    )


def test_learner_copy_has_no_solution_left():
    text = dumps(learner_copy(demo_solution(), NAME))
    for leaked in ("BEGIN SOLUTION", "END SOLUTION", "x + x", "factor * 2", "2 * x"):
        assert leaked not in text


def test_stubbed_code_still_compiles():
    for index, cell in enumerate(learner_copy(demo_solution(), NAME).cells):
        if cell.cell_type == "code":
            compile(cell.source, f"cell {index}", "exec")


def test_learner_copy_has_no_outputs_counts_or_run_metadata():
    learner = learner_copy(demo_solution(), NAME)
    for cell in learner.cells:
        if cell.cell_type == "code":
            assert cell.outputs == []
            assert cell.execution_count is None
        assert "execution" not in cell.metadata


def test_check_cells_carry_nbgrader_grade_metadata_and_are_unchanged():
    solution = demo_solution()
    learner = learner_copy(solution, NAME)
    for index, grade_id, points in ((4, "demo-double", 2), (7, "demo-scale", 1.5)):
        meta = learner.cells[index].metadata["nbgrader"]
        assert meta["grade"] is True and meta["locked"] is True and meta["solution"] is False
        assert meta["grade_id"] == grade_id and meta["points"] == points
        assert learner.cells[index].metadata["editable"] is False
        assert learner.cells[index].metadata["deletable"] is False
        assert learner.cells[index].source == solution.cells[index].source
        assert learner.cells[index].source.startswith(f"# [course-check] {grade_id} ")


def test_solution_cells_carry_nbgrader_solution_metadata():
    learner = learner_copy(demo_solution(), NAME)
    ids = set()
    for index in (3, 5, 6):
        meta = learner.cells[index].metadata["nbgrader"]
        assert meta["solution"] is True and meta["grade"] is False and meta["locked"] is False
        ids.add(meta["grade_id"])
    assert len(ids) == 3  # nbgrader needs a distinct id per cell


def test_other_cells_are_left_as_they_are():
    solution = demo_solution()
    learner = learner_copy(solution, NAME)
    for index in (0, 1, 2):
        assert learner.cells[index].source == solution.cells[index].source
        assert "nbgrader" not in learner.cells[index].metadata
    assert learner.cells[1].metadata["tags"] == ["parameters"]
    assert f"git+{REPOSITORY}" in learner.cells[2].source


def test_learner_copy_is_a_valid_notebook_and_leaves_the_solution_alone():
    solution = demo_solution()
    before = dumps(solution)
    learner = learner_copy(solution, NAME)
    nbformat.validate(learner)
    assert dumps(solution) == before
    assert [c.id for c in learner.cells] == [c.id for c in solution.cells]


def test_learner_copy_is_the_same_bytes_every_time():
    assert dumps(learner_copy(demo_solution(), NAME)) == dumps(learner_copy(demo_solution(), NAME))


def test_pipeline_validates_first_and_marks_solution_cells_before_stubbing_them():
    """Validation comes before any change; mark_cells must see the BEGIN markers that
    strip_solutions removes, or solution cells would lose their nbgrader metadata."""
    assert LEARNER_PIPELINE[0] is authoring.validate
    assert LEARNER_PIPELINE.index(authoring.mark_cells) < LEARNER_PIPELINE.index(
        authoring.strip_solutions
    )


# --- assign -------------------------------------------------------------------------------------


def test_assign_writes_learner_copies_and_then_has_nothing_to_do(course):
    assert assign(course / "solutions", course / "notebooks") == [NAME]
    written = course / "notebooks" / NAME
    assert written.read_text(encoding="utf-8") == dumps(
        learner_copy(read(course / "solutions" / NAME), NAME)
    )
    assert assign(course / "solutions", course / "notebooks") == []
    assert assign(course / "solutions", course / "notebooks", check=True) == []


def test_assign_twice_writes_the_same_bytes(course, tmp_path):
    assign(course / "solutions", tmp_path / "first")
    assign(course / "solutions", tmp_path / "second")
    assert (tmp_path / "first" / NAME).read_bytes() == (tmp_path / "second" / NAME).read_bytes()


def test_assign_check_lists_differences_and_writes_nothing(course):
    assert assign(course / "solutions", course / "notebooks", check=True) == [NAME]
    assert not (course / "notebooks").exists()

    assign(course / "solutions", course / "notebooks")
    edited = course / "notebooks" / NAME
    edited.write_text(
        edited.read_text(encoding="utf-8").replace("Doubling", "Tripling"), encoding="utf-8"
    )
    before = edited.read_bytes()
    assert assign(course / "solutions", course / "notebooks", check=True) == [NAME]
    assert edited.read_bytes() == before


def test_assign_reports_a_changed_solution(course):
    assign(course / "solutions", course / "notebooks")
    nb = read(course / "solutions" / NAME)
    nb.cells[0].source += "\n\nOne more sentence."
    write(nb, course / "solutions" / NAME)
    assert assign(course / "solutions", course / "notebooks", check=True) == [NAME]


def test_assign_check_reports_a_stale_notebook_and_assign_removes_it(course):
    assign(course / "solutions", course / "notebooks")
    stale = course / "notebooks" / "99_removed.ipynb"
    stale.write_text(dumps(new_notebook([md("old")], stale.name)), encoding="utf-8")
    assert assign(course / "solutions", course / "notebooks", check=True) == ["99_removed.ipynb"]
    assert stale.exists()
    assert assign(course / "solutions", course / "notebooks") == ["99_removed.ipynb"]
    assert not stale.exists()
    assert (course / "notebooks" / NAME).exists()


# --- malformed solutions fail loudly ------------------------------------------------------------


def notebook_with(cell) -> nbformat.NotebookNode:
    """A notebook whose cell 2 is the scenario under test."""
    return new_notebook([md("# Broken"), code("import math"), cell], "02_broken.ipynb")


def graded_cell_without_id():
    cell = code("check_f(f)")
    cell.metadata["nbgrader"] = {"grade": True, "locked": True, "points": 1}
    return cell


MALFORMED = {
    "unclosed BEGIN": (code("def f():\n    ### BEGIN SOLUTION\n    return 1"), "never closed"),
    "END without BEGIN": (code("def f():\n    return 1\n    ### END SOLUTION"), "without"),
    "nested BEGIN": (
        code(
            "### BEGIN SOLUTION\na = 1\n### BEGIN SOLUTION\nb = 2\n### END SOLUTION\n### END SOLUTION"
        ),
        "nested",
    ),
    "check cell without an id": (graded_cell_without_id(), "no grade_id"),
    "solution region in a check cell": (
        check_code("demo-f", 1, "### BEGIN SOLUTION\nx = 1\n### END SOLUTION\ncheck_f(f)"),
        "solution region",
    ),
    "invalid grade_id": (check_code("demo f!", 1, "check_f(f)"), "may hold only"),
    # Colab keeps only the comment marker: its id must be validated too, not cut to "demo"
    "invalid grade_id in the comment marker": (
        code("# [course-check] demo.f (1 points): locked\ncheck_f(f)"),
        "may hold only",
    ),
}


@pytest.mark.parametrize("scenario", list(MALFORMED))
def test_a_malformed_solution_raises_authoring_error_naming_notebook_and_cell(scenario):
    cell, reason = MALFORMED[scenario]
    with pytest.raises(AuthoringError) as info:
        learner_copy(notebook_with(cell), "02_broken.ipynb")
    error = info.value
    assert isinstance(error, CourseError)
    assert error.notebook == "02_broken.ipynb"
    assert error.cell_index == 2
    assert reason in error.reason
    assert str(error).startswith("02_broken.ipynb, cell 2: ")


def test_duplicate_check_ids_name_both_cells():
    nb = new_notebook(
        [
            check_code("demo-f", 1, "check_f(f)"),
            md("between"),
            check_code("demo-f", 2, "check_g(g)"),
        ],
        "03_twice.ipynb",
    )
    with pytest.raises(
        AuthoringError,
        match=r"03_twice\.ipynb, cell 2: duplicate check id 'demo-f' \(also cell 0\)",
    ):
        learner_copy(nb, "03_twice.ipynb")


def test_a_check_cell_marked_only_by_its_comment_line_is_found():
    """Colab drops cell metadata; the comment marker still identifies the check."""
    cell = code(authoring.check_marker_line("demo-colab", 2) + "\ncheck_f(f)")
    learner = learner_copy(new_notebook([cell], "04_colab.ipynb"), "04_colab.ipynb")
    meta = learner.cells[0].metadata["nbgrader"]
    assert meta["grade"] is True and meta["grade_id"] == "demo-colab"


def test_assign_names_the_malformed_solution_file(course):
    write(notebook_with(MALFORMED["nested BEGIN"][0]), course / "solutions" / "02_broken.ipynb")
    with pytest.raises(AuthoringError, match=r"02_broken\.ipynb, cell 2"):
        assign(course / "solutions", course / "notebooks", check=True)
