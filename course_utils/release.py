"""`course release DIR`: the learner edition, the notebooks and a harness without the answers.

What learners get: the learner copies of every notebook (built from solutions/ as `course
assign` builds notebooks/, their Colab setup cell installing from `install_url`) and the
`course_utils` package without the instructor's tools (grading/, report, headlines, the
learner-path runner, this module, the lessons' selftests but those holding a notebook's run-time
COST, the solution scripts of lessons 06 and 13). In every copied module each top-level function
or class that is a reference answer becomes `name = withheld("name")`, a placeholder that raises
ReferenceWithheld: a check that needs it says "graded by your instructor", a demo that would run
it says why it stops and Run All goes on (course_utils.skipping). `course grade`, `selftest`,
`report` and the Gradescope export run in the instructor's copy and keep the references.

Before writing anything, every notebook is read for cells that will stop there, and a check or
an exercise cell that depends on one fails the release (AuthoringError), as does a cell that
is not a demo and runs a reference directly.
"""

from __future__ import annotations

import ast
import re
import shutil
import symtable
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .authoring import REPOSITORY, check_id_of, dumps, has_solution, learner_copy, read
from .errors import AuthoringError, UsageError
from .skipping import bound_names
from .withholding import PACKAGE, by_module, every_answer_elsewhere, withhold

LEFT_OUT = (  # relative to the package: instructor tools, and answers kept whole
    "grading",
    "report.py",
    "headlines.py",
    "learner_run.py",
    "release.py",
    "withholding.py",
    "lessons/distributed/reference_scripts.py",
    "lessons/fsdp/reference_scripts.py",
    "lessons/parallel/reference_scripts.py",
    "lessons/kernels/reference_kernels.py",
)
DEFAULT_INSTALL = f"git+{REPOSITORY}"  # what authoring.setup_cell installs: the full course
COURSE_REPOSITORY = REPOSITORY.split("github.com/")[1]  # "owner/name"
DEMO_TAG = "demo"
SHIPPED_DOCS = ("docs/glossary.md", "docs/results/*.json")  # as setup.py ships them
ELSEWHERE_WHY = (
    "it computes an exercise's answer under another name, so the learner edition leaves it out"
)


def shared_instruments(solutions: Path, elsewhere: dict[str, list[str]]) -> dict[str, list[str]]:
    """{"module:name": notebooks} of the answers under other names that another lesson's
    notebook measures with in a cell that is not a demo (`cu.activation_bytes`: lesson 00's
    answer, lessons 02 and 10's instrument). The edition keeps those; grading withholds them
    from the lesson they answer."""
    lesson_of = re.compile(r"from course_utils\.lessons import (\w+) as lesson")
    shared: dict[str, list[str]] = {}
    for path in sorted(solutions.glob("*.ipynb")):
        nb = read(path)
        own = {m for c in nb.cells if c.cell_type == "code" for m in lesson_of.findall(c.source)}
        entries = {e for lesson, es in elsewhere.items() if lesson not in own for e in es}
        names = {e.partition(":")[2]: e for e in entries}
        for cell in nb.cells:
            if cell.cell_type != "code" or DEMO_TAG in cell.metadata.get("tags", []):
                continue
            for name in _answers_used(cell.source, set(names), frozenset(names))[0]:
                shared.setdefault(names[name], []).append(path.name)
    return {e: sorted(set(nbs)) for e, nbs in shared.items()}


