"""What the judge takes on trust: the README's table of the checks whose verdict rests in part
on readings the kernel's own instruments take beside the learner's code (`@check(...,
in_kernel=...)`); every other part is computed or timed by the judge itself.

`python -m course_utils.grading.trust` prints the table; tests/test_trust.py keeps the
README's copy (between BEGIN and END) equal to it.
"""

from __future__ import annotations

import importlib
import pkgutil

BEGIN = "<!-- in-kernel readings: python -m course_utils.grading.trust -->"
END = "<!-- end of in-kernel readings -->"


def in_kernel_table() -> str:
    """The Markdown table, one row per check that declares in-kernel readings, by id."""
    import course_utils.lessons as lessons

    from ..checks import REGISTRY

    for module in pkgutil.iter_modules(lessons.__path__):
        importlib.import_module(f"course_utils.lessons.{module.name}")
    rows = [
        f"| {check_id} | {run.in_kernel} |"
        for check_id, run in sorted(REGISTRY.items())
        if getattr(run, "in_kernel", "") and check_id[:2].isdigit()
    ]
    return "\n".join(
        [BEGIN, "| check | what the judge takes from the kernel's own instruments |", "|---|---|"]
        + rows
        + [END]
    )


if __name__ == "__main__":
    print(in_kernel_table())
