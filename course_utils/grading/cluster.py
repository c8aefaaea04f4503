"""`course grade --dask ADDRESS|local:N`: one Dask task per submission, the client the only writer.

Each task carries its submission's bytes and its lesson's solution, grades in a temporary
folder on the worker and returns rows, notes and the executed notebook; the client writes
everything (no shared filesystem needed). Every task asks for one unit of the workers' timing
resource (`GPU`, one worker per GPU; else `TIMING`), so a device never runs two timed
notebooks at once. A worker that dies is retried elsewhere (the scheduler's
`allowed-failures`); past the limit the submission gets an `error` row saying so. The reuse
fingerprint comes from the worker that graded (its harness code, device class and torch), and
workers of different device classes are refused unless `allow_mixed_devices`.

Dask's Nanny caps OMP/MKL/OPENBLAS_NUM_THREADS at 1 for its workers; a learner's kernel has
no such cap, so the grading kernel gets the values the Nanny started with back.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import uuid
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

from tqdm.auto import tqdm

from ..errors import UsageError
from .outbox import GradeSummary, Outbox
from .records import Graded, Row, Submission
from .restore import lesson_for
from .settings import (
    RunSettings,
    device_class_of,
    fingerprint,
    gpu_count,
    machine_settings,
    settings_string,
)
from .submission import grade_submission, read_data

THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
# everything a Nanny sets for its workers (distributed.nanny.pre-spawn-environ, and a fixed
# hash seed): a learner's kernel has none of it
NANNY_VARS = (*THREAD_VARS, "MALLOC_TRIM_THRESHOLD_", "PYTHONHASHSEED")
RESOURCES = ("GPU", "TIMING")  # what a task asks for, in order of preference
ALLOWED_FAILURES = 2  # for local:N; a remote scheduler keeps its own setting (default 3)


@dataclass(frozen=True)
class Target:
    """Where to grade: a scheduler's address, or a cluster of `workers` on this machine."""

    address: str | None = None
    workers: int = 0

    @classmethod
    def parse(cls, spec: str) -> Target:
        if spec.startswith("local:"):
            count = spec.removeprefix("local:")
            if not count.isdigit() or int(count) < 1:
                raise UsageError(f"--dask {spec}: expected local:N with N >= 1, e.g. local:2")
            return cls(workers=int(count))
        if "://" not in spec and ":" not in spec:
            raise UsageError(
                f"--dask {spec}: expected a scheduler address (tcp://HOST:8786) or local:N"
            )
        return cls(address=spec)


def learner_thread_env() -> dict[str, str | None]:
    """The thread (and allocator, hash seed) settings a learner's kernel would have, for a
    kernel started on a Dask worker: the values the worker's Nanny itself started with (None:
    unset), read from its process environment. Empty outside a Nanny-managed worker."""
    try:
        from distributed import get_worker

        worker = get_worker()
    except (ImportError, ValueError):
        return {}
    if not getattr(worker, "nanny", None):
        return {}
    import psutil

    try:  # the Nanny's environment as it was started, before it capped its children
        original = psutil.Process(os.getppid()).environ()
    except (psutil.Error, OSError):
        import dask

        caps = dask.config.get("distributed.nanny.pre-spawn-environ", {})
        return {k: None for k in THREAD_VARS if os.environ.get(k) == str(caps.get(k))}
    return {k: original.get(k) for k in NANNY_VARS}


def _key(data: bytes, sol_digest: str, machine: str, run: RunSettings, lesson: str | None) -> str:
    extra = f"|lesson {lesson}" if lesson else ""
    return fingerprint(data, settings_string(sol_digest, machine, run.tag()) + extra)


def grade_task(
    name: str,
    filename: str,
    data: bytes,
    solutions: dict,
    sol_digest: str,
    run: RunSettings,
    lesson: str | None = None,
    run_id: str = "",
) -> Graded:
    """Runs on a worker: grade one submission and fingerprint it with this machine's settings."""
    _started(name, run_id)
    machine = machine_settings()
    graded = grade_submission(
        name, filename, data, solutions, run, lesson=lesson, env=learner_thread_env()
    )
    graded.key = _key(data, sol_digest, machine, run, lesson)
    graded.device_class = graded.device_class or device_class_of(machine)
    return graded


STARTS = "course-grade-start"  # the Dask event topic: one event each time a task starts


