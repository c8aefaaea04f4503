"""Show the code that measures, in the notebook: a learner carries the method, not the helper."""

from __future__ import annotations

import inspect
from collections.abc import Callable


def show_source(*fns: Callable) -> None:
    """Display functions' source as one code block, so the learner reads what a headline
    number is made of (or what they will fix) without leaving the notebook."""
    from IPython.display import Markdown, display

    code = "\n\n".join(inspect.getsource(f).rstrip() for f in fns)
    display(Markdown(f"```python\n{code}\n```"))
