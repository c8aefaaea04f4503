"""No exercise's answer is shown above its check (docs/authoring.md, "Hints: tiers, the code
last"; issue 34): a learner copy may show the source of the code a check compares with, by
`cu.show_source(...)` or `inspect.getsource(...)`, only below that check's cell.

What a check compares with: its reference answer (what its lesson's `selftest.answers()` hands
the check: read from the source, nothing is called), the harness functions its lesson lists in
`ANSWERS_ELSEWHERE` (an answer under another name) that live in a module the check's module
or its reference draws on, and the public functions and classes the
module of the check's body defines or imports from its lesson package (what it computes the
expected value with), probes and checks aside. A colleague's faulty code (`colleague_*`,
`Colleague*`), shown for an exercise to diagnose, is none of these. An answer the harness keeps under another name is seen only
where its lesson lists it in `ANSWERS_ELSEWHERE`.

Nor may a cell above a check run the answer itself (call it, or hand it to a demo such as
`cu.checks.learner_or_reference`): its printout is the answer's result (issue 34: lesson 00
printed the reference timer's reading beside "what exercise 1 asks you to write"). Here the
answer is the reference and `ANSWERS_ELSEWHERE` only: the lesson's workloads, which the checks
also use, may run anywhere.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

from course_utils.authoring import check_cells, read
from course_utils.checks import REGISTRY
from course_utils.selftest.items import LESSONS

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
SHOWS = {"show_source", "getsource"}  # cu.show_source(f, ...), inspect.getsource(f)

# Notebooks that still show an answer above its check, each with what issue 34 says of it: a
# strict xfail, so the fix makes this test fail until the notebook leaves this list.
PENDING: dict[str, str] = {}


# What a check's answer is made of that the rules above cannot see from the code: a helper
# the expected value calls (12's mask, `allowed`, inside `naive_attention`: issue 34, notebook
# 12 cell 8) or the decisions the reference answer is built from (11's `tuned_recipe`, which
# notebook 11 cell 6 printed beside the baseline). Each counts as what its check compares with.
ALSO_ANSWERS: dict[str, tuple[str, ...]] = {
    "11-speedrun": ("course_utils.lessons.capstone.recipe:tuned_recipe",),
    "12-sdpa-attention": ("course_utils.lessons.transformers.attention:allowed",),
}


def _also_answers(check_id: str) -> dict[int, str]:
    found = {}
    for entry in ALSO_ANSWERS.get(check_id, ()):
        module_name, _, qualname = entry.partition(":")
        obj = importlib.import_module(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        found[id(_unwrap(obj))] = entry
    return found


def _unwrap(obj):
    obj = inspect.unwrap(obj) if callable(obj) else obj
    return getattr(obj, "__func__", obj)


def _package_of(check_id: str) -> str:
    prefix = check_id.split("-", 1)[0]
    return LESSONS[prefix][1] if prefix in LESSONS else prefix


def _lesson_modules(package: str) -> list:
    root = importlib.import_module(f"course_utils.lessons.{package}")
    names = [root.__name__]
    folder = Path(root.__file__).parent
    names += [
        f"{root.__name__}.{p.stem}" for p in sorted(folder.glob("*.py")) if p.stem != "__init__"
    ]
    return [importlib.import_module(n) for n in names]


def _selftest_answers(package: str, check_id: str) -> list:
    """The objects named in the entry of `check_id` in its lesson's `selftest.answers()`,
    read from the source (a lambda may write files when called: it is never called)."""
    try:
        module = importlib.import_module(f"course_utils.lessons.{package}.selftest")
    except ModuleNotFoundError:
        return []
    tree = ast.parse(inspect.getsource(module.answers))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Dict):
            continue
        for key, value in zip(node.keys, node.values, strict=True):
            if not (isinstance(key, ast.Constant) and key.value == check_id):
                continue
            for sub in ast.walk(value):
                if isinstance(sub, (ast.Name, ast.Attribute)):
                    try:
                        obj = eval(ast.unparse(sub), vars(module))
                    except Exception:
                        continue
                    if inspect.isfunction(obj) or inspect.isclass(obj):
                        found.append(obj)
    return found


def compared_with(check_id: str) -> dict[int, str]:
    """{id of the unwrapped object: its name} for what check `check_id` compares with."""
    package = _package_of(check_id)
    modules = _lesson_modules(package)
    prefix = f"course_utils.lessons.{package}"
    found = {}
    for obj in _selftest_answers(package, check_id):
        for part in inspect.getmro(obj) if inspect.isclass(obj) else (obj,):
            colleague = part.__name__.startswith(("colleague", "Colleague"))  # fixed by the answer
            if getattr(part, "__module__", "").startswith(prefix) and not colleague:
                found[id(_unwrap(part))] = f"{part.__module__}.{part.__qualname__}"
    body = _unwrap(REGISTRY[check_id])
    check_module = importlib.import_module(body.__module__)
    used = {check_module.__name__} | {  # the lesson modules the check's module draws on
        getattr(obj, "__name__", "") if inspect.ismodule(obj) else getattr(obj, "__module__", "")
        for obj in vars(check_module).values()
    }
    used |= {home.rsplit(".", 1)[0] for home in found.values()}  # the references' modules
    for entry in getattr(modules[0], "ANSWERS_ELSEWHERE", ()):
        module_name, _, qualname = entry.partition(":")
        if module_name not in used:
            continue  # another exercise's answer
        obj = importlib.import_module(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        found[id(_unwrap(obj))] = entry
    for name, obj in vars(check_module).items():
        home = getattr(obj, "__module__", "") or ""
        if (
            name.startswith(("_", "colleague", "Colleague"))  # a colleague's code is the question
            or not (inspect.isfunction(obj) or inspect.isclass(obj))
            or not home.startswith(prefix)
            or hasattr(obj, "probe_name")
            or any(_unwrap(r) is _unwrap(obj) for r in REGISTRY.values())
        ):
            continue
        found[id(_unwrap(obj))] = f"{home}.{name}"
    found.update(_also_answers(check_id))
    return found


def _namespace(nb, package: str | None) -> dict:
    """What a notebook's names resolve to: `cu`, `lesson`, and what its cells import."""
    import course_utils

    space = {"cu": course_utils}
    if package:
        space["lesson"] = importlib.import_module(f"course_utils.lessons.{package}")
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)) and "course_utils" in ast.unparse(
                node
            ):
                try:
                    exec(compile(ast.Module([node], []), "<cell>", "exec"), space)
                except ImportError:
                    pass
    return space


