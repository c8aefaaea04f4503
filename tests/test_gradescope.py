"""course_utils.grading.gradescope and .autograder: the exported zip, unpacked into a temporary /autograder-shaped
folder and run by its own run_autograder (setup.sh skipped: this environment's Python runs
the zip's course/), on a solved, an untouched, a crashing and a garbage submission of 04 and
08 in quick mode. Each results.json must follow Gradescope's spec and score what `course
grade` scores for the same file in the same setting (speed not graded, as on Gradescope).
04's zip shows details after_published, 08's after_due_date (the default): each run checks
the visibility its zip was exported with.

setup.sh is checked without apt-get or pip: its pins, constraints.txt, and its index probe
(`setup.sh --probe-only`) against a refused port and a local HTTP server.

The eight autograder runs and one `course grade` of the same eight files run once per
session, side by side (two kernels at a time); the other tests start no kernel.
"""

from __future__ import annotations

import csv
import http.server
import json
import os
import platform
import re
import stat
import subprocess
import sys
import threading
import time
import zipfile
from importlib import metadata
from pathlib import Path

import nbformat
import pytest

from course_utils.authoring import check_id_of, code, read
from course_utils.cli import main
from course_utils.errors import UsageError
from course_utils.grading import autograder, grade, gradescope
from course_utils.grading.records import Graded, Row
from course_utils.mode import UNTIMED_PLATFORMS
from course_utils.protocol import FAILED

ROOT = Path(__file__).resolve().parents[1]
LESSONS = ("04_mixed_precision", "08_gradient_clipping")  # the two quickest with checks
KINDS = ("solved", "untouched", "crashing", "garbage")
# 04's untouched and garbage copies would repeat 08's (both say not-attempted / unreadable):
# left out to keep CI inside its 20 minutes; 04 keeps its solved (timed parts not-applicable
# on Gradescope) and crashing copies.
CASES = [(lesson, kind) for lesson in LESSONS for kind in KINDS]
CASES = [
    c
    for c in CASES
    if c not in {("04_mixed_precision", "untouched"), ("04_mixed_precision", "garbage")}
]
CRASH_AFTER_FIRST_CHECK = "08_gradient_clipping"  # 04 crashes before any cell: cheaper
# two of the four, so the eight runs check two without a run more (all four: test_details_*)
VISIBILITY = {"04_mixed_precision": "after_published", "08_gradient_clipping": "after_due_date"}
REFUSED = "http://127.0.0.1:9/"  # the discard port: nothing listens, so refused at once

pytestmark = pytest.mark.timeout(900)

# the fields of gradescope/autograder_samples docs/specs.md
TOP_FIELDS = {
    "score",
    "execution_time",
    "output",
    "output_format",
    "test_output_format",
    "test_name_format",
    "visibility",
    "stdout_visibility",
    "extra_data",
    "tests",
    "leaderboard",
}
TEST_FIELDS = {
    "score",
    "max_score",
    "status",
    "name",
    "name_format",
    "number",
    "output",
    "output_format",
    "tags",
    "visibility",
    "extra_data",
}
FORMATS = {"text", "html", "simple_format", "md", "ansi"}


def submission(lesson: str, kind: str) -> bytes:
    if kind == "garbage":
        return b"\x89PNG\r\n\x1a\n this is a picture, not a notebook"
    if kind == "untouched":
        return (ROOT / "notebooks" / f"{lesson}.ipynb").read_bytes()
    nb = read(ROOT / "solutions" / f"{lesson}.ipynb")
    if kind == "crashing":  # the kernel dies: in 08 after its first check, in 04 at once
        first = next(i for i, c in enumerate(nb.cells) if check_id_of(c))
        at = first + 1 if lesson == CRASH_AFTER_FIRST_CHECK else 0
        nb.cells.insert(at, code("import os\n\nos._exit(1)"))
    return nbformat.writes(nb).encode()