def _started(name: str, run_id: str) -> None:
    """Tell the client this worker started grading `name` in grading run `run_id` (a retry
    starts it again; the cluster's event log outlives one run)."""
    from distributed import get_worker

    try:
        worker = get_worker()
    except ValueError:  # not on a worker (a test calling grade_task directly)
        return
    worker.log_event(STARTS, {"submission": name, "worker": worker.address, "run": run_id})


def log_deaths(client, name: str, graded: bool, run_id: str) -> list[str]:
    """One line per worker that died grading `name`: every start but the last, and the last
    too when it did not return (`graded` False: the scheduler gave up, KilledWorker)."""
    starts = [
        msg["worker"]
        for _, msg in client.get_events(STARTS)
        if msg["submission"] == name and msg.get("run") == run_id
    ]
    died = starts[:-1] if graded else starts
    lines = []
    for i, worker in enumerate(died):
        then = f"graded again on {starts[i + 1]}" if i + 1 < len(starts) else "not graded"
        lines.append(f"course grade: {name}: Dask worker {worker} died while grading it; {then}")
    for line in lines:
        print(line, file=sys.stderr)
    return lines


def _local_cluster(workers: int, scratch: str):
    """N workers on this machine, one thread each: one per GPU (CUDA_VISIBLE_DEVICES) with
    GPU=1, or, on a CPU machine, TIMING=1 each. The Nanny leaves thread settings alone. Their
    scratch space (Dask's spill and lock files) is `scratch`, removed with the cluster."""
    import dask
    from distributed import Nanny, Scheduler, SpecCluster

    gpus = gpu_count()
    if gpus and workers > gpus:
        raise UsageError(
            f"--dask local:{workers}: this machine has {gpus} GPU(s); one worker per GPU"
        )
    if not gpus and workers > 1:
        print(
            f"{workers} CPU workers share this machine's cores: timing checks get noisy; "
            "use local:1 (or one worker per host) for final grades.",
            file=sys.stderr,
        )
    spec = {}
    for i in range(workers):
        options = {
            "nthreads": 1,
            "memory_limit": 0,
            "host": "127.0.0.1",
            "local_directory": scratch,
        }
        if gpus:
            options |= {"resources": {"GPU": 1}, "env": {"CUDA_VISIBLE_DEVICES": str(i)}}
        else:
            options |= {"resources": {"TIMING": 1}}
        spec[f"grader-{i}"] = {"cls": Nanny, "options": options}
    config = {f"distributed.nanny.pre-spawn-environ.{k}": None for k in THREAD_VARS}
    config["distributed.scheduler.allowed-failures"] = ALLOWED_FAILURES
    with dask.config.set(config):
        scheduler = {
            "cls": Scheduler,
            "options": {"host": "127.0.0.1", "port": 0, "dashboard_address": ":0"},
        }
        return SpecCluster(workers=spec, scheduler=scheduler, silence_logs=40)


@contextlib.contextmanager
def connect(target: Target) -> Iterator:
    """A client for `target`; a local cluster is closed afterwards and the environment the
    Nanny changed in this process (it sets its children's variables in its own) put back."""
    from distributed import Client

    if target.address:
        with Client(target.address, timeout="30s") as client:
            client.wait_for_workers(1, timeout=120)
            yield client
        return
    environ = dict(os.environ)
    try:
        with (
            tempfile.TemporaryDirectory(prefix="course-dask-") as scratch,
            _local_cluster(target.workers, scratch) as cluster,
            Client(cluster) as client,
        ):
            client.wait_for_workers(target.workers, timeout=120)
            yield client
    finally:
        os.environ.clear()
        os.environ.update(environ)


def timing_resource(client) -> tuple[str, list[str]]:
    """The resource every task asks for, and the workers that offer it."""
    workers = client.scheduler_info(n_workers=-1)["workers"]
    for name in RESOURCES:
        offering = [addr for addr, w in workers.items() if w.get("resources", {}).get(name)]
        if offering:
            return name, offering
    raise UsageError(
        "no Dask worker offers a timing resource: start each worker with `--resources GPU=1` "
        "(one per GPU) or `--resources TIMING=1` (one per CPU host), so that no device ever "
        "times two notebooks at once"
    )