def shown_sources(nb, space: dict) -> list[tuple[int, str, object]]:
    """(cell index, expression, object) for each argument of a show_source/getsource call."""
    shown = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            func = getattr(node, "func", None)
            name = getattr(func, "attr", None) or getattr(func, "id", None)
            if not isinstance(node, ast.Call) or name not in SHOWS:
                continue
            for arg in node.args:
                text = ast.unparse(arg)
                try:
                    obj = eval(compile(ast.Expression(arg), "<arg>", "eval"), dict(space))
                except Exception:
                    continue  # a name the notebook made itself: not the harness's answer
                shown.append((index, text, obj))
    return shown


def answers_shown_above_their_checks(path: Path) -> list[str]:
    nb = read(path)
    checks = check_cells(nb, path.stem)
    if not checks:
        return []
    package = _package_of(next(iter(checks)))
    for name in {_package_of(c) for c in checks}:
        importlib.import_module(f"course_utils.lessons.{name}")
    shown = shown_sources(nb, _namespace(nb, package))
    problems = []
    for check_id, (check_index, _) in checks.items():
        if check_id not in REGISTRY:
            continue  # a check cell without its check: tests/test_lessons.py says so
        answers = compared_with(check_id)
        for index, text, obj in shown:
            if index < check_index and id(_unwrap(obj)) in answers:
                problems.append(
                    f"{path.stem} cell {index} shows {text} ({answers[id(_unwrap(obj))]}), "
                    f"which {check_id} compares with, above its check (cell {check_index})"
                )
    return problems