def autograder_root(folder: Path, zip_path: Path, upload: dict[str, bytes]) -> Path:
    """/autograder as Gradescope lays it out: source/ (the zip), submission/, metadata."""
    with zipfile.ZipFile(zip_path) as zf:
        zf.extractall(folder / "source")
        for info in zf.infolist():  # as unzip does; zipfile drops the modes
            (folder / "source" / info.filename).chmod(stat.S_IMODE(info.external_attr >> 16))
    (folder / "submission").mkdir()
    for name, data in upload.items():
        (folder / "submission" / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / "submission" / name).write_bytes(data)
    (folder / "submission_metadata.json").write_text(json.dumps({"id": 1, "users": []}))
    return folder


def run_autograder(root: Path, python: str = sys.executable) -> subprocess.CompletedProcess:
    """Gradescope's call: run_autograder in /autograder, with this environment's Python and
    the zip's own copy of the course on its path."""
    script = root / "source" / "run_autograder"
    env = {
        **os.environ,
        autograder.ROOT_ENV: str(root),
        autograder.PYTHON_ENV: python,
        "PYTHONPATH": str(root / "source" / "course"),
    }
    env.pop("COURSE_PLATFORM", None)  # run_autograder must set it itself
    return subprocess.run(
        [str(script)], cwd=root, env=env, capture_output=True, text=True, timeout=900
    )


def results_of(root: Path) -> dict:
    text = (root / "results" / "results.json").read_text(encoding="utf-8")
    return json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} is not valid JSON"))


