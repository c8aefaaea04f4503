"""`course grade --shard I/N` and `course grade merge`: three shards run as separate processes
(as a Slurm array, an Indexed Job or a CI matrix would) and merge to what serial grading gave;
a missing shard makes merge exit 1 naming its submissions, and rerunning it completes it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from grading_fixtures import CELL_TIMEOUT, TOY

from course_utils import cli
from course_utils.errors import UsageError
from course_utils.grading import shards

ROOT = Path(__file__).resolve().parents[1]
# one per shard of three, plus an unreadable one (no kernel) beside `solved` in shard 2
SUBSET = ("solved_tampered", "solved_wrong_square", "solved", "corrupt")

pytestmark = pytest.mark.timeout(600)


def _shard(subs: Path, out: Path, solutions: Path, spec: str) -> subprocess.Popen:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    cmd = [sys.executable, "-m", "course_utils", "grade", str(subs), "--out", str(out)]
    cmd += ["--solutions", str(solutions), "--timeout", str(CELL_TIMEOUT), "--shard", spec]
    return subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def _lines(data: bytes, names: set[str]) -> list[bytes]:
    header, *rows = data.splitlines(keepends=True)
    return [header] + [r for r in rows if r.split(b",", 1)[0].decode() in names]


def test_three_shards_merge_to_serial_grades_and_a_missing_shard_fails_the_merge(
    toy_graded, tmp_path, capsys
):
    subs = tmp_path / "subs"
    subs.mkdir()
    names = {f"{s}_{TOY}" for s in SUBSET}
    for name in names:
        shutil.copy(toy_graded["subs"] / name, subs / name)
    assert {shards.shard_of(n, list(names), 3) for n in names} == {0, 1, 2}
    out, sols = tmp_path / "grades", toy_graded["solutions"]
    first = [_shard(subs, out, sols, spec) for spec in ("1/3", "2/3")]
    for proc in first:
        assert proc.wait(timeout=400) == 0, proc.stdout.read()

    assert cli.main(["grade", "merge", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"solved_wrong_square_{TOY} (shard 0)" in err and f"corrupt_{TOY} (shard 0)" in err
    assert not (out / "grades.csv").exists()

    last = _shard(subs, out, sols, "0/3")
    assert last.wait(timeout=400) == 0, last.stdout.read()
    assert cli.main(["grade", "merge", str(out)]) == 0
    serial = toy_graded["files"]
    for csv_name in ("grades.csv", "summary.csv"):
        assert (out / csv_name).read_bytes().splitlines(keepends=True) == _lines(
            serial[csv_name], names
        )
    for name in names:
        feedback = f"feedback/{name.removesuffix('.ipynb')}.md"
        assert (out / feedback).read_bytes() == serial[feedback]


def test_shard_spec_is_checked():
    assert shards.parse("2/4") == (2, 4)
    for bad in ("4/4", "-1/2", "1", "a/b", "0/0"):
        with pytest.raises(UsageError):
            shards.parse(bad)


def test_shards_are_balanced_by_count_and_agree_whatever_order_a_job_lists_them():
    """18 submissions in 3 shards: 6 each (a name hash split them 10/5/3), and the same split
    from any listing order (every job sorts)."""
    names = [f"learner{i:02d}/08_gradient_clipping.ipynb" for i in range(18)]
    split = [shards.shard_of(n, names, 3) for n in names]
    assert [split.count(i) for i in range(3)] == [6, 6, 6]
    shuffled = names[::-1]
    assert [shards.shard_of(n, shuffled, 3) for n in names] == split
    five = [shards.shard_of(n, names[:5], 3) for n in names[:5]]
    assert sorted(five.count(i) for i in range(3)) == [1, 2, 2]


def test_merge_without_shards_is_a_usage_error(tmp_path, capsys):
    assert cli.main(["grade", "merge", str(tmp_path)]) == 2
    assert "nothing to merge" in capsys.readouterr().err


def test_merge_refuses_shards_graded_with_other_settings(tmp_path):
    import json

    for i, run in enumerate(("40|False", "40|True")):
        folder = tmp_path / "shards" / str(i)
        folder.mkdir(parents=True)
        manifest = {"index": i, "count": 2, "submissions": ["a.ipynb"], "solutions": "x"}
        (folder / shards.MANIFEST).write_text(json.dumps({**manifest, "run": run}))
    with pytest.raises(UsageError, match="shard 1 was graded with another run"):
        shards.merge(tmp_path)
