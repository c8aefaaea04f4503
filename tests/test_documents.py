"""The glossary and the committed reference results reach a learner who has the package only:
a built wheel ships them (setup.py), and course_utils finds them with or without a repository
beside it. The repository's docs/ stays the one source."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import nbformat
import pytest

from course_utils import documents, references

ROOT = Path(__file__).resolve().parents[1]
LESSON = ROOT / "solutions" / "00_measuring.ipynb"


def test_from_the_repository_the_documents_are_read_from_docs_itself():
    assert not documents.PACKAGED.exists()  # the build's copy is never made in the checkout
    assert documents.docs_dir() == ROOT / "docs" and references.RESULTS == ROOT / "docs" / "results"


def test_the_wheels_copy_is_preferred_where_there_is_one(monkeypatch, tmp_path):
    (tmp_path / "results").mkdir()
    monkeypatch.setattr(documents, "PACKAGED", tmp_path)
    assert documents.results_dir() == tmp_path / "results"


def test_a_glossary_term_is_its_anchored_paragraph():
    entry = documents.glossary_entry("all-reduce")
    assert entry.startswith("**all-reduce**: a collective") and "<a id=" not in entry
    assert documents.glossary_entry("All reduce") == entry
    assert documents.glossary_entry("no-such-term") is None


def test_the_glossary_is_shown_whole_or_by_term(monkeypatch):
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda m: shown.append(m.data))
    documents.glossary()
    documents.glossary("no-such-term")
    assert shown[0].startswith("# Glossary and device classes")
    assert "`no-such-term` is not in the glossary" in shown[1]


# --- the wheel, installed where there is no repository -------------------------------------------


def _working_tree(dest: Path) -> Path:
    """The files a clone of this working tree would hold (tracked and new, not ignored), as
    `pip install git+URL` sees them."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.split("\0")  # fmt: skip
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    return dest


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs this repository's git checkout")
    source = _working_tree(tmp_path_factory.mktemp("clone"))
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation",
         "-q", "-w", str(dist)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    [built] = dist.glob("faster_pytorch_training-*.whl")
    return built


def test_the_wheel_ships_the_glossary_and_every_committed_result(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    results = {
        f"course_utils/_docs/results/{p.name}" for p in (ROOT / "docs/results").glob("*.json")
    }
    assert "course_utils/_docs/glossary.md" in names and results <= names
    assert not [n for n in names if n.startswith("docs/")]  # nothing outside the package


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    """A fresh virtual environment holding the wheel; torch and Jupyter come from this one's
    site-packages (a .pth line), where course_utils is not: it is only in the new one."""
    root = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    Path(site, "borrowed.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [python, "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return root


RUN = textwrap.dedent(
    """
    import json, sys
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(sys.argv[1], as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3").execute(cwd=sys.argv[2])
    nbformat.write(nb, sys.argv[1])
    """
)


def test_the_installed_wheel_shows_the_reference_results_and_the_glossary_without_a_repository(
    venv, tmp_path
):
    lesson = nbformat.read(LESSON, as_version=4)
    code = [c.source for c in lesson.cells if c.cell_type == "code"]
    setup = next(s for s in code if "cu.setup(" in s)
    call = next(s for s in code if 'cu.reference_results("00_measuring"' in s)
    committed = references.reference_rows("00_measuring")
    assert committed, "docs/results holds no run of 00_measuring"
    other = "a-class-no-run-has"  # so every committed run shows, whatever this device's class
    assert "exclude_class=cu.device_class()" in call
    cells = [
        "quick = True  # as papermill's injected parameters",
        setup,
        call.replace("exclude_class=cu.device_class()", f"exclude_class={other!r}"),
        'cu.glossary("all-reduce")',
        "import course_utils.documents as d\nprint(cu.__file__, d.docs_dir())",
    ]
    path = tmp_path / "lesson.ipynb"
    nbformat.write(
        nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells]), path
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "COURSE_QUICK")}
    subprocess.run(
        [venv / "bin" / "python", "-c", RUN, path, tmp_path],
        cwd=tmp_path, env=env, check=True, timeout=600,
    )  # fmt: skip
    ran = nbformat.read(path, as_version=4)
    table, glossary = (
        next(o.data["text/markdown"] for o in ran.cells[i].outputs if "data" in o) for i in (2, 3)
    )
    for row in committed:
        assert f"| {row.device_name} (`{row.device_class}`) |" in table
        assert f"| {row.what} | {row.figure} |" in table
    assert glossary.startswith("**all-reduce**")
    where = ran.cells[4].outputs[0].text.split()
    assert where[0].startswith(str(venv)) and where[1].startswith(str(venv))  # not the repository
    assert where[1].endswith("course_utils/_docs")