@pytest.mark.parametrize(
    "path",
    [
        pytest.param(p, marks=pytest.mark.xfail(reason=PENDING[p.stem], strict=True))
        if p.stem in PENDING
        else p
        for p in NOTEBOOKS
    ],
    ids=[p.stem for p in NOTEBOOKS],
)
def test_no_learner_copy_shows_the_source_of_a_checks_answer_above_that_check(path):
    problems = answers_shown_above_their_checks(path)
    assert not problems, "\n".join(problems)


def test_the_rule_sees_a_reference_and_an_answer_elsewhere_shown_too_early(tmp_path):
    """Does the test fail a copy that shows a reference, or an ANSWERS_ELSEWHERE function,
    above the check that compares with it, and pass the same cell below the check?"""
    import copy

    from course_utils.authoring import code, write

    nb = read(ROOT / "notebooks" / "02b_large_batch.ipynb")
    checks = check_cells(nb, "02b_large_batch")
    first = checks["02b-lr-scaling"][0]
    for shown in ("lesson.reference_lr_schedule", "cu.show_source(lesson.lr_check.factor)"):
        call = shown if shown.startswith("cu.") else f"cu.show_source({shown})"
        early, late = copy.deepcopy(nb), copy.deepcopy(nb)
        early.cells.insert(first, code(call))
        late.cells.insert(first + 1, code(call))
        write(early, tmp_path / "02b_large_batch.ipynb")
        assert any(
            "02b-lr-scaling" in p
            for p in answers_shown_above_their_checks(tmp_path / "02b_large_batch.ipynb")
        )
        write(late, tmp_path / "02b_large_batch.ipynb")
        assert not answers_shown_above_their_checks(tmp_path / "02b_large_batch.ipynb")


def references_of(check_id: str) -> dict[int, str]:
    """{id of the unwrapped object: its name} for the answer itself: the reference the
    lesson's selftest hands the check, and those of the lesson's ANSWERS_ELSEWHERE that the
    check's body reads (the list is per lesson; an answer belongs to the check that uses it)."""
    package = _package_of(check_id)
    found = {
        id(_unwrap(obj)): f"{obj.__module__}.{obj.__qualname__}"
        for obj in _selftest_answers(package, check_id)
    }
    root = importlib.import_module(f"course_utils.lessons.{package}")
    body = _unwrap(REGISTRY[check_id])
    space = vars(importlib.import_module(body.__module__))
    used = {id(_unwrap(space[n])) for n in _global_names(body.__code__) if callable(space.get(n))}
    for entry in getattr(root, "ANSWERS_ELSEWHERE", ()):
        module_name, _, qualname = entry.partition(":")
        obj = importlib.import_module(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        if id(_unwrap(obj)) in used:
            found[id(_unwrap(obj))] = entry
    found.update(_also_answers(check_id))
    return found


def _global_names(code) -> set[str]:
    """The global names a function's code reads, its nested functions' included."""
    names = set(code.co_names)
    for const in code.co_consts:
        if inspect.iscode(const):
            names |= _global_names(const)
    return names


def mentioned(nb, space: dict) -> list[tuple[int, str, object]]:
    """(cell index, expression, object) for each name or attribute chain of a code cell that
    resolves to a harness object, outside show_source/getsource calls (the rule above)."""
    seen = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Name, ast.Attribute)):
                continue
            text = ast.unparse(node)
            try:
                obj = eval(compile(ast.Expression(node), "<name>", "eval"), dict(space))
            except Exception:
                continue
            if inspect.isfunction(obj) or inspect.isclass(obj) or callable(obj):
                seen.append((index, text, obj))
    return seen


def answers_run_above_their_checks(path: Path) -> list[str]:
    nb = read(path)
    checks = check_cells(nb, path.stem)
    if not checks:
        return []
    package = _package_of(next(iter(checks)))
    for name in {_package_of(c) for c in checks}:
        importlib.import_module(f"course_utils.lessons.{name}")
    used = mentioned(nb, _namespace(nb, package))
    problems = []
    for check_id, (check_index, _) in checks.items():
        answers = references_of(check_id)
        for index, text, obj in used:
            if index < check_index and id(_unwrap(obj)) in answers:
                problems.append(
                    f"{path.stem} cell {index} runs {text} ({answers[id(_unwrap(obj))]}), "
                    f"{check_id}'s answer, above its check (cell {check_index})"
                )
    return sorted(set(problems))


