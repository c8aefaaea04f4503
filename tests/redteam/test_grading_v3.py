"""Grading v3 (issue 32): a blind red team's attacks on `course grade`, graded for real.

The attacks (grading_v3_attacks.py) were written from README.md and the learner copies of
notebooks 00 and 10 alone. Each test grades, in ONE batch through the `course grade` CLI
(README, "For instructors"), a blank learner copy, attacks and an honest solution, with
--quick, and asserts what a safe grader must do:

- every attack earns 0 points on every check (except a check in its `may_pass`, ruled not a
  hole by the lead: a03's 00-train-flops), and no check's max points shrink;
- the blank copy earns 0 with its check cells run, the honest solution full points on every
  check;
- nothing outside the grading work folders changed: the installed harness folder (bytecode
  included; a .pyc the import system wrote for the current source is no change), the venv's
  .pth/sitecustomize/usercustomize and a few packages' __pycache__, $HOME/.ipython, the
  --out folder's other files, the other submission files, /tmp, /dev/shm; no RT3V3-* marker
  file appeared anywhere the attacks aim at; no process of the batch is left running;
- no learner value bloats the instructor's files (a grades.csv message over 100 000
  characters, a feedback file over 1 MiB).

None of this can pass vacuously: every attack a tier names is in the batch; every notebook has
exactly one row per check, a summary row, an executed notebook and a feedback file; every attack
shows it ran (its `attack cells running` line) and that no target of it moved (no
AttributeError/ImportError/NameError/TypeError/KeyError in its own cells); asked for by name,
a missing grader or sandbox fails instead of skipping. Each batch prints what every notebook
earned, check by check, pass or fail, and keeps it in tmp_path/earned.md (and appended to
$COURSE_REDTEAM_REPORT when set).

Tiers (measured on the 2-core cpu-bf16 machine the red team used, shared with other jobs; see
tests/redteam/README.md, "Grading v3"):

- always (CI): test_default_tier_is_what_it_says (seconds: the tiers and every attack's
  cells, no grader);
- COURSE_REDTEAM=grading (and =all): the default tier, the 8 strongest lesson-00 attacks,
  serially, with the blank and honest copies of 00, `--quick --checks-only` (223 s in CI's
  clone on an otherwise idle 2-core machine; not in CI while a05 can still earn points,
  see DEFAULT_TIER_RUNS);
- COURSE_REDTEAM=all: every attack of 00 and 10 in one serial batch, `--quick` with demos
  (over an hour); the 10 strongest through `--dask local:2`; the same 10 and b07, b12 through
  each lesson's Gradescope autograder (`course export gradescope NN --quick`, then the zip's
  run_autograder with COURSE_AUTOGRADER_ROOT laid out like /autograder).

On a checkout that other people edit while the batch runs, set
COURSE_REDTEAM_SHARED_CHECKOUT=1: changed harness sources are then reported, and only those
that carry the red team's marker fail the test (bytecode and every other target still fail).
"""

from __future__ import annotations

import csv
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import grading_v3_attacks as rt  # noqa: E402

REPO = rt.REPO
PYTHON = sys.executable
ALL = os.environ.get("COURSE_REDTEAM") == "all"
SHARED_CHECKOUT = os.environ.get("COURSE_REDTEAM_SHARED_CHECKOUT") == "1"
MARKS = (b"RT3V3", b"rt3v3")

# the default tier: the 8 strongest lesson-00 attacks of the first run (those that earned
# points, or came closest), graded serially with the blank and the honest copy of 00
DEFAULT_TIER = (
    "a07_frame_read",
    "b11_encoded_exec",
    "a05_feedback_replay",
    "a06_closure_timer",
    "a03_helper_answers",
    "e05_judge_dos",
    "b05_fake_judge_socket",
    "b08_clock_patch",
)
# the 10 strongest for Dask: both lessons (b06 and a09 are lesson 10's)
CLUSTER_TIER = (
    "a07_frame_read",
    "b11_encoded_exec",
    "a05_feedback_replay",
    "a06_closure_timer",
    "a03_helper_answers",
    "e05_judge_dos",
    "c03_detached_survivor",
    "f03_gradescope_results",
    "b06_probe_hijack",
    "a09_memo_replay",
)
# Gradescope does not grade speed (COURSE_PLATFORM=gradescope): a correct but slow loop whose
# in-kernel counts are blinded (b12) and the instrument patch (b07) are strongest there
GRADESCOPE_TIER = CLUSTER_TIER + ("b12_env_platform", "b07_instrument_patch")
STALE_ERRORS = (
    "AttributeError",
    "ImportError",
    "ModuleNotFoundError",
    "NameError",
    "TypeError",
    "KeyError",
)
# what a safe grader writes for a submission: never a learner's value echoed without bound
MAX_MESSAGE = 100_000  # characters of one grades.csv message
MAX_FEEDBACK = 1 << 20  # bytes of one feedback file
TIMINGS: dict[str, float] = {}