@dataclass
class ReleaseSummary:
    """What `release` wrote and left out."""

    out: Path
    notebooks: list[str]
    withheld: dict[str, list[str]] = field(default_factory=dict)  # module -> names
    left_out: list[str] = field(default_factory=list)
    stopping: dict[str, list[int]] = field(default_factory=dict)  # notebook -> cells that may stop
    install_url: str = DEFAULT_INSTALL
    shared: dict[str, list[str]] = field(
        default_factory=dict
    )  # kept: other lessons measure with it

    def __str__(self) -> str:
        names = sum(len(v) for v in self.withheld.values())
        lines = [
            f"wrote the learner edition to {self.out}: {len(self.notebooks)} notebooks, "
            f"course_utils with {names} reference answers withheld in {len(self.withheld)} "
            f"modules; left out: {', '.join(self.left_out)}",
            f"the Colab setup cells install: {self.install_url}",
        ]
        for entry, notebooks in self.shared.items():
            lines.append(
                f"kept {entry}: it answers an exercise, but {', '.join(notebooks)} measure with "
                "it outside a demo (graded copies of its own lesson still go without it)"
            )
        if self.install_url == DEFAULT_INSTALL:
            lines.append(
                "note: that is the full course, reference answers included; host this folder "
                "and pass its pip URL as --install-url"
            )
        elif edition_repository(self.install_url) is None:
            lines.append(
                "note: the Colab badges still open the full course's notebooks (they follow "
                "--install-url only when it is git+https://github.com/OWNER/NAME)"
            )
        else:
            lines.append(f"the Colab badges open github.com/{edition_repository(self.install_url)}")
        return "\n".join(lines)


# --- the package ----------------------------------------------------------------------------


def _left_out(rel: Path) -> bool:
    text = rel.as_posix()
    if any(text == x or text.startswith(x + "/") for x in LEFT_OUT):
        return True
    return rel.parts[0] == "lessons" and rel.name == "selftest.py"


def copy_package(
    out: Path, package: Path = PACKAGE, elsewhere: Mapping[str, set[str]] | None = None
) -> tuple[dict[str, list[str]], list[str]]:
    """Copy the harness to out/course_utils, answers withheld (the reference answers, and the
    `elsewhere` names by module); ({module: names}, left out)."""
    elsewhere = elsewhere or {}
    withheld: dict[str, list[str]] = {}
    left_out: set[str] = set()
    for path in sorted(package.rglob("*")):
        rel = path.relative_to(package)
        if "__pycache__" in rel.parts or path.is_dir():
            continue
        keeps_cost = rel.name == "selftest.py" and re.search(r"^COST\b", path.read_text(), re.M)
        if _left_out(rel) and not keeps_cost:  # the estimator reads a notebook's COST
            folder = len(rel.parts) > 1 and rel.parts[0] in LEFT_OUT
            left_out.add(f"{rel.parts[0]}/" if folder else rel.as_posix())
            continue
        target = out / "course_utils" / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if path.suffix != ".py":
            shutil.copyfile(path, target)
            continue
        module = ".".join(("course_utils", *rel.with_suffix("").parts))
        text, names = path.read_text(encoding="utf-8"), []
        if rel.parts[0] == "lessons":  # the answers live in the lesson packages
            text, names = withhold(text, module)
        if module.removesuffix(".__init__") in elsewhere:
            wanted = elsewhere[module.removesuffix(".__init__")]
            text, more = withhold(text, module, wanted.__contains__, ELSEWHERE_WHY)
            names += more
        if names:
            withheld[module] = names
        target.write_text(text, encoding="utf-8")
    return withheld, sorted(left_out)


# --- the notebooks ----------------------------------------------------------------------------

_LOR = "learner_or_reference"


def _python(source: str) -> str:
    """The cell as the kernel runs it: IPython magics become calls."""
    from IPython.core.inputtransformer2 import TransformerManager

    return TransformerManager().transform_cell(source)


def _reads(source: str) -> set[str]:
    """Globals a cell reads, its functions' bodies included (their parameters and locals not)."""
    try:
        table = symtable.symtable(_python(source), "<cell>", "exec")
    except SyntaxError:
        return set()
    reads, stack = set(), [table]
    while stack:
        t = stack.pop()
        reads |= {
            s.get_name()
            for s in t.get_symbols()
            if s.is_referenced() and (t is table or s.is_global())
        }
        stack += t.get_children()
    return reads