def worker_machines(client, workers: list[str], *, allow_mixed: bool) -> dict[str, str]:
    """Each timing worker's machine settings; refuses a mix of device classes (their timing
    thresholds differ) unless allowed."""
    machines = client.run(machine_settings, workers=workers)
    classes = {device_class_of(m) for m in machines.values()}
    if len(classes) > 1 and not allow_mixed:
        by_class = ", ".join(
            f"{c}: {sum(device_class_of(m) == c for m in machines.values())} worker(s)"
            for c in sorted(classes)
        )
        raise UsageError(
            f"the workers have different device classes ({by_class}); grades would mix "
            "thresholds. Use workers of one class, or pass --allow-mixed-devices "
            "(grades.csv records each row's device class)"
        )
    return machines


def _failure_row(sub: Submission, exc: BaseException) -> Graded:
    from distributed.scheduler import KilledWorker

    if isinstance(exc, KilledWorker):
        reason = (
            f"the Dask worker grading it died {exc.allowed_failures + 1} time(s) in a row "
            "(out of memory, or a cell that killed the process tree); it was not graded"
        )
    else:
        text = str(exc).strip()
        reason = f"grading failed on the worker ({type(exc).__name__}: {text.splitlines()[0][:200] if text else ''})"
    return Graded([Row.error(sub.name, reason)])


def _solutions_for(data: bytes, filename: str, sols: dict, lesson: str | None) -> dict:
    """Only the lesson a submission answers travels with its task (all, if unknown)."""
    import nbformat

    if lesson:
        return {lesson: sols[lesson]}
    try:
        lesson = lesson_for(nbformat.reads(data.decode("utf-8"), as_version=4), filename, sols)
    except Exception:
        lesson = None
    return {lesson: sols[lesson]} if lesson else sols


def grade_on_dask(
    subs: list[Submission],
    sols: dict,
    sol_digest: str,
    run: RunSettings,
    outbox: Outbox,
    spec: str,
    *,
    allow_mixed_devices: bool = False,
    lesson: str | None = None,
) -> GradeSummary:
    """Grade `subs` on the cluster `spec`; see the module docstring."""
    try:
        from distributed import as_completed
    except ImportError as exc:
        raise ModuleNotFoundError("distributed", name="distributed") from exc
    target, run_id = Target.parse(spec), uuid.uuid4().hex
    with connect(target) as client:
        resource, workers = timing_resource(client)
        machines = set(worker_machines(client, workers, allow_mixed=allow_mixed_devices).values())
        bar = tqdm(total=len(subs), desc="grading", unit="submission")
        todo: deque[tuple[int, Submission, bytes]] = deque()
        for i, sub in enumerate(subs):
            data = read_data(sub)
            keys = {_key(data, sol_digest, m, run, lesson) for m in machines}
            reused = outbox.reusable(sub, keys)
            if reused is None:
                todo.append((i, sub, data))
            else:
                outbox.reuse(sub, reused)
                bar.update()
        running: dict = {}
        pending = as_completed()

        def submit_while_a_device_is_free() -> None:
            """At most one task per timing worker is out: a task never waits on a worker
            behind another, where that worker's death would count against it too."""
            free = len(timing_resource(client)[1]) - len(running)
            for _ in range(max(0, free) if running else max(1, free)):
                if not todo:
                    return
                i, sub, data = todo.popleft()
                sols_needed = _solutions_for(data, sub.path.name, sols, lesson)
                future = client.submit(
                    grade_task,
                    *(sub.name, sub.path.name, data, sols_needed, sol_digest, run, lesson, run_id),
                    key=f"grade-{i}-{sub.slug}",
                    resources={resource: 1},
                    pure=False,
                )
                running[future] = sub
                pending.add(future)

        try:
            submit_while_a_device_is_free()
            for future in pending:
                sub = running.pop(future)
                last_survived = True
                try:
                    graded = future.result()
                except Exception as exc:  # a worker died past the limit, or the task failed
                    graded = _failure_row(sub, exc)
                    last_survived = type(exc).__name__ != "KilledWorker"
                log_deaths(client, sub.name, graded=last_survived, run_id=run_id)
                outbox.record(sub, graded)
                bar.update()
                submit_while_a_device_is_free()
        except KeyboardInterrupt:
            client.cancel(list(running))
            raise
        finally:
            bar.close()
    return outbox.finish(subs)
