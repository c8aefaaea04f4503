"""Launch a script under torchrun from a notebook, and never hang doing it.

The launching itself is the harness's (course_utils/launch.py: a free port, a line per rank as
it starts, a deadline that kills every process, one retry of a failed rendezvous, the failing
rank's own stderr). This lesson adds its trace: each process records what it did in a folder
(workload.py), read back as `Launch.events`; and `start_alone`, one process with the
environment torchrun would give it.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ... import launch as harness
from ...rank_logs import ECHOES
from .workload import TRACE_ENV

LEARNER_ENV = "COURSE_LEARNER_RUN"  # set while a check runs the learner's code
WHAT = "\x00what\x00"  # in Launch.described: where describe_failure puts what was launched
_RAISED = re.compile(
    r"^(?:\[rank(?P<rank>\d+)\]:\s*)?(?P<type>[A-Za-z_][\w.]*(?:Error|Exception)):\s*(?P<message>.*)$"
)


@dataclass
class Launch:
    """What one torchrun launch did: exit code, time, output, and each process's trace."""

    command: list[str]
    returncode: int | None  # None: killed at the deadline
    seconds: float
    timeout_s: float
    output: str
    events: list[dict] = field(default_factory=list)
    finished: harness.Finished | None = None  # the harness's record: each failed rank's stderr
    # describe_failure's words, made where the launch ran with WHAT in place of the launch's
    # name (a launch read back from a probe's data has no `finished`: its logs stayed there)
    described: str = ""

    @property
    def timed_out(self) -> bool:
        return self.returncode is None

    def of(self, event: str, rank: int | None = None) -> list[dict]:
        return [
            e for e in self.events if e["event"] == event and (rank is None or e["rank"] == rank)
        ]

    def exception(self) -> dict | None:
        """The uncaught exception that started a failure, or one read from the output."""
        found = self.of("exception")
        if found:  # the root cause: the first to raise, not a peer that lost its connection
            return min(found, key=lambda e: (_is_echo(e["message"]), e.get("t", 0)))
        # raised before the trace was installed (a SyntaxError, a failed import): read the
        # traceback's last line, which torchrun prefixes with "[rankN]:"
        raised = [m for m in map(_RAISED.match, self.output.splitlines()) if m]
        raised = [m for m in raised if m["rank"]] or [
            m for m in raised if not m["type"].endswith("ChildFailedError")
        ]
        raised = [m for m in raised if not _is_echo(m["message"])] or raised
        if not raised:
            return None
        last = raised[-1]
        rank = int(last["rank"]) if last["rank"] else -1
        return {"type": last["type"].split(".")[-1], "rank": rank, "message": last["message"]}

    def tail(self, lines: int = 12) -> str:
        return "\n".join(self.output.strip().splitlines()[-lines:])

    def rank_error(self, rank: int | None = None) -> str:
        """The failing rank's own error (its stderr's end, or the signal that killed it)."""
        return self.finished.rank_error(rank) if self.finished is not None else ""


class Running:
    """A launch under way: `finish()` waits for it (up to its deadline) and reads its trace.

    Started by `start_torchrun` or `start_alone`, so that two launches can run at once."""

    def __init__(
        self, job: harness.Torchrun | harness.Watched, trace: tempfile.TemporaryDirectory
    ) -> None:
        self._job, self._trace = job, trace

    @property
    def command(self) -> list[str]:
        return self._job.command

    def finish(self) -> Launch:
        try:
            done = self._job.finish()
        except BaseException:  # an interrupted cell: the harness killed the ranks
            self._trace.cleanup()
            raise
        events = _read(self._trace.name)
        self._trace.cleanup()
        return Launch(
            done.command, done.returncode, done.seconds, done.timeout_s, done.output, events, done
        )

    def kill(self) -> None:
        """Stop it now (a launch beside one that failed), and remove its trace."""
        self._job.kill()
        self._trace.cleanup()


def _traced(env: dict) -> tuple[tempfile.TemporaryDirectory, dict]:
    trace = tempfile.TemporaryDirectory(prefix="course06-trace-")
    return trace, {**env, TRACE_ENV: trace.name}


def _clear(folder: str):
    """Empty the trace before a retried launch: its events are the second attempt's alone."""

    def clear() -> None:
        shutil.rmtree(folder, ignore_errors=True)
        Path(folder).mkdir(exist_ok=True)

    return clear


def _environment(learner: bool, env: dict | None) -> dict:
    """The harness's rank environment (one intra-op thread each, unbuffered), passive waits."""
    run_env = harness.environment({"OMP_WAIT_POLICY": "PASSIVE", **(env or {})})
    if learner:
        run_env[LEARNER_ENV] = "1"
    return run_env