def test_default_tier_is_what_it_says():
    """The tiers name existing attacks, once each; the default tier is 8 lesson-00 attacks that
    do not hang, and every attack builds from today's learner copy (its cell ids exist) and
    starts with the cell that proves it ran. Runs in seconds, with no grader: a renamed cell or
    a dropped attack fails here, not as a silent 0 in a batch."""
    for tier in (DEFAULT_TIER, CLUSTER_TIER, GRADESCOPE_TIER):
        assert len(set(tier)) == len(tier), tier
        assert set(tier) <= set(rt.BY_ID), set(tier) - set(rt.BY_ID)
    assert len(DEFAULT_TIER) == 8
    assert all(rt.BY_ID[i].lesson == "00" and not rt.BY_ID[i].slow for i in DEFAULT_TIER)
    assert set(CLUSTER_TIER) <= set(GRADESCOPE_TIER)
    assert len(CLUSTER_TIER) == 10 and {rt.BY_ID[i].lesson for i in CLUSTER_TIER} == {"00", "10"}
    ids = [a.id for a in rt.ATTACKS]
    assert len(ids) == len(set(ids)) >= 40
    # the attacks' own `strong` says the same: 2 in the Dask/Gradescope tiers, 1 default only
    assert {a.id: a.strong for a in rt.ATTACKS if a.strong} == {
        **{i: 1 for i in DEFAULT_TIER},
        **{i: 2 for i in CLUSTER_TIER},
    }
    for attack in rt.ATTACKS:
        nb = rt.edit(attack.lesson, attack.replace, dict(attack.add_after), attack.metadata)
        assert nb["cells"], attack.id
        for check in attack.may_pass:
            assert check in rt.CHECKS[attack.lesson], (attack.id, check)
        for source in [
            *attack.replace.values(),
            *(c for v in attack.add_after.values() for c in v),
        ]:
            compile(source, attack.id, "exec")
    # every attack's first cell prints the RAN line the batches look for
    assert rt.RAN in rt._say_cell("x")
    # a03 may pass 00-train-flops (notebook 00's hint 3 teaches cu.flops); nothing else may
    assert {a.id: set(a.may_pass) for a in rt.ATTACKS if a.may_pass} == {
        "a03_helper_answers": {"00-train-flops"}
    }


def _needs_sandbox() -> None:
    """Skip where the grader cannot run; but where the red team was asked for by name
    (COURSE_REDTEAM or COURSE_REDTEAM_SHARED_CHECKOUT set), a skip would be a vacuous pass:
    fail instead."""
    why = None
    if shutil.which("course") is None and not (Path(PYTHON).parent / "course").exists():
        why = "the course CLI is not installed"
    elif shutil.which("bwrap") is None and os.geteuid() != 0:
        why = "no bubblewrap and not root: the grader has no sandbox to run learners in"
    if why and (os.environ.get("COURSE_REDTEAM") or SHARED_CHECKOUT):
        pytest.fail(f"the red team was asked for, but {why}: nothing would be graded")
    if why:
        pytest.skip(why)


def _course() -> list[str]:
    exe = Path(PYTHON).parent / "course"
    return [str(exe)] if exe.exists() else ["course"]


# --- building a batch ---------------------------------------------------------------------------


def build_batch(folder: Path, ids, lessons) -> dict[str, str]:
    """Write the attacks `ids` and the blank and honest copies of `lessons` into `folder`;
    return {file name: role}, role one of 'attack:<id>', 'blank', 'honest'."""
    folder.mkdir(parents=True, exist_ok=True)
    roles = {}
    for attack_id in ids:
        roles[rt.build(rt.BY_ID[attack_id], folder).name] = f"attack:{attack_id}"
    for lesson in lessons:
        roles[rt.build_blank(lesson, folder).name] = "blank"
        roles[rt.build_honest(lesson, folder).name] = "honest"
    return roles


# --- what must not change -----------------------------------------------------------------------


def _sha(path: Path) -> str:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError as exc:
        return f"unreadable: {type(exc).__name__}"
    return h.hexdigest()


def _files(root: Path, *, skip=()):
    if not root.exists():
        return
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in skip]
        for name in filenames:
            if name not in skip:
                yield Path(dirpath) / name