def _answers_used(
    source: str, answers: set[str], by_attribute: frozenset[str] = frozenset()
) -> tuple[set[str], set[str]]:
    """(answers a cell runs directly, answers it passes to learner_or_reference). Names in
    `by_attribute` (a harness helper's plain name, `evaluate`) count only as an attribute
    (`cu.evaluate`): the learner's own `evaluate` is not the harness's."""
    try:
        tree = ast.parse(_python(source))
    except SyntaxError:
        return set(), set()
    fallback: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _LOR in ast.unparse(node.func) and len(node.args) > 1:
            fallback.add(id(node.args[1]))
    direct, passed = set(), set()
    read = _reads(source) - bound_names(source)  # a bare name counts where the cell reads a
    # global it did not bind itself (the learner's own `factor` is not the harness's)
    for node in ast.walk(tree):
        name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", None)
        if isinstance(node, ast.Name) and (name not in read or name in by_attribute):
            continue
        if isinstance(node, ast.Attribute) and name in by_attribute and not _harness(node.value):
            continue  # `model.training` is not the capstone's `training`
        if name in answers and isinstance(node, ast.Attribute | ast.Name):
            (passed if id(node) in fallback else direct).add(name)
    return direct, passed


def _harness(owner: ast.expr) -> bool:
    """Whether `owner.name` reads the harness: `cu.`, `lesson.` or `course_utils.` ..."""
    text = ast.unparse(owner)
    return text in ("cu", "lesson") or text.split(".")[0] == "course_utils"


def stopping_cells(
    nb, name: str, answers: set[str], by_attribute: frozenset[str] = frozenset()
) -> list[int]:
    """Indices of the cells that may stop in the learner edition: those that run an answer or
    fall back on one, and those that read what such a cell binds. Raises AuthoringError for a
    cell that runs an answer without being a demo, and for a check or exercise among them."""
    stopping, names_from = [], {}  # name -> the stopping cell that binds it
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        direct, passed = _answers_used(cell.source, answers, by_attribute)
        needs = sorted((_reads(cell.source) - bound_names(cell.source)) & set(names_from))
        if direct and DEMO_TAG not in cell.metadata.get("tags", []):
            raise AuthoringError(
                name, i, f"runs {sorted(direct)} and is not tagged demo: the learner edition "
                "has no reference answers (make it a demo no check depends on, or use "
                "cu.checks.learner_or_reference)"
            )  # fmt: skip
        if not (direct or passed or needs):
            continue
        if check_id_of(cell) or has_solution(cell):
            why = ", ".join(f"`{n}` (cell {names_from[n]})" for n in needs) or sorted(direct)
            raise AuthoringError(
                name, i, f"a check or exercise cell reads {why}, from a cell that stops in the "
                "learner edition, which has no reference answers"
            )  # fmt: skip
        stopping.append(i)
        names_from.update(dict.fromkeys(bound_names(cell.source), i))
    return stopping


def edition_repository(install_url: str) -> str | None:
    """ "owner/name" of the GitHub repository `install_url` installs the edition from, whose
    notebooks the Colab badges then open; None for the full course or another host."""
    found = re.fullmatch(
        r"git\+https://github\.com/([^/@]+/[^/@]+?)(?:\.git)?(?:@.*)?", install_url
    )
    edition = found[1] if found else None
    return None if edition == COURSE_REPOSITORY else edition


def _colab(repository: str) -> str:
    return f"colab.research.google.com/github/{repository}/blob/main/notebooks/"


def learner_notebooks(
    solutions: Path, answers: set[str], install_url: str, by_attribute: frozenset[str] = frozenset()
) -> tuple[dict[str, str], dict[str, list[int]]]:
    """{name: notebook text} of every learner copy, checked; and the cells that may stop."""
    texts, stopping = {}, {}
    for path in sorted(solutions.glob("*.ipynb")):
        solution = read(path)
        stopping[path.name] = stopping_cells(solution, path.name, answers, by_attribute)
        nb = learner_copy(solution, path.name)
        setup = [c for c in nb.cells if c.cell_type == "code" and DEFAULT_INSTALL in c.source]
        if not setup:
            raise AuthoringError(path.name, None, f"no setup cell installs {DEFAULT_INSTALL}")
        for cell in setup:
            cell.source = cell.source.replace(DEFAULT_INSTALL, install_url)
        text = dumps(nb)
        if (edition := edition_repository(install_url)) is not None:
            text = text.replace(_colab(COURSE_REPOSITORY), _colab(edition))
        texts[path.name] = text
    if not texts:
        raise UsageError(f"no solution notebooks in {solutions}")
    return texts, stopping