@pytest.fixture(scope="session")
def zips(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("zips")
    return {
        lesson: gradescope.export(
            lesson[:2],
            out=out / f"{lesson}.zip",
            solutions=ROOT / "solutions",
            quick=True,
            visibility=VISIBILITY[lesson],
        ).path
        for lesson in LESSONS
    }


@pytest.fixture(scope="session")
def graded(tmp_path_factory, zips) -> dict:
    """{(lesson, kind): results.json} and {(lesson, kind): course grade's rows}."""
    base = tmp_path_factory.mktemp("graded")
    folder = base / "course-grade"
    folder.mkdir()
    roots = {}
    for lesson, kind in CASES:
        data = submission(lesson, kind)
        (folder / f"{kind}_{lesson}.ipynb").write_bytes(data)
        upload = {f"{kind} copy.ipynb": data}  # any file name
        roots[lesson, kind] = autograder_root(base / f"{kind}-{lesson}", zips[lesson], upload)

    failed: list[BaseException] = []

    def course_grade() -> None:
        try:
            grade([folder], out=base / "grades", solutions=ROOT / "solutions", quick=True)
        except BaseException as exc:  # seen by the fixture, not lost in the thread
            failed.append(exc)

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COURSE_PLATFORM", "gradescope")  # the setting run_autograder grades in
        beside = threading.Thread(target=course_grade)
        beside.start()
        runs = {case: run_autograder(root) for case, root in roots.items()}
        beside.join()
    if failed:
        raise failed[0]
    with open(base / "grades" / "grades.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return {
        "results": {case: results_of(root) for case, root in roots.items()},
        "runs": runs,
        "rows": {
            case: [r for r in rows if r["submission"] == f"{case[1]}_{case[0]}.ipynb"]
            for case in CASES
        },
    }


def scored(results: dict) -> list[dict]:
    """The tests that carry a check's points (not its details)."""
    return [t for t in results["tests"] if "details_of" not in t["extra_data"]]


def details(results: dict) -> dict[str, dict]:
    """{check: its details test}."""
    return {t["extra_data"]["details_of"]: t for t in results["tests"] if t not in scored(results)}


def assert_gradescope_results(data: dict) -> None:
    """The fields and types of docs/specs.md, and the choices this course makes."""
    assert set(data) <= TOP_FIELDS, set(data) - TOP_FIELDS
    number = (int, float)
    assert isinstance(data["score"], number) and not isinstance(data["score"], bool)
    assert isinstance(data["execution_time"], number) and data["execution_time"] >= 0
    assert isinstance(data["output"], str) and data["output"]
    assert data["output_format"] in FORMATS
    assert data["stdout_visibility"] == "hidden"
    assert isinstance(data["extra_data"], dict)
    assert isinstance(data["tests"], list)
    for t in data["tests"]:
        assert set(t) <= TEST_FIELDS, set(t) - TEST_FIELDS
        assert isinstance(t["name"], str) and t["name"]
        assert isinstance(t["score"], number) and isinstance(t["max_score"], number)
        assert 0 <= t["score"] <= t["max_score"] or t["max_score"] == t["score"] == 0
        assert t["status"] in {"passed", "failed"}
        assert isinstance(t["output"], str) and t["output"]
        assert t["output_format"] == "md"
        assert t["visibility"] in gradescope.VISIBILITIES
    for t in scored(data):
        assert {"value", "threshold", "device_class", "status"} <= set(t["extra_data"])
    for check, t in details(data).items():
        assert t["name"] == f"{check}: details" and t["max_score"] == 0
    assert data["score"] == pytest.approx(sum(t["score"] for t in data["tests"]))


# --- the zip ------------------------------------------------------------------------------


def test_the_zip_has_setup_sh_and_run_autograder_executable_at_its_root(zips):
    with zipfile.ZipFile(zips["08_gradient_clipping"]) as zf:
        infos = {i.filename: i for i in zf.infolist()}
    for script in ("setup.sh", "run_autograder"):
        assert script in infos, sorted(infos)[:10]
        assert stat.S_IMODE(infos[script].external_attr >> 16) & 0o111


def test_the_zip_ships_the_course_source_and_only_its_lessons_solution(zips):
    with zipfile.ZipFile(zips["08_gradient_clipping"]) as zf:
        names = set(zf.namelist())
        config = json.loads(zf.read("autograder.json"))
    assert {"course/pyproject.toml", "course/README.md"} <= names
    assert {
        "course/course_utils/grading/autograder.py",
        "course/course_utils/grading/submission.py",
    } <= names
    assert not any("__pycache__" in n for n in names)
    assert {n for n in names if n.startswith("solutions/")} == {
        "solutions/08_gradient_clipping.ipynb"
    }
    assert config["lesson"] == "08_gradient_clipping" and config["quick"] is True
    assert config["notebook_timeout"] < 40 * 60  # stops before Gradescope's cap
    assert config["grade_speed"] is False


def minor(name: str) -> str:
    """This environment's release of a package as setup.sh pins it: 2.14.1+cu130 -> 2.14.*."""
    return ".".join(metadata.version(name).split("+")[0].split(".")[:2]) + ".*"


def test_setup_sh_installs_the_exporters_torch_minor_then_the_course_under_constraints(zips):
    with zipfile.ZipFile(zips["04_mixed_precision"]) as zf:
        setup = zf.read("setup.sh").decode()
        run = zf.read("run_autograder").decode()
    assert f'"torch=={minor("torch")}" "torchvision=={minor("torchvision")}"' in setup
    assert "COURSE_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}" in setup
    assert '--index-url "$TORCH_INDEX" "torch==' in setup
    assert '-c constraints.txt "./course[tools]"' in setup
    assert "--timeout 10 --retries 1" in setup
    assert setup.index("\nprobe_indexes\n") < setup.index('"${PIP[@]}" install')
    py = ".".join(platform.python_version_tuple()[:2])
    assert f"PY=python{py} " in setup
    for script in (setup, run):
        assert script.startswith("#!/usr/bin/env bash\n")
        subprocess.run(["bash", "-n"], input=script, text=True, check=True)


def constraints_of(zip_path: Path) -> dict[str, str]:
    with zipfile.ZipFile(zip_path) as zf:
        text = zf.read("constraints.txt").decode()
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    return dict(line.split("==") for line in lines)


def test_constraints_txt_pins_the_exporters_tools_closure(zips):
    pins = constraints_of(zips["08_gradient_clipping"])
    assert pins["torch"] == minor("torch") and pins["torchvision"] == minor("torchvision")
    for name in ("nbclient", "nbformat", "ipykernel", "jupyter-client", "papermill", "numpy"):
        assert name in pins, sorted(pins)
    for name in ("jupyter-core", "pyzmq", "pytest", "nbval"):  # reached through the closure
        assert name in pins, sorted(pins)
    for name, version in pins.items():
        if name not in gradescope.TORCH_FAMILY:
            assert version == metadata.version(name).split("+")[0], name
    assert "faster-pytorch-training" not in pins  # the course comes from the zip itself


def test_autograder_json_records_the_exporters_versions(zips):
    with zipfile.ZipFile(zips["08_gradient_clipping"]) as zf:
        versions = json.loads(zf.read("autograder.json"))["versions"]
    assert versions["python"] == platform.python_version()
    assert versions["torch"] == metadata.version("torch")
    assert versions["torchvision"] == metadata.version("torchvision")
    pins = constraints_of(zips["08_gradient_clipping"])
    assert versions["pinned"] == {
        n: v for n, v in pins.items() if n not in ("torch", "torchvision")
    }


@pytest.fixture(scope="module")
def refused_zip(tmp_path_factory) -> Path:
    """A zip exported with a torch index nothing answers."""
    out = tmp_path_factory.mktemp("refused") / "ag.zip"
    return gradescope.export("08", out=out, solutions=ROOT / "solutions", torch_index=REFUSED).path


def probe(zip_path: Path, folder: Path, **env: str) -> tuple[subprocess.CompletedProcess, float]:
    """`setup.sh --probe-only` from the unpacked zip: what it prints and how long it took."""
    root = autograder_root(folder, zip_path, {})
    clean = {
        k: v for k, v in os.environ.items() if k not in ("COURSE_TORCH_INDEX", "PIP_INDEX_URL")
    }
    started = time.monotonic()
    done = subprocess.run(
        ["bash", str(root / "source" / "setup.sh"), "--probe-only"],
        env={**clean, autograder.ROOT_ENV: str(root), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done, time.monotonic() - started


def test_setup_sh_stops_within_seconds_naming_an_unreachable_torch_index(refused_zip, tmp_path):
    done, seconds = probe(refused_zip, tmp_path / "ag")
    assert done.returncode == 1 and seconds < 15, (done.returncode, seconds)
    assert f"cannot reach {REFUSED}torch/ within 10 s" in done.stderr, done.stderr
    assert "stopping before pip" in done.stderr and "COURSE_TORCH_INDEX" in done.stderr


@pytest.fixture
def index_server():
    """A local HTTP server answering 200 to every GET: a reachable index. Yields its URL and
    the paths asked."""
    asked: list[str] = []

    class Index(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            asked.append(self.path)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"<html></html>")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Index)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", asked
    server.shutdown()
    server.server_close()


def test_course_torch_index_overrides_the_exported_one(refused_zip, tmp_path, index_server):
    url, asked = index_server
    env = {"COURSE_TORCH_INDEX": f"{url}/mirror/", "PIP_INDEX_URL": f"{url}/pypi"}
    done, seconds = probe(refused_zip, tmp_path / "ag", **env)
    assert done.returncode == 0, done.stderr
    assert asked == ["/mirror/torch/", "/pypi/pip/"]  # the override, never the exported index
    assert f"{url}/mirror/torch/ answers" in done.stdout


def test_the_same_course_exports_the_same_bytes(tmp_path):
    paths = [
        gradescope.export("08", out=tmp_path / f"{i}.zip", solutions=ROOT / "solutions").path
        for i in range(2)
    ]
    assert paths[0].read_bytes() == paths[1].read_bytes()


def test_an_unknown_lesson_is_a_usage_error_naming_the_known_ones(tmp_path, capsys):
    with pytest.raises(UsageError, match="08_gradient_clipping"):
        gradescope.export("99", out=tmp_path / "x.zip", solutions=ROOT / "solutions")
    code = main(["export", "gradescope", "99", "--solutions", str(ROOT / "solutions")])
    assert code == 2 and "no solution notebook matches '99'" in capsys.readouterr().err


def test_course_export_gradescope_writes_the_zip_it_names(tmp_path, capsys):
    out = tmp_path / "ag.zip"
    argv = ["export", "gradescope", "08", "--quick", "--out", str(out)]
    assert main([*argv, "--solutions", str(ROOT / "solutions")]) == 0
    assert zipfile.is_zipfile(out) and str(out) in capsys.readouterr().out
    with zipfile.ZipFile(out) as zf:  # details after the due date unless asked otherwise
        assert json.loads(zf.read("autograder.json"))["visibility"] == "after_due_date"


@pytest.mark.parametrize("visibility", gradescope.VISIBILITIES)
def test_course_export_gradescope_records_each_visibility(tmp_path, visibility):
    out = tmp_path / "ag.zip"
    argv = ["export", "gradescope", "08", "--out", str(out), "--visibility", visibility]
    assert main([*argv, "--solutions", str(ROOT / "solutions")]) == 0
    with zipfile.ZipFile(out) as zf:
        assert json.loads(zf.read("autograder.json"))["visibility"] == visibility


def test_an_unknown_visibility_is_refused(tmp_path, capsys):
    with pytest.raises(UsageError, match="after_due_date"):
        gradescope.export("08", out=tmp_path / "x.zip", visibility="later")
    with pytest.raises(SystemExit):
        main(["export", "gradescope", "08", "--visibility", "later"])
    assert "invalid choice: 'later'" in capsys.readouterr().err


@pytest.mark.parametrize("visibility", gradescope.VISIBILITIES)
def test_details_carry_the_message_and_hint_at_the_visibility_scores_stay_visible(visibility):
    row = Row("s", "08", "08-x", FAILED, 0.0, 2.0, 1.0, 2.0, "cpu", "norm 1 above 0.5", "clip it")
    score, explained = autograder._tests(row, {}, visibility)
    assert score["visibility"] == "visible" and score["max_score"] == 2.0
    assert score["output"].startswith("Failed.")
    assert "clip it" not in score["output"] and "norm 1" not in score["output"]
    assert explained["visibility"] == visibility and explained["max_score"] == 0
    assert explained["name"] == "08-x: details"
    assert "norm 1 above 0.5" in explained["output"] and "*Hint:* clip it" in explained["output"]


# --- grading on the eight submissions -----------------------------------------------------


@pytest.mark.parametrize(("lesson", "kind"), CASES)
def test_every_results_json_follows_the_gradescope_spec(graded, lesson, kind):
    assert_gradescope_results(graded["results"][lesson, kind])


@pytest.mark.parametrize(("lesson", "kind"), CASES)
def test_each_score_equals_course_grades_for_the_same_file(graded, lesson, kind):
    results, rows = graded["results"][lesson, kind], graded["rows"][lesson, kind]
    assert rows, "course grade graded it"
    assert results["score"] == pytest.approx(sum(float(r["points"]) for r in rows))
    tests = {t["name"]: t for t in results["tests"]}
    for r in rows:
        if r["check"]:  # a notebook-level row (unreadable file) has no check
            assert tests[r["check"]]["score"] == pytest.approx(float(r["points"]))
            assert tests[r["check"]]["extra_data"]["status"] == r["status"]


def test_a_solved_notebook_earns_every_point_with_speed_shown_not_graded(graded):
    results = graded["results"]["04_mixed_precision", "solved"]
    assert results["score"] == sum(t["max_score"] for t in results["tests"]) > 0
    amp = next(t for t in results["tests"] if t["name"] == "04-amp-step")
    assert amp["status"] == "passed" and amp["score"] == amp["max_score"] > 0
    assert UNTIMED_PLATFORMS["gradescope"] in details(results)["04-amp-step"]["output"]
    assert "04-amp-step (speed)" in results["output"]
    assert all(
        t["status"] == "passed"
        for t in graded["results"]["08_gradient_clipping", "solved"]["tests"]
    )


def test_an_untouched_notebook_scores_nothing_and_says_not_attempted(graded):
    for lesson in {lesson for lesson, kind in CASES if kind == "untouched"}:
        results = graded["results"][lesson, "untouched"]
        assert results["score"] == 0
        assert {t["extra_data"]["status"] for t in results["tests"]} == {"not-attempted"}
        assert all("Not attempted yet" in t["output"] for t in results["tests"])  # both kinds


def test_a_dead_kernel_keeps_the_points_before_it_and_says_why_for_the_rest(graded):
    results = graded["results"][CRASH_AFTER_FIRST_CHECK, "crashing"]
    first, *rest = scored(results)
    assert first["status"] == "passed" and results["score"] == first["score"] > 0
    assert rest and all(t["extra_data"]["status"] == "missing" for t in rest)
    assert all("Did not run" in t["output"] for t in rest)
    assert all("kernel died" in details(results)[t["name"]]["output"] for t in rest)
    assert "did not finish" in results["output"]
    at_once = graded["results"]["04_mixed_precision", "crashing"]
    assert at_once["score"] == 0 and at_once["tests"]
    assert all("kernel died" in t["output"] for t in details(at_once).values())


def test_a_garbage_upload_scores_nothing_and_every_check_says_why(graded):
    results = graded["results"]["08_gradient_clipping", "garbage"]
    assert results["score"] == 0 and len(results["tests"]) == 4
    assert all("not a readable notebook" in t["output"] for t in results["tests"])
    assert "08_gradient_clipping.ipynb" in results["output"]


@pytest.mark.parametrize(("lesson", "kind"), CASES)
def test_scores_are_visible_and_details_come_at_the_exported_visibility(graded, lesson, kind):
    results = graded["results"][lesson, kind]
    assert results["extra_data"]["visibility"] == VISIBILITY[lesson]
    assert all(t["visibility"] == "visible" for t in scored(results))
    if kind == "garbage":  # not graded at all: why is about the upload, shown at once
        assert not details(results)
        return
    assert list(details(results)) == [t["name"] for t in scored(results)]
    assert all(t["visibility"] == VISIBILITY[lesson] for t in details(results).values())


def test_results_json_records_the_exporters_and_the_graders_versions(graded, zips):
    with zipfile.ZipFile(zips["08_gradient_clipping"]) as zf:
        exported = json.loads(zf.read("autograder.json"))["versions"]
    extra = graded["results"]["08_gradient_clipping", "solved"]["extra_data"]
    assert extra["exported_with"] == exported
    assert extra["graded_with"] == {
        "python": platform.python_version(),
        "torch": metadata.version("torch"),
        "torchvision": metadata.version("torchvision"),
    }


def test_run_autograder_exits_zero_and_leaves_stdout_for_the_instructor(graded):
    run = graded["runs"]["08_gradient_clipping", "solved"]
    assert run.returncode == 0, run.stderr[-2000:]
    assert "08-total-norm: 2/2 passed" in run.stdout


# --- failures that start no kernel --------------------------------------------------------


@pytest.fixture
def root(tmp_path, zips):
    return lambda upload: autograder_root(tmp_path / "ag", zips["08_gradient_clipping"], upload)


def test_no_notebook_uploaded_is_not_graded_and_lists_what_came(root):
    results = autograder.run(root({"notes.txt": b"hi"}))
    assert_gradescope_results(results)
    assert results["score"] == 0 and "received: notes.txt" in results["output"]


def test_several_notebooks_are_not_graded_and_named(root):
    nb = submission("08_gradient_clipping", "untouched")
    results = autograder.run(root({"a.ipynb": nb, "sub/b.ipynb": nb}))
    assert "2 notebooks (a.ipynb, sub/b.ipynb)" in results["output"]


def test_an_upload_refused_unrun_says_why_at_once_and_a_run_one_in_details(root, monkeypatch):
    """grade_submission's early returns (unreadable, another lesson's, forged) give every check
    one error and no executed notebook: that reason is about the upload, so it is not held back
    with the details; the same rows from a run are check messages, so they are."""
    ag = root({"hw.ipynb": submission("08_gradient_clipping", "untouched")})
    checks = gradescope.points_per_check(ROOT / "solutions" / "08_gradient_clipping.ipynb")
    rows = [
        Row("hw", "08_gradient_clipping", c, "error", 0.0, p, None, None, "cpu", "a copy of 04")
        for c, p in checks.items()
    ]
    for executed, held_back in ((None, False), (nbformat.v4.new_notebook(), True)):
        graded = Graded(rows, executed=executed)
        monkeypatch.setattr(autograder, "grade_submission", lambda *a, g=graded, **k: g)
        results = autograder.run(ag)
        assert_gradescope_results(results)
        assert bool(details(results)) is held_back
        assert ("a copy of 04" in results["output"]) is not held_back


def test_checkpoints_and_macos_copies_are_not_uploads(root):
    nb = submission("08_gradient_clipping", "untouched")
    ag = root({"hw.ipynb": nb, ".ipynb_checkpoints/hw.ipynb": nb, "__MACOSX/hw.ipynb": nb})
    assert autograder.find_uploads(ag / "submission") == [ag / "submission" / "hw.ipynb"]


def test_results_exist_before_grading_and_survive_a_grader_failure(root, monkeypatch):
    ag = root({"hw.ipynb": submission("08_gradient_clipping", "untouched")})
    seen = {}

    def broken(*args, **kwargs):
        seen.update(results_of(ag))  # what Gradescope would read if the run stopped here
        raise MemoryError("no room")

    monkeypatch.setattr(autograder, "grade_submission", broken)
    results = autograder.run(ag)
    assert "stopped before it finished" in seen["output"] and seen["score"] == 0
    assert "the grader failed (MemoryError: no room)" in results["output"]
    assert_gradescope_results(results_of(ag))


def test_a_broken_zip_still_writes_valid_results(root):
    ag = root({"hw.ipynb": b"{}"})
    (ag / "source" / gradescope.CONFIG).unlink()
    results = autograder.run(ag)
    assert "the autograder is broken" in results["output"] and results["tests"] == []
    assert_gradescope_results(results_of(ag))


def test_run_autograder_writes_a_fallback_when_python_cannot_start(root):
    ag = root({"hw.ipynb": b"{}"})
    run = run_autograder(ag, python=str(ag / "no-such-python"))
    assert run.returncode == 0
    results = results_of(ag)
    assert results["score"] == 0 and "could not start" in results["output"]


def test_non_finite_measurements_are_written_as_strict_json(tmp_path):
    path = tmp_path / "results.json"
    autograder.write_results({"tests": [{"extra_data": {"value": float("inf")}}]}, path)
    assert json.loads(path.read_text())["tests"][0]["extra_data"]["value"] == "inf"


def test_the_readme_names_every_notebook_whose_speed_gradescope_does_not_grade():
    """A notebook whose lesson checks a speed-up (at_least) or a time (timed=True)."""
    timed = set()
    for sol in sorted((ROOT / "solutions").glob("*.ipynb")):
        found = re.search(r"from course_utils\.lessons import (\w+)", sol.read_text())
        package = ROOT / "course_utils" / "lessons" / found[1]  # checks may live beside checks.py
        if any(re.search(r"\bat_least\(|timed=True", f.read_text()) for f in package.glob("*.py")):
            timed.add(sol.stem.split("_")[0])  # "02b" for 02b_large_batch
    section = (ROOT / "README.md").read_text().split("## Gradescope", 1)[1].split("\n## ")[0]
    text = " ".join(section.split())
    fully = re.search(r"Notebooks ([\w, ]+?) grade fully there", text)
    speed = re.search(r"For the speed parts of ([\w, ]+?), run `course grade`", text)
    assert fully and speed, text
    everything = {sol.stem.split("_")[0] for sol in (ROOT / "solutions").glob("*.ipynb")}
    prefix = r"\b\d\d[a-z]?\b"  # a notebook's prefix: 02, 02b
    assert set(re.findall(prefix, speed[1])) == timed
    assert set(re.findall(prefix, fully[1])) == everything - timed
