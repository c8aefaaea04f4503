"""`course grade --dask`: the toy scenarios graded on a local Dask cluster give what serial
grading gives, one task at a time per timing resource, the learner's thread settings in the
kernel, and every submission a row even when a worker dies mid-task.

The cluster is started the way an instructor starts workers by hand (default Nanny settings,
so the thread caps are on; `TIMING=1` each; two threads per worker, so only the resource keeps
two notebooks from running at once on one worker) and shared by the module.
"""

from __future__ import annotations

import csv
import os
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pytest
from grading_fixtures import CELL_TIMEOUT, TOY, make_course, snapshot, threads_line

from course_utils.errors import UsageError
from course_utils.grading import cluster, grade

distributed = pytest.importorskip("distributed")
pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def dask_cluster():
    import dask

    environ = dict(os.environ)  # an in-process Nanny sets its workers' variables in ours
    with dask.config.set({"distributed.scheduler.allowed-failures": 1}):
        lc = distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=2,
            resources={"TIMING": 1},
            host="127.0.0.1",
            dashboard_address=None,
            memory_limit=0,
            silence_logs=40,
        )
    client = distributed.Client(lc)
    client.get_task_stream()  # installs the scheduler's task stream plugin
    yield lc, client
    client.close()
    lc.close()
    os.environ.clear()
    os.environ.update(environ)


@pytest.fixture(scope="module")
def dask_graded(dask_cluster, toy_graded, tmp_path_factory):
    lc, client = dask_cluster
    out = tmp_path_factory.mktemp("dask") / "out"
    t0 = time.time()
    summary = grade(
        [toy_graded["subs"]],
        out=out,
        solutions=toy_graded["solutions"],
        cell_timeout=CELL_TIMEOUT,
        dask=lc.scheduler_address,
    )
    stream = client.get_task_stream(start=t0)
    return {"out": out, "summary": summary, "stream": stream}


def test_dask_grades_csv_summary_and_feedback_match_serial_byte_for_byte(toy_graded, dask_graded):
    """The toy scenarios' values are deterministic: solved, wrong, raising, hanging, dead
    kernel, unreadable, tampered and forged all give the same bytes as serial grading."""
    assert snapshot(dask_graded["out"]) == toy_graded["files"]
    assert (dask_graded["out"] / "executed" / "solved_toy_lesson.ipynb").exists()


# The scheduler shifts each record by its estimate of the worker's clock offset, which moves
# by milliseconds between heartbeats; two notebooks run at once would overlap by seconds.
CLOCK_SLACK_S = 0.25


def test_dask_runs_one_task_at_a_time_per_timing_resource(dask_graded):
    computes: dict[str, list[tuple[float, float]]] = {}
    for record in dask_graded["stream"]:
        if str(record["key"]).startswith("grade-"):
            for ss in record["startstops"]:
                if ss["action"] == "compute":
                    computes.setdefault(record["worker"], []).append((ss["start"], ss["stop"]))
    assert sum(map(len, computes.values())) == dask_graded["summary"].submissions
    assert max(map(len, computes.values())) >= 2  # a worker with two threads had the chance
    for spans in computes.values():
        spans.sort()
        assert all(a[1] - b[0] < CLOCK_SLACK_S for a, b in zip(spans, spans[1:], strict=False)), (
            spans
        )


def test_dask_kernel_gets_the_thread_settings_a_learner_kernel_has(
    dask_cluster, toy_graded, dask_graded
):
    _, client = dask_cluster
    capped = client.run(os.getenv, "OMP_NUM_THREADS")
    assert set(capped.values()) == {"1"}  # the Nanny did cap its workers...
    assert set(client.run(os.getenv, "PYTHONHASHSEED").values()) == {"6640"}
    name = f"solved_threads_{TOY}"
    serial = threads_line(toy_graded["root"] / "out", name)
    assert threads_line(dask_graded["out"], name) == serial  # ...and the kernel is not capped


def test_target_parse_accepts_addresses_and_local_n():
    assert cluster.Target.parse("tcp://10.0.0.1:8786").address == "tcp://10.0.0.1:8786"
    assert cluster.Target.parse("local:3").workers == 3
    for bad in ("local:0", "local:x", "nowhere"):
        with pytest.raises(UsageError):
            cluster.Target.parse(bad)


class FakeClient:
    def __init__(self, resources, machines=None):
        self.resources, self.machines = resources, machines or {}

    def scheduler_info(self, n_workers=-1):
        return {"workers": {a: {"resources": r} for a, r in self.resources.items()}}

    def run(self, fn, workers):
        return {w: self.machines[w] for w in workers}


def test_workers_without_a_timing_resource_are_refused_with_how_to_start_them():
    with pytest.raises(UsageError, match="--resources GPU=1"):
        cluster.timing_resource(FakeClient({"tcp://a": {}}))
    assert cluster.timing_resource(FakeClient({"a": {"TIMING": 1}, "b": {"GPU": 1}})) == (
        "GPU",
        ["b"],
    )


