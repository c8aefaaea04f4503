"""What every lesson's check tests need: run a check that must not pass, and a stub answer."""

from __future__ import annotations

import pytest

from course_utils.errors import CheckFailed


def failure(check, *answers) -> CheckFailed:
    """The CheckFailed that `check(*answers)` raises (the test fails if it passes)."""
    with pytest.raises(CheckFailed) as info:
        check(*answers)
    return info.value


def fails(check, *answers) -> str:
    """The status of a check that must not pass: failed, error or not-attempted."""
    return failure(check, *answers).status


def status_of(check, *answers) -> str:
    """The status of a check, passing or not."""
    try:
        return check(*answers).status
    except CheckFailed as exc:
        return exc.status


def not_attempted(*args, **kwargs):
    """An exercise left as the learner copy has it."""
    raise NotImplementedError()


def cells_of(notebook: str, *cell_ids: str, **names) -> dict:
    """The names that the given cells of `solutions/<notebook>.ipynb` define, run in order in
    one namespace that starts with `names`: a test grades the code the notebook shows (a
    colleague's broken function), not a copy of it that could drift."""
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "solutions" / f"{notebook}.ipynb"
    cells = {c["id"]: "".join(c["source"]) for c in json.loads(path.read_text())["cells"]}
    namespace = dict(names)
    for cell_id in cell_ids:
        exec(compile(cells[cell_id], f"{notebook}:{cell_id}", "exec"), namespace)
    return namespace


def edition_attack(name: str, function: str, **names):
    """The function an attack of the edition's blind red team defines (its source, a constant
    of tests/redteam/test_edition_blind.py), defined here beside `names` (the notebook's, such
    as `lesson`): the same specimen in both tests."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent / "redteam" / "test_edition_blind.py"
    spec = importlib.util.spec_from_file_location("_edition_blind", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    space: dict = dict(names)
    exec(compile(getattr(module, name), f"<edition attack {name}>", "exec"), space)
    return space[function]