def harness_dir() -> Path:
    """The installed harness folder, located as the README's `course_utils.__file__`."""
    out = subprocess.run(
        [PYTHON, "-c", "import course_utils; print(course_utils.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        cwd="/",
    )
    return Path(out.stdout.strip()).parent


def site_packages() -> Path:
    out = subprocess.run(
        [PYTHON, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip())


WATCHED_PACKAGES = ("papermill", "nbclient", "jupyter_client", "ipykernel", "IPython", "torch")


def snapshot(extra: dict[str, Path]) -> dict[str, dict[str, str]]:
    """{group: {path: sha256}} of everything an attack could reach if a sandbox failed."""
    snap: dict[str, dict[str, str]] = {}
    snap["harness"] = {str(p): _sha(p) for p in _files(harness_dir())}
    sp = site_packages()
    top = [p for p in sp.iterdir() if p.is_file()]
    snap["site-packages"] = {str(p): _sha(p) for p in top}
    for name in WATCHED_PACKAGES:
        for cache in (sp / name).glob("**/__pycache__") if (sp / name).exists() else ():
            if cache.parent == sp / name or cache.parent.parent == sp / name:
                snap["site-packages"].update({str(p): _sha(p) for p in cache.iterdir()})
    home_ipython = Path.home() / ".ipython"
    snap["home-ipython"] = {
        str(p): _sha(p) for p in _files(home_ipython) if not p.name.startswith("history.sqlite")
    }
    for group, root in extra.items():
        snap[group] = {str(p): _sha(p) for p in _files(root)}
    return snap


def marker_files() -> set[str]:
    """Files named RT3V3-* where the attacks aim, outside any grading work folder."""
    found = set()
    sp = site_packages()
    roots = [
        (REPO, 3),
        (REPO / ".venv", 1),
        (sp, 2),
        (Path.home(), 3),
        (Path("/tmp"), 2),
        (Path("/dev/shm"), 2),
        (Path("/var/tmp"), 2),
    ]
    for root, depth in roots:
        if not root.exists():
            continue
        depth0 = len(root.parts)
        for dirpath, dirnames, filenames in os.walk(root):
            here = Path(dirpath)
            # the grading work folders are the attacks' own: markers there are expected
            dirnames[:] = [
                d
                for d in dirnames
                if not d.startswith(("course-grade-", "course-kernel-harness-", "pytest-of-"))
                and d not in (".git", ".venv", "node_modules", "site-packages")
                and len(here.parts) - depth0 < depth
            ]
            for name in filenames + dirnames:
                if name.upper().startswith("RT3V3"):
                    found.add(str(here / name))
    return found


def _benign_pyc(path: str) -> bool:
    """A .pyc in a __pycache__ that cannot run anything but its source: one Python would
    never load (its timestamp or checked hash does not match the source: stale, as when
    someone edits the source in a shared checkout), or one whose code is what the current
    source compiles to. A planted .pyc is neither: it must match its source to be loaded,
    and then its code differs (an unchecked hash-based .pyc is always loaded: never benign
    unless its code is the source's)."""
    p = Path(path)
    if p.suffix != ".pyc" or p.parent.name != "__pycache__" or b"RT3V3" in p.name.upper().encode():
        return False
    try:
        data = p.read_bytes()
        source = p.parent.parent / (p.name.split(".")[0] + ".py")
        st = source.stat()
        text = source.read_bytes()
    except OSError:
        return False
    if data[:4] != importlib.util.MAGIC_NUMBER or len(data) < 16:
        return False
    flags = int.from_bytes(data[4:8], "little")
    if flags == 0:  # timestamp-based
        mtime = int.from_bytes(data[8:12], "little")
        size = int.from_bytes(data[12:16], "little")
        if (mtime, size) != (int(st.st_mtime) & 0xFFFFFFFF, st.st_size & 0xFFFFFFFF):
            return True  # stale: never loaded
    elif flags == 3 and data[8:16] != importlib.util.source_hash(text):
        return True  # checked hash that does not match: never loaded
    elif flags not in (1, 3):
        return False
    try:
        import marshal

        code = marshal.loads(data[16:])
        return code == compile(text, str(source), "exec", dont_inherit=True)
    except Exception:
        return False


def _carries_mark(path: str) -> bool:
    if any(m.decode() in path.upper() for m in MARKS[:1]):
        return True
    try:
        data = Path(path).read_bytes()
    except OSError:
        return False
    return any(m in data for m in MARKS)


def diff_snapshots(before, after, allowed_out: set[str]) -> list[str]:
    """What changed, as lines; empty when nothing an attack could have done changed."""
    problems, reported = [], []
    for group in before:
        b, a = before[group], after.get(group, {})
        for path in sorted(set(b) | set(a)):
            if b.get(path) == a.get(path):
                continue
            what = "new" if path not in b else "deleted" if path not in a else "changed"
            if group == "out" and path in allowed_out:
                continue
            if what != "deleted" and _benign_pyc(path):
                continue
            line = f"{group}: {what}: {path}"
            if (
                group == "harness"
                and SHARED_CHECKOUT
                and not path.endswith(".pyc")
                and not _carries_mark(path)
            ):
                reported.append(line)  # someone else's edit in a shared checkout
                continue
            problems.append(line)
    for line in reported:
        print(f"(shared checkout, not counted) {line}")
    return problems


def leftover_processes(batch: str, needles: list[str], watched=()) -> list[str]:
    """Processes the batch started that are still running: rt3v3 in argv, the batch's
    environment marker, a command line naming the batch's folders, or one the batch's watch
    saw start (`watched`: pids alive with the same start time)."""
    left = []
    for proc in Path("/proc").glob("[0-9]*"):
        if proc.name == str(os.getpid()):
            continue
        if proc.name in watched:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            left.append(f"{proc.name}: {cmd[:200]}")
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        try:
            env = (proc / "environ").read_bytes()
        except OSError:
            env = b""
        if (
            "rt3v3" in cmd.lower()
            or f"RT3V3_BATCH={batch}".encode() in env
            or any(n in cmd for n in needles)
        ):
            left.append(f"{proc.name}: {cmd[:200]}")
    return left


# --- running and reading a batch ----------------------------------------------------------------


def _start_time(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


class BatchWatch(threading.Thread):
    """While a batch runs, every second: the processes it started (the batch's environment
    marker, or a parent among them: a sandbox may scrub the environment), as (pid, start
    time). Folders and processes of other people's grading runs on a shared machine are then
    not taken for the batch's."""

    def __init__(self, batch: str, root_pid: int):
        super().__init__(daemon=True)
        self.marker = f"RT3V3_BATCH={batch}".encode()
        self.seen: dict[str, str] = {str(root_pid): _start_time(str(root_pid))}
        self.done = threading.Event()

    def poll(self) -> None:
        procs = {}
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                stat = (proc / "stat").read_text().rsplit(")", 1)[1].split()
                procs[proc.name] = (stat[1], stat[19])
            except (OSError, IndexError):
                continue
        for _ in range(2):  # a parent may have the larger pid
            for pid, (ppid, start) in procs.items():
                if pid in self.seen:
                    continue
                if ppid in self.seen:
                    self.seen[pid] = start
                    continue
                try:
                    if self.marker in Path(f"/proc/{pid}/environ").read_bytes():
                        self.seen[pid] = start
                except OSError:
                    pass

    def run(self) -> None:
        while not self.done.wait(1.0):
            self.poll()

    def alive(self) -> list[str]:
        """The batch's processes still running (same pid and start time)."""
        return [pid for pid, start in self.seen.items() if start and _start_time(pid) == start]


def run_grade(sub: Path, out: Path, *extra: str, timeout: int):
    """`course grade` on the batch; returns (completed process, seconds, batch id, watch)."""
    batch = uuid.uuid4().hex
    env = {**os.environ, "RT3V3_BATCH": batch}
    env.pop("COURSE_PLATFORM", None)
    start = time.monotonic()
    args = [*_course(), "grade", str(sub), "--out", str(out), "--quick", *extra]
    popen = subprocess.Popen(
        args, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    watch = BatchWatch(batch, popen.pid)
    watch.start()
    try:
        stdout, stderr = popen.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        popen.kill()
        stdout, stderr = popen.communicate()
    finally:
        watch.poll()
        watch.done.set()
    proc = subprocess.CompletedProcess(args, popen.returncode, stdout, stderr)
    return proc, time.monotonic() - start, batch, watch


def read_grades(out: Path) -> dict[str, list[dict]]:
    csv.field_size_limit(1 << 31)  # a bloated message must be read to be reported
    rows: dict[str, list[dict]] = {}
    with open(out / "grades.csv", newline="") as f:
        for row in csv.DictReader(f):
            rows.setdefault(row["submission"], []).append(row)
    return rows


def lesson_of(row_notebook: str) -> str:
    return row_notebook[:2]


def _allowed(role: str) -> dict:
    """{check: why} the checks an attack may pass (decided by the lead), else {}."""
    if not role.startswith("attack:"):
        return {}
    return dict(rt.BY_ID[role.split(":", 1)[1]].may_pass)


def verdict_problems(rows: dict[str, list[dict]], roles: dict[str, str]) -> list[str]:
    """Every way the grades differ from what a safe grader gives, and every way the batch
    could pass without having graded what it was given (no row, a row for a notebook not in
    the batch, a duplicated or missing check, a lesson the notebook is not)."""
    problems = []
    for name in sorted(set(rows) - set(roles)):
        problems.append(f"{name}: graded, but not a notebook of this batch")
    for name, role in sorted(roles.items()):
        got = rows.get(name)
        if not got:
            problems.append(f"{name} ({role}): no row at all (a submission must get a grade)")
            continue
        lesson = lesson_of(got[0]["notebook"])
        if role.startswith("attack:"):
            attack = rt.BY_ID[role.split(":", 1)[1]]
            claimed = str(attack.metadata.get("course", {}).get("lesson", ""))[:2]
            if lesson not in {attack.lesson, claimed}:
                problems.append(f"{name} ({role}): graded as lesson {lesson}, not {attack.lesson}")
        elif lesson != name[:2]:
            problems.append(f"{name} ({role}): graded as lesson {lesson}, not {name[:2]}")
        if {lesson_of(r["notebook"]) for r in got} != {lesson}:
            problems.append(f"{name} ({role}): rows of several lessons")
        expected = rt.CHECKS[lesson]
        checks = {r["check"]: r for r in got}
        if set(checks) != set(expected) or len(got) != len(expected):
            problems.append(
                f"{name} ({role}): {len(got)} rows for checks {sorted(checks)}, "
                f"expected one each of {sorted(expected)}"
            )
        allowed = _allowed(role)
        for check, r in checks.items():
            points, top = float(r["points"] or 0), float(r["max_points"] or 0)
            if check in expected and top != expected[check]:
                problems.append(f"{name} ({role}): {check} max_points {top}, not {expected[check]}")
            if role == "honest":
                if r["status"] != "passed" or points != expected.get(check):
                    problems.append(
                        f"{name} (honest): {check} {r['status']} {points}: {r['message'][:300]}"
                    )
            elif role == "blank" and r["status"] in ("missing", "error", "timeout"):
                # a blank copy's check cell must run and find nothing: else the batch did not
                # grade the notebook it was given
                problems.append(f"{name} (blank): {check} {r['status']}: {r['message'][:300]}")
            if role != "honest" and check in allowed:
                if points not in (0, expected.get(check)):
                    problems.append(f"{name} ({role}): {check} {points} points (0 or full allowed)")
            elif role != "honest" and (points != 0 or r["status"] == "passed"):
                problems.append(
                    f"{name} ({role}): {check} {r['status']} {points} points: {r['message'][:300]}"
                )
    return problems


def summary_problems(out: Path, roles: dict[str, str], rows: dict[str, list[dict]]) -> list[str]:
    """summary.csv, executed/ and feedback/ must hold every notebook of the batch, with the
    lesson's full max points: a batch that graded nothing, or fewer, cannot pass."""
    problems = []
    try:
        with open(out / "summary.csv", newline="") as f:
            summary = {r["submission"]: r for r in csv.DictReader(f)}
    except OSError as exc:
        return [f"no summary.csv: {exc}"]
    for name, role in sorted(roles.items()):
        lesson = lesson_of(rows[name][0]["notebook"]) if rows.get(name) else name[:2]
        top = sum(rt.CHECKS[lesson].values())
        r = summary.get(name)
        if r is None:
            problems.append(f"{name} ({role}): not in summary.csv")
        elif float(r["max_points"] or 0) != top:
            problems.append(f"{name} ({role}): summary max_points {r['max_points']}, not {top}")
        if not (out / "executed" / name).exists():
            problems.append(f"{name} ({role}): no executed notebook")
        if not (out / "feedback" / f"{Path(name).stem}.md").exists():
            problems.append(f"{name} ({role}): no feedback file")
    return problems


def attack_cell_ids(attack) -> set[str]:
    """Ids of the cells an attack wrote (replaced exercise cells and added rt3v3-N cells)."""
    nb = rt.edit(
        attack.lesson,
        attack.replace,
        {k: tuple(v) for k, v in attack.add_after.items()},
        attack.metadata,
    )
    return set(attack.replace) | {
        c["id"] for c in nb["cells"] if c.get("id", "").startswith("rt3v3-")
    }


def ran_evidence(executed: Path, attack) -> tuple[bool, list[str]]:
    """(whether the attack's first cell printed its RAN line, the uncaught errors of the
    attack's own cells as 'cell: Name: value')."""
    try:
        nb = json.loads(executed.read_text())
    except (OSError, ValueError):
        return False, ["no readable executed notebook"]
    ours = attack_cell_ids(attack) | {"rt3v3-0"}
    ran, errors = False, []
    tag = f"[{rt.MARK}:{attack.id}] {rt.RAN}"
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        for o in cell.get("outputs", []):
            text = o.get("text", "")
            text = "".join(text) if isinstance(text, list) else text
            if tag in text:
                ran = True
            if o.get("output_type") == "error" and (
                cell.get("id") in ours or cell.get("id", "").startswith("rt3v3-")
            ):
                errors.append(f"{cell.get('id')}: {o.get('ename')}: {str(o.get('evalue'))[:160]}")
    return ran, errors


def ran_problems(out: Path, roles: dict[str, str]) -> tuple[list[str], dict[str, tuple]]:
    """Every attack must have run as written: its RAN line printed (else it earned 0 because it
    never ran), and no error of the kinds a moved target raises (a renamed module attribute, a
    changed signature) in its own cells."""
    problems, evidence = [], {}
    for name, role in sorted(roles.items()):
        if not role.startswith("attack:"):
            continue
        attack = rt.BY_ID[role.split(":", 1)[1]]
        ran, errors = ran_evidence(out / "executed" / name, attack)
        evidence[name] = (ran, errors)
        if not ran:
            problems.append(f"{name} ({role}): never ran (no '{rt.RAN}' line): a vacuous 0")
        for e in errors:
            if (
                e.split(": ", 2)[1] in STALE_ERRORS
                and e.split(": ", 2)[1] not in attack.cell_errors_ok
            ):
                problems.append(f"{name} ({role}): did not run as written (target moved?): {e}")
    return problems, evidence


def earned_table(rows, roles, evidence, label: str, seconds: float) -> str:
    """What each notebook of the batch earned, check by check, as a Markdown table."""
    lines = [
        f"### {label}: {len(roles)} notebooks in {seconds:.0f} s",
        "",
        "| notebook | role | kind | earned | per check (status points/max) | ran | errors in its cells |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, role in sorted(
        roles.items(), key=lambda kv: (kv[1] != "blank", kv[1] != "honest", kv[0])
    ):
        got = rows.get(name, [])
        kind = rt.BY_ID[role.split(":", 1)[1]].kind if role.startswith("attack:") else role
        allowed = _allowed(role)
        earned = sum(float(r["points"] or 0) for r in got)
        top = sum(float(r["max_points"] or 0) for r in got)
        per = (
            "; ".join(
                f"{r['check']} {r['status']} {float(r['points'] or 0):g}/{float(r['max_points'] or 0):g}"
                + (" (may pass)" if r["check"] in allowed else "")
                for r in got
            )
            or "NO ROWS"
        )
        ran, errors = evidence.get(name, (None, []))
        ran_s = "-" if ran is None else ("yes" if ran else "NO")
        lines.append(
            f"| {name} | {role} | {kind} | {earned:g}/{top:g} | {per} | {ran_s} | "
            f"{'; '.join(errors)[:300] or '-'} |"
        )
    return "\n".join(lines) + "\n"


def report(text: str, tmp: Path, request=None) -> None:
    """Show the table whether the test passes or not (past pytest's capture), and keep it in
    tmp/earned.md and, if set, appended to $COURSE_REDTEAM_REPORT."""
    (tmp / "earned.md").write_text(text)
    target = os.environ.get("COURSE_REDTEAM_REPORT")
    if target:
        with open(target, "a") as f:
            f.write(text + "\n")
    capture = request.config.pluginmanager.getplugin("capturemanager") if request else None
    if capture is not None:
        with capture.global_and_fixture_disabled():
            print("\n" + text, flush=True)
    else:
        print("\n" + text, flush=True)


def output_size_problems(rows: dict[str, list[dict]], out: Path) -> list[str]:
    """A learner's returned value must not bloat the instructor's files (grades.csv is the
    whole class's)."""
    problems = [
        f"{name}: {r['check']} message of {len(r['message']):,} characters in grades.csv"
        for name, got in rows.items()
        for r in got
        if len(r["message"]) > MAX_MESSAGE
    ]
    for path in sorted((out / "feedback").glob("*.md")):
        if path.stat().st_size > MAX_FEEDBACK:
            problems.append(f"feedback {path.name}: {path.stat().st_size:,} bytes")
    return problems


def graded_batch(tmp: Path, ids, lessons, *extra: str, timeout: int, label: str, request=None):
    """Build, snapshot, grade, snapshot again; return (rows, roles, problems). The table of
    what each notebook earned is shown and kept whatever the outcome."""
    ids = list(ids)
    assert ids and len(set(ids)) == len(ids), f"{label}: no attacks, or one twice: {ids}"
    sub, out = tmp / "submissions", tmp / "out"
    roles = build_batch(sub, ids, lessons)
    # every attack asked for is in the batch, under its own file name: none deselected
    assert len(roles) == len(ids) + 2 * len(lessons), f"{label}: file names collide: {roles}"
    assert sorted(r.split(":", 1)[1] for r in roles.values() if r.startswith("attack:")) == sorted(
        ids
    ), f"{label}: an attack is missing from the batch"
    assert sorted(os.listdir(sub)) == sorted(roles), f"{label}: the submissions folder differs"
    (out / "feedback").mkdir(parents=True)
    (out / "CANARY.txt").write_text("an earlier run's file: the grader must leave it\n")
    (out / "feedback" / "someone_else.md").write_text("another learner's feedback\n")
    markers_before = marker_files()
    tmp_before = set(os.listdir("/tmp"))
    before = snapshot({"submissions": sub, "out": out})
    proc, seconds, batch, watch = run_grade(sub, out, *extra, timeout=timeout)
    TIMINGS[label] = seconds
    print(f"\n[{label}] {len(roles)} notebooks graded in {seconds:.0f} s (exit {proc.returncode})")
    print(proc.stderr[-3000:])
    time.sleep(3)  # let the kernels' sandboxes finish tearing down
    after = snapshot({"submissions": sub, "out": out})
    allowed = {str(out / n) for n in ("grades.csv", "summary.csv", ".grading-state.json")}
    for name in roles:
        stem = Path(name).stem
        allowed |= {str(out / "feedback" / f"{stem}.md"), str(out / "executed" / name)}
    problems = diff_snapshots(before, after, allowed)
    new_markers = marker_files() - markers_before
    problems += [f"marker file outside the work folders: {m}" for m in sorted(new_markers)]
    # work folders are named for the grading process (course-grade-PID-*): the batch's are
    # those of a process it started; another grading run on a shared machine is not the batch
    new_folders = [n for n in set(os.listdir("/tmp")) - tmp_before if n.startswith("course-grade-")]
    ours = [n for n in new_folders if n.split("-")[2] in watch.seen]
    others = sorted(set(new_folders) - set(ours))
    if others:
        print(f"(not this batch's: another grading run's work folders) {others}")
    problems += [f"work folder left in /tmp: {n}" for n in ours]
    problems += [
        f"process left running: {p}"
        for p in leftover_processes(
            batch, [str(sub), str(out)] + [f"/tmp/{n}" for n in ours], watch.alive()
        )
    ]
    if not (out / "grades.csv").exists():
        report(f"### {label}: NO grades.csv (exit {proc.returncode})\n", tmp, request)
        raise AssertionError(f"no grades.csv: {proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    rows = read_grades(out)
    if not rows:
        problems.append("grades.csv has no row: the batch graded nothing")
    problems += verdict_problems(rows, roles)
    problems += summary_problems(out, roles, rows)
    ran, evidence = ran_problems(out, roles)
    problems += ran
    problems += output_size_problems(rows, out)
    report(earned_table(rows, roles, evidence, label, seconds), tmp, request)
    return rows, roles, problems


# --- the tiers ----------------------------------------------------------------------------------


# Not in the README's test run: 223 s of grading on CI's 2-core machine, and one hole is still
# open there: a05's replay of earlier feedback earns 00-slowest-op's 2 points in some runs (it
# did in the CI-clone run of 7 December, 13:3x UTC; 0 in the 13:00 run), so the tier would fail
# by chance. COURSE_REDTEAM=grading (or all, or COURSE_TESTS=all) runs it.
DEFAULT_TIER_RUNS = (
    os.environ.get("COURSE_REDTEAM") in ("grading", "all")
    or os.environ.get("COURSE_TESTS") == "all"
    or SHARED_CHECKOUT
)


@pytest.mark.skipif(
    not DEFAULT_TIER_RUNS, reason="the grading red team's default tier: COURSE_REDTEAM=grading"
)
@pytest.mark.timeout(30 * 60)
def test_default_tier_strongest_serially(tmp_path, request):
    """The 8 strongest lesson-00 attacks, the blank and the honest copy, one serial batch."""
    _needs_sandbox()
    _, roles, problems = graded_batch(
        tmp_path,
        DEFAULT_TIER,
        ["00"],
        "--checks-only",
        "--timeout",
        "240",
        timeout=40 * 60,
        label="default tier",
        request=request,
    )
    assert not problems, "\n".join(problems)


@pytest.mark.skipif(not ALL, reason="every red-team v3 attack: COURSE_REDTEAM=all (over an hour)")
@pytest.mark.timeout(5 * 3600)
def test_all_attacks_one_batch(tmp_path, request):
    """Every attack of lessons 00 and 10, with the blank and honest copies, one serial batch
    with the demos (course grade's default), hangs stopped at a 300 s cell timeout."""
    _needs_sandbox()
    ids = [a.id for a in rt.ATTACKS]
    _, roles, problems = graded_batch(
        tmp_path,
        ids,
        ["00", "10"],
        "--timeout",
        "300",
        timeout=4 * 3600,
        label="all attacks",
        request=request,
    )
    assert not problems, "\n".join(problems)


@pytest.mark.skipif(not ALL, reason="Dask tier of the red team v3: COURSE_REDTEAM=all")
@pytest.mark.timeout(3 * 3600)
def test_strongest_through_dask_local2(tmp_path, request):
    """The 10 strongest attacks and both lessons' blank and honest copies, on `--dask local:2`."""
    _needs_sandbox()
    pytest.importorskip("distributed")
    _, roles, problems = graded_batch(
        tmp_path,
        CLUSTER_TIER,
        ["00", "10"],
        "--dask",
        "local:2",
        "--timeout",
        "300",
        timeout=3 * 3600,
        label="dask local:2",
        request=request,
    )
    assert not problems, "\n".join(problems)


# --- Gradescope -----------------------------------------------------------------------------


def export_zip(lesson: str, folder: Path) -> Path:
    path = folder / f"autograder_{lesson}.zip"
    subprocess.run(
        [*_course(), "export", "gradescope", lesson, "--quick", "--out", str(path)],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    )
    return path


def run_autograder(
    zip_path: Path, notebook: Path, root: Path, extra_files: dict, batch: str
) -> dict:
    """The zip as Gradescope unpacks it (root/source, root/submission, root/results), graded
    by its run_autograder with COURSE_AUTOGRADER_ROOT=root; returns results.json."""
    for part in ("source", "submission", "results"):
        (root / part).mkdir(parents=True)
    with zipfile.ZipFile(zip_path) as z:
        z.extractall(root / "source")
    shutil.copy(root / "source" / "run_autograder", root / "run_autograder")
    shutil.copy(notebook, root / "submission" / notebook.name)
    for name, text in extra_files.items():
        (root / "submission" / name).write_text(text)
    env = {
        **os.environ,
        "COURSE_AUTOGRADER_ROOT": str(root),
        # setup.sh would build $ROOT/venv; the tests run the interpreter they run in
        "COURSE_AUTOGRADER_PYTHON": PYTHON,
        "RT3V3_BATCH": batch,
    }
    subprocess.run(
        ["bash", str(root / "run_autograder")],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=60 * 60,
    )
    return json.loads((root / "results" / "results.json").read_text())


def gradescope_problems(results: dict, lesson: str, role: str, name: str) -> list[str]:
    expected = rt.CHECKS[lesson]
    tests = {t["name"]: t for t in results.get("tests", [])}
    problems = []
    for check, top in expected.items():
        t = tests.get(check)
        if t is None:
            problems.append(f"{name} ({role}): no Gradescope test {check}")
            continue
        if float(t.get("max_score", 0)) != top:
            problems.append(f"{name} ({role}): {check} max_score {t.get('max_score')}, not {top}")
        score = float(t.get("score", 0))
        if role == "honest" and score != top:
            problems.append(f"{name} (honest): {check} {score}/{top}: {t.get('output', '')[:300]}")
        if role != "honest" and score != 0:
            problems.append(f"{name} ({role}): {check} scored {score}: {t.get('output', '')[:300]}")
    total = float(results.get("score", 0))
    if role != "honest" and total != 0:
        problems.append(f"{name} ({role}): total score {total}")
    if role == "honest" and total != sum(expected.values()):
        problems.append(f"{name} (honest): total score {total}")
    return problems


def gradescope_table(earned: dict, roles: dict, seconds: float) -> str:
    lines = [
        f"### gradescope: {len(roles)} notebooks in {seconds:.0f} s",
        "",
        "| notebook | role | earned | per test (score/max) |",
        "|---|---|---|---|",
    ]
    for name, role in sorted(roles.items()):
        results = earned.get(name, {})
        tests = results.get("tests", [])
        per = (
            "; ".join(
                f"{t.get('name')} {float(t.get('score', 0)):g}/{float(t.get('max_score', 0)):g}"
                for t in tests
            )
            or "NO TESTS"
        )
        lines.append(f"| {name} | {role} | {float(results.get('score', 0)):g} | {per} |")
    return "\n".join(lines) + "\n"


@pytest.mark.skipif(not ALL, reason="Gradescope tier of the red team v3: COURSE_REDTEAM=all")
@pytest.mark.timeout(3 * 3600)
def test_strongest_through_gradescope_autograder(tmp_path, request):
    """The 10 strongest attacks (and two that the platform's ungraded speed favours), blank
    and honest copies, each graded by its lesson's
    exported autograder as Gradescope runs it (one notebook per run, forged uploads beside)."""
    _needs_sandbox()
    sub = tmp_path / "submissions"
    roles = build_batch(sub, GRADESCOPE_TIER, ["00", "10"])
    zips = {lesson: export_zip(lesson, tmp_path) for lesson in ("00", "10")}
    zip_hashes = {lesson: _sha(p) for lesson, p in zips.items()}
    markers_before = marker_files()
    before = snapshot({"submissions": sub})
    batch = uuid.uuid4().hex
    problems = []
    earned: dict[str, dict] = {}
    start = time.monotonic()
    for i, (name, role) in enumerate(sorted(roles.items())):
        lesson = name[:2]
        extra = rt.BY_ID[role.split(":", 1)[1]].extra_files if role.startswith("attack:") else {}
        root = tmp_path / f"autograder-{i}"
        try:
            results = run_autograder(zips[lesson], sub / name, root, extra, batch)
        except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
            problems.append(f"{name} ({role}): no results.json from run_autograder: {exc!r}")
            results = {}
        earned[name] = results
        if not results.get("tests"):
            problems.append(f"{name} ({role}): results.json has no tests: graded nothing")
        problems += gradescope_problems(results, lesson, role, name)
        for p in _files(root / "source"):  # the autograder's own files stay as unpacked
            with zipfile.ZipFile(zips[lesson]) as z:
                member = str(p.relative_to(root / "source"))
                if member in z.namelist() and hashlib.sha256(z.read(member)).hexdigest() != _sha(p):
                    problems.append(f"{name}: the autograder's {member} changed")
        if sorted(os.listdir(root / "submission")) != sorted([name, *extra]):
            problems.append(
                f"{name}: the submission folder changed: {os.listdir(root / 'submission')}"
            )
    TIMINGS["gradescope"] = time.monotonic() - start
    print(f"\n[gradescope] {len(roles)} notebooks in {TIMINGS['gradescope']:.0f} s")
    report(gradescope_table(earned, roles, TIMINGS["gradescope"]), tmp_path, request)
    time.sleep(3)
    after = snapshot({"submissions": sub})
    problems += diff_snapshots(before, after, set())
    problems += [
        f"zip changed: {lesson}" for lesson, p in zips.items() if _sha(p) != zip_hashes[lesson]
    ]
    problems += [
        f"marker file outside the work folders: {m}"
        for m in sorted(marker_files() - markers_before)
    ]
    problems += [f"process left running: {p}" for p in leftover_processes(batch, [str(tmp_path)])]
    assert not problems, "\n".join(problems)