def start_torchrun(
    script: Path | str,
    args: list[str] = (),
    *,
    nproc: int = 2,
    timeout_s: float = 120,
    learner: bool = True,
    module: bool = False,
    env: dict | None = None,
) -> Running:
    """Start `script` (a file, or a module with `module=True`) on `nproc` local processes."""
    script = script if module else Path(script).resolve()  # it runs in its own folder
    target = ["-m", str(script)] if module else [str(script)]
    cwd = Path(script).parent if not module else None
    trace, run_env = _traced(_environment(learner, env))
    job = harness.Torchrun(
        [*target, *map(str, args)], nproc=nproc, timeout_s=timeout_s, cwd=cwd, env=run_env,
        on_retry=_clear(trace.name),
    )  # fmt: skip
    return Running(job, trace)


def torchrun(script: Path | str, args: list[str] = (), **options) -> Launch:
    """Run `script` under torchrun and wait for it (options: those of `start_torchrun`)."""
    return start_torchrun(script, args, **options).finish()


# What torchrun gives each process, for a world of one. MASTER_PORT 0: the store that rank
# 0 hosts binds a free port itself, so parallel graders never collide.
ALONE_ENV = {
    "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1",
    "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1", "ROLE_RANK": "0", "ROLE_WORLD_SIZE": "1",
    "ROLE_NAME": "default", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "0",
}  # fmt: skip


def start_alone(
    script: Path | str, args: list[str] = (), *, timeout_s: float = 120, env: dict | None = None
) -> Running:
    """Start `script` as ONE process with the environment torchrun would give it (world size
    1), without torchrun: one interpreter importing torch instead of two, cheap enough to run
    beside a check's main launch. It is killed once Python's exit is traced (workload's atexit
    record): the seconds that torch's teardown takes on a loaded machine tell the check nothing,
    and its exit code is then -9."""
    script = Path(script).resolve()
    command = [sys.executable, str(script), *map(str, args)]
    trace, run_env = _traced({**_environment(True, env), **ALONE_ENV})
    for name in ("TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RUN_ID"):
        run_env.pop(name, None)  # rank 0 hosts its own store, as without an agent
    exited = _traced_event(trace.name, "exit")
    job = harness.Watched(
        command, timeout_s=timeout_s, cwd=script.parent, env=run_env, stop_when=exited
    )
    return Running(job, trace)


def _traced_event(folder: str, event: str):
    """True once the trace in `folder` holds `event`: nothing more is needed from the process."""
    needle = f'"event": "{event}"'

    def seen() -> bool:
        try:
            return any(needle in p.read_text() for p in Path(folder).glob("*.jsonl"))
        except OSError:  # the trace was removed: the launch is over
            return False

    return seen


def _is_echo(message: str) -> bool:
    """An error that only reports another rank's death (gloo and NCCL phrase it so)."""
    return any(s in message for s in ECHOES)


def _read(folder: str) -> list[dict]:
    events = []
    for path in sorted(Path(folder).glob("*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut short by a killed process
                continue
    return events


def describe_failure(launch: Launch, what: str = "your script") -> str:
    """One paragraph for a launch that timed out or exited with an error: the failing rank's
    own error (the end of its stderr, or the signal that killed it), not torchrun's footer."""
    if launch.finished is None and launch.described:
        return launch.described.replace(WHAT, what)
    if launch.timed_out:
        return (
            f"{what} did not finish within {launch.timeout_s:.0f} s, so every process was "
            "killed. A rank that waits forever usually sits in a collective (all_reduce, "
            "barrier, DDP's backward) that another rank never reaches, e.g. a collective "
            "inside `if rank == 0:`. Last output:\n" + launch.tail()
        )
    exc = launch.exception()
    failed = launch.finished.root_failure() if launch.finished else None
    if exc and failed and _is_echo(exc["message"]) and exc["rank"] != failed.rank:
        exc = None  # a peer reporting the death of the rank that failed first
    where = f" on rank {exc['rank']}" if exc and exc["rank"] >= 0 else ""
    own = launch.rank_error(exc["rank"] if exc and exc["rank"] >= 0 else None)
    if exc:
        kind = f"{exc['type']}{where}: {exc['message']}"
    else:
        kind = f"rank {failed.rank} {_how(failed)}" if failed else "no Python exception recorded"
    said = own[:1].upper() + own[1:] if own else "Last output:\n" + launch.tail()
    return f"{what} exited with code {launch.returncode} ({kind}). {said}"


def _how(failed: harness.RankExit) -> str:
    if failed.signal_name:
        return f"killed by {failed.signal_name}"
    return f"exited with code {failed.exitcode}"