# the lessons this rule is checked on so far (issue 34, lessons 00-05, 02b, 08-10, 11 and 12);
# a lesson joins the list once its notebook is read against it
RUN_RULE_LESSONS = (
    "00_measuring",
    "01_one_cycle",
    "02_batch_size",
    "02b_large_batch",
    "03_data_loading",
    "04_mixed_precision",
    "05_fast_kernels",
    "08_gradient_clipping",
    "09_no_bias_before_bn",
    "10_habits",
    "11_capstone",
    "12_transformers",
)


@pytest.mark.parametrize("stem", RUN_RULE_LESSONS)
def test_no_learner_copy_runs_a_checks_answer_above_that_check(stem):
    problems = answers_run_above_their_checks(ROOT / "notebooks" / f"{stem}.ipynb")
    assert not problems, "\n".join(problems)


def test_the_run_rule_sees_a_reference_printed_above_its_check(tmp_path):
    """Does the rule fail a copy whose demo prints the reference timer's reading above
    00-step-timer (issue 34, lesson 00 cell 7), and pass the same cell below the check?"""
    import copy

    from course_utils.authoring import code, write

    nb = read(ROOT / "notebooks" / "00_measuring.ipynb")
    first = check_cells(nb, "00_measuring")["00-step-timer"][0]
    demo = code("print(lesson.reference_time_step(step, synchronize))", tags=("demo",))
    early, late = copy.deepcopy(nb), copy.deepcopy(nb)
    early.cells.insert(first, demo)
    late.cells.insert(first + 1, demo)
    write(early, tmp_path / "00_measuring.ipynb")
    assert any(
        "00-step-timer" in p
        for p in answers_run_above_their_checks(tmp_path / "00_measuring.ipynb")
    )
    write(late, tmp_path / "00_measuring.ipynb")
    assert not answers_run_above_their_checks(tmp_path / "00_measuring.ipynb")


@pytest.mark.parametrize(
    "stem, check_id, cell, rule",
    [  # issue 34's cases in lessons 11 and 12, each as it stood above its exercise
        (
            "12_transformers",
            "12-sdpa-attention",
            "cu.show_source(lesson.naive_attention, lesson.allowed)",
            "shows",
        ),
        ("12_transformers", "12-sdpa-attention", "cu.show_source(lesson.allowed)", "shows"),
        ("11_capstone", "11-speedrun", "print(lesson.tuned_recipe())", "runs"),
    ],
    ids=["12-formula-and-mask", "12-mask-alone", "11-tuned-recipe-printed"],
)
def test_the_rules_see_lesson_11_and_12s_answers_above_their_checks(
    tmp_path, stem, check_id, cell, rule
):
    """Notebook 12 cell 8 showed the formula and its exact mask above exercise 1, and notebook
    11 cell 6 printed the tuned recipe's choices above the speed-run: each is caught above
    its check and passes below it."""
    import copy

    from course_utils.authoring import code, write

    nb = read(ROOT / "notebooks" / f"{stem}.ipynb")
    first = check_cells(nb, stem)[check_id][0]
    find = answers_shown_above_their_checks if rule == "shows" else answers_run_above_their_checks
    early, late = copy.deepcopy(nb), copy.deepcopy(nb)
    early.cells.insert(first, code(cell, tags=("demo",)))
    late.cells.insert(first + 1, code(cell, tags=("demo",)))
    write(early, tmp_path / f"{stem}.ipynb")
    assert any(check_id in p for p in find(tmp_path / f"{stem}.ipynb"))
    write(late, tmp_path / f"{stem}.ipynb")
    assert not [p for p in find(tmp_path / f"{stem}.ipynb") if check_id in p]
