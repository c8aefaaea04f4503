"""The harness's progress bars show no `TqdmWarning: IProgress not found` and leave no pink
(stderr) strip in a notebook, with or without ipywidgets; in a terminal they are tqdm's own."""

from __future__ import annotations

import sys
import warnings

import nbformat
import pytest
from tqdm import std

from course_utils import progress

pytest.importorskip("IPython")


class Shown:
    """Stands in for IPython's display: what each display shows now, by id."""

    def __init__(self) -> None:
        self.now: dict[int, str] = {}

    def display(self, obj, raw=False, display_id=None):
        key = len(self.now)
        self.now[key] = obj["text/plain"]
        shown = self

        class Handle:
            def update(self, obj, raw=False):
                shown.now[key] = obj["text/plain"]

        return Handle()


@pytest.fixture
def widgetless_kernel(monkeypatch) -> Shown:
    shown = Shown()
    monkeypatch.setattr(progress, "in_kernel", lambda: True)
    monkeypatch.setattr(progress, "has_widgets", lambda: False)
    monkeypatch.setattr("IPython.display.display", shown.display)
    return shown


def test_in_a_terminal_the_bar_is_tqdms_own_on_stderr():
    assert progress.bar_class() is std.tqdm


def test_without_widgets_a_bar_draws_in_one_display_and_a_cleared_bar_leaves_it_empty(
    widgetless_kernel, capsys
):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no TqdmWarning
        for _ in progress.tqdm(range(3), desc="cleared", leave=False, mininterval=0):
            pass
        for _ in progress.trange(3, desc="kept", mininterval=0):
            pass
    assert capsys.readouterr() == ("", "")  # nothing on stderr: no pink strip
    cleared, kept = widgetless_kernel.now.values()
    assert cleared == ""
    assert kept.startswith("kept: 100%") and "3/3 [" in kept


def test_install_hands_the_display_bar_to_tqdm_auto_without_its_warning(
    widgetless_kernel, monkeypatch
):
    for name in ("tqdm.auto", "tqdm.autonotebook"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        progress.install()
    from tqdm.auto import tqdm, trange

    try:
        assert tqdm is progress.DisplayBar and trange(2).total == 2
    finally:  # the next import of tqdm.auto builds it afresh
        for name in ("tqdm.auto", "tqdm.autonotebook"):
            sys.modules.pop(name, None)


NOTEBOOK_CELLS = [
    "import sys\nsys.modules['ipywidgets'] = None  # as in a kernel without ipywidgets",
    "import course_utils\nfrom course_utils.progress import tqdm\n"
    "for _ in tqdm(range(50), desc='harness', leave=False, mininterval=0): pass",
    "from tqdm.auto import tqdm  # as notebooks 01 and 11 do\n"
    "for _ in tqdm(range(50), desc='cell', mininterval=0): pass",
]


@pytest.mark.parametrize("widgets", [False, True], ids=["no-ipywidgets", "ipywidgets"])
def test_a_kernel_shows_no_warning_and_no_stderr_with_or_without_ipywidgets(tmp_path, widgets):
    from nbclient import NotebookClient

    cells = NOTEBOOK_CELLS[0 if not widgets else 1 :]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(nb, timeout=120, kernel_name="python3").execute(cwd=str(tmp_path))
    outputs = [out for cell in nb.cells for out in cell.outputs]
    assert not [o for o in outputs if o.get("name") == "stderr"], outputs
    texts = [o.get("data", {}).get("text/plain", "") for o in outputs]
    if not widgets:
        assert texts[0] == ""  # the harness's leave=False bar, emptied
        assert "cell: 100%" in texts[1] and "50/50" in texts[1]  # tqdm.auto, kept, finished
    else:  # tqdm's notebook widgets
        assert all("application/vnd.jupyter.widget-view+json" in o["data"] for o in outputs)
