"""Progress bars that show no warning and leave no pink strip, wherever a lesson runs.

`tqdm.auto` in a Jupyter kernel without ipywidgets warns `TqdmWarning: IProgress not found` and
falls back to a text bar on stderr, which Jupyter paints pink; a bar that clears itself
(leave=False) leaves a pink strip behind. The harness's bars choose instead:
- in a kernel with ipywidgets (the `[lab]` extra, Colab): tqdm's notebook widget;
- in a kernel without: a text bar in one display that is updated in place (not a stream, so not
  pink) and emptied when a leave=False bar closes;
- elsewhere (a terminal, `course report`, pytest): tqdm's text bar on stderr, as usual.
`install()`, which `import course_utils` calls in a kernel, points `tqdm.auto` at the same choice,
so a notebook cell or a module that imports `tqdm.auto` itself gets it too.
"""

from __future__ import annotations

import importlib
import sys
import warnings

from tqdm import std


def in_kernel() -> bool:
    """Running in a Jupyter kernel (what tqdm.autonotebook asks too)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and "IPKernelApp" in shell.config


def has_widgets() -> bool:
    """ipywidgets importable, as tqdm's notebook bar needs."""
    from tqdm import notebook

    return notebook.IProgress is not None


class _DisplayLine:
    """A file for tqdm that shows the last line written in one display, updated in place.

    tqdm writes "\\r" + the bar each time; on closing, "\\n" (leave=True: the last bar stays)
    or blanks and "\\r" (leave=False: the display is emptied)."""

    encoding = "utf-8"

    def __init__(self) -> None:
        self._handle = None
        self._shown: str | None = None

    def write(self, text: str) -> int:
        line = text.rsplit("\r", 1)[-1] if "\r" in text else None
        if line is not None and "\n" not in line:
            self._show(line.rstrip())
        return len(text)

    def _show(self, line: str) -> None:
        if line == self._shown:
            return
        from IPython.display import display

        self._shown = line
        if self._handle is None:
            if not line:
                return
            self._handle = display({"text/plain": line}, raw=True, display_id=True)
        else:
            self._handle.update({"text/plain": line}, raw=True)

    def flush(self) -> None:
        pass


class DisplayBar(std.tqdm):
    """tqdm's text bar, drawn in a display updated in place instead of on stderr."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("file", _DisplayLine())
        kwargs.setdefault("ncols", 80)  # a display has no terminal width to ask
        super().__init__(*args, **kwargs)


def bar_class() -> type[std.tqdm]:
    """The bar for where this runs: the notebook widget, the display bar, or the text bar."""
    if not in_kernel():
        return std.tqdm
    if has_widgets():
        from tqdm.notebook import tqdm as widget

        return widget
    return DisplayBar


def tqdm(*args, **kwargs) -> std.tqdm:
    """`tqdm.auto.tqdm`, without its warning or its pink strips (see the module's docstring)."""
    return bar_class()(*args, **kwargs)


def trange(*args, **kwargs) -> std.tqdm:
    return tqdm(range(*args), **kwargs)


def install() -> None:
    """In a kernel without ipywidgets, make `tqdm.auto` hand out the display bar, imported
    without its IProgress warning (it warns once, when first imported). `import course_utils`
    calls it, before a lesson or a cell imports `tqdm.auto`."""
    if not in_kernel() or has_widgets():
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", std.TqdmWarning)
        modules = [importlib.import_module(f"tqdm.{name}") for name in ("autonotebook", "auto")]
    for module in modules:
        module.tqdm, module.trange = DisplayBar, _display_trange


def _display_trange(*args, **kwargs) -> DisplayBar:
    return DisplayBar(range(*args), **kwargs)