README = """# Faster PyTorch Training: learner edition

The course's notebooks and its measuring harness (`course_utils`), without the reference
answers: you write every exercise yourself.

```bash
pip install -e ".[lab]"          # then: jupyter lab notebooks/
```

Work top to bottom; run each check cell below its exercise. Run All on a notebook you have not
started runs every cell. In this edition:

- a self-check that compares your answer with the lesson's reference answer says *graded by
  your instructor* (not-applicable) instead of a verdict: your instructor's grader runs it;
- a demo that needs an answer you have not written (or one whose check is graded by your
  instructor) says so in one line and is skipped; so are the demos that use its results. Run it
  again once your answer's check has passed.
"""


def release(
    out: Path, solutions: Path = Path("solutions"), install_url: str = DEFAULT_INSTALL
) -> ReleaseSummary:
    """Write the learner edition to `out` (which must not exist, or be empty); nothing is
    written there if a notebook fails its checks."""
    out, solutions = Path(out), Path(solutions)
    if out.exists() and any(out.iterdir()):
        raise UsageError(f"{out} is not empty: release writes a fresh folder")
    if not solutions.is_dir():
        raise UsageError(f"no solutions folder at {solutions}")
    staging = out.with_name(out.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        summary = _write(staging, solutions, install_url)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if out.exists():
        out.rmdir()
    staging.rename(out)
    summary.out = out
    return summary


def _write(staging: Path, solutions: Path, install_url: str) -> ReleaseSummary:
    elsewhere = every_answer_elsewhere()
    shared = shared_instruments(solutions, elsewhere)
    entries = {e for es in elsewhere.values() for e in es} - set(shared)
    withheld, left_out = copy_package(staging, elsewhere=by_module(entries))
    answers = {n for names in withheld.values() for n in names}
    helpers = frozenset(e.partition(":")[2] for e in entries)
    texts, stopping = learner_notebooks(solutions, answers, install_url, helpers)
    (staging / "notebooks").mkdir()
    for name, text in texts.items():
        (staging / "notebooks" / name).write_text(text, encoding="utf-8")
    root = PACKAGE.parent
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "LICENSE", *SHIPPED_DOCS):
        for path in sorted(root.glob(name)):  # the wheel's documents: notebooks link to them
            target = staging / path.relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
    _ship_expected_values(staging / PACKAGE.name)
    (staging / "environment.yml").write_text(learner_environment(), encoding="utf-8")
    (staging / "README.md").write_text(README, encoding="utf-8")
    summary = ReleaseSummary(staging, sorted(texts), withheld, left_out, stopping, install_url)
    summary.shared = shared
    return summary


def _ship_expected_values(package: Path) -> None:
    """Values a self-check compares with where its reference is withheld (no code): 08's
    clipped and accumulated steps on the notebook's specimens (lessons/clipping/expected.py)."""
    from .lessons.clipping import expected

    expected.write_shipped(package)


def learner_environment(pyproject: Path = PACKAGE.parent / "pyproject.toml") -> str:
    """environment.yml for a learner: the run-time dependencies, the self-check and
    JupyterLab (`.[lab]`), none of the instructor's tools."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    extras = project["optional-dependencies"]
    wanted = [*project["dependencies"], *extras["check"], *extras["lab"]]
    pins = [d for d in dict.fromkeys(wanted) if not d.startswith(project["name"])]
    lines = [
        "# conda env create -f environment.yml && conda activate faster-pytorch-training",
        "# The learner edition's dependencies: pyproject.toml's run-time ones and its [lab] extra.",
        "name: faster-pytorch-training",
        "channels:",
        "  - conda-forge",
        "dependencies:",
        f"  - python{project['requires-python']}",
        "  - pip",
        "  - pip:",
        *(f"      - {d}" for d in pins),
        "      - -e .",
    ]
    return "\n".join(lines) + "\n"