def test_workers_of_two_device_classes_are_refused_unless_allowed():
    fake = FakeClient({}, {"a": "h|cpu-bf16|2.4", "b": "h|cuda-tensorcore|2.4"})
    with pytest.raises(UsageError, match="--allow-mixed-devices"):
        cluster.worker_machines(fake, ["a", "b"], allow_mixed=False)
    assert len(cluster.worker_machines(fake, ["a", "b"], allow_mixed=True)) == 2


def test_local_cluster_grades_and_leaves_this_process_environment_as_it_was(tmp_path):
    """`--dask local:1`: its own cluster, closed afterwards; the Nanny's variables do not
    leak into later serial grading from this process. An unreadable notebook: no kernel."""
    solutions, subs = make_course(tmp_path)
    before = dict(os.environ)
    grade([subs / f"corrupt_{TOY}"], out=tmp_path / "out", solutions=solutions, dask="local:1")
    assert dict(os.environ) == before
    with open(tmp_path / "out" / "grades.csv", newline="") as f:
        assert [r["status"] for r in csv.DictReader(f)] == ["error", "error"]  # a row per check


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_worker_killed_mid_task_is_retried_and_leaves_no_grading_process(
    dask_cluster, tmp_path, capsys
):
    """One worker is killed while it grades (client.run(os._exit, 1)): the submission is
    graded again elsewhere; its orphaned grading process and kernel die with the worker, its
    work folder (the notebook, the kernel's connection file) is swept by the retry, and the
    log says so in one line. A notebook that kills its worker is the next test."""
    from course_utils.authoring import code, read, write

    lc, client = dask_cluster
    solutions, scenarios = make_course(tmp_path)
    subs = tmp_path / "subs"
    subs.mkdir()
    solved = read(scenarios / f"solved_{TOY}")
    slow = read(scenarios / f"solved_{TOY}")
    first = tmp_path / "first-attempt"  # the killed attempt hangs; its retry does not
    slow.cells.insert(
        3,
        code(
            f"import os, time\n\nif not os.path.exists({str(first)!r}):\n"
            f"    open({str(first)!r}, 'w').close()\n    time.sleep(120)"
        ),
    )
    write(slow, subs / f"slow_{TOY}")
    write(solved, subs / f"solved_{TOY}")
    out = tmp_path / "out"
    done: dict = {}
    run = threading.Thread(
        target=lambda: done.update(
            summary=grade(
                [subs],
                out=out,
                solutions=solutions,
                cell_timeout=CELL_TIMEOUT,
                dask=lc.scheduler_address,
            )
        )
    )
    run.start()
    victim, doomed, victim_pid = None, [], None
    deadline = time.time() + 240
    while time.time() < deadline and not doomed:
        for worker, keys in client.processing().items():
            if any("slow_" in str(k) for k in keys):
                pid = client.run(os.getpid, workers=[worker])[worker]
                kids = _descendants(pid)
                if any("ipykernel" in " ".join(p.cmdline()) for p in kids if _alive(p)):
                    victim, doomed, victim_pid = worker, kids, pid
        time.sleep(0.5)
    assert doomed, "the slow submission's kernel never started"
    try:
        client.run(os._exit, 1, workers=[victim])
    except Exception:  # the worker dies before it can answer
        pass
    deadline = time.time() + 15  # long before the killed attempt's 120 s sleep ends
    while time.time() < deadline and any(_alive(p) for p in doomed):
        time.sleep(0.5)
    assert not [p.pid for p in doomed if _alive(p)], "orphaned grading processes"
    run.join(timeout=400)
    assert not run.is_alive()
    with open(out / "grades.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    by_sub = {}
    for r in rows:
        by_sub.setdefault(r["submission"], []).append(r)
    assert {r["status"] for r in by_sub[f"slow_{TOY}"]} == {"passed"}, by_sub
    assert {r["status"] for r in by_sub[f"solved_{TOY}"]} == {"passed"}
    leftovers = list(Path(tempfile.gettempdir()).glob(f"course-grade-{victim_pid}-*"))
    assert not leftovers, "the dead worker's work folder was left behind"
    died = [line for line in capsys.readouterr().err.splitlines() if "died while grading" in line]
    assert len(died) == 1 and f"slow_{TOY}" in died[0] and "graded again on" in died[0]


def test_a_notebook_that_kills_its_worker_every_time_gets_an_error_row(dask_cluster, tmp_path):
    """Past the scheduler's allowed-failures (1 here) the submission gets its reason. A
    sandboxed kernel cannot see its worker (its own PID namespace): the notebook reaches it
    only unisolated (--isolation none), the way a worker's own crash would look."""
    from course_utils.authoring import code, read, write

    lc, _ = dask_cluster
    solutions, scenarios = make_course(tmp_path)
    killer = read(scenarios / f"solved_{TOY}")
    killer.cells.insert(
        3, code("import os\n\nimport psutil\n\npsutil.Process(os.getppid()).parent().kill()")
    )
    write(killer, tmp_path / f"killer_{TOY}")
    out = tmp_path / "out"
    grade(
        [tmp_path / f"killer_{TOY}"],
        out=out,
        solutions=solutions,
        dask=lc.scheduler_address,
        isolation="none",
    )
    with open(out / "grades.csv", newline="") as f:
        [row] = list(csv.DictReader(f))
    assert row["status"] == "error" and "worker grading it died 2 time(s)" in row["message"]
