"""Launch a script under torchrun from a notebook, and never hang doing it.

`python -m torch.distributed.run` is `torchrun` (the same entry point, and it works in any
virtual environment or on Colab). `--standalone` runs a single-node rendezvous on a free
port that torchrun picks itself, so two notebooks or graders on one machine never collide.
Every launch has a deadline: on timeout the whole process tree (torchrun and its workers)
is killed and the result says so, with the end of the output to diagnose from; an
interrupted cell kills it too.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from .workload import TRACE_ENV

LEARNER_ENV = "COURSE_LEARNER_RUN"  # set while a check runs the learner's code
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
        if not raised:
            return None
        last = raised[-1]
        rank = int(last["rank"]) if last["rank"] else -1
        return {"type": last["type"].split(".")[-1], "rank": rank, "message": last["message"]}

    def tail(self, lines: int = 12) -> str:
        return "\n".join(self.output.strip().splitlines()[-lines:])


def torchrun(
    script: Path | str,
    args: list[str] = (),
    *,
    nproc: int = 2,
    timeout_s: float = 120,
    learner: bool = True,
    module: bool = False,
    env: dict | None = None,
) -> Launch:
    """Run `script` (a file, or a module with `module=True`) on `nproc` local processes.

    One intra-op thread per process: two processes on two cores would otherwise each start
    one thread per core and fight over them.
    """
    script = script if module else Path(script).resolve()  # it runs in its own folder
    target = ["-m", str(script)] if module else [str(script)]
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone",
        f"--nproc_per_node={nproc}", *target, *map(str, args),
    ]  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="course06-trace-") as trace:
        run_env = {
            **os.environ,
            "OMP_NUM_THREADS": "1",
            "OMP_WAIT_POLICY": "PASSIVE",
            "PYTHONUNBUFFERED": "1",
            TRACE_ENV: trace,
            **(env or {}),
        }
        if learner:
            run_env[LEARNER_ENV] = "1"
        cwd = Path(script).parent if not module else None
        start = time.perf_counter()
        proc = subprocess.Popen(
            command,
            cwd=cwd,
            env=run_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            output, _ = proc.communicate(timeout=timeout_s)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            output, _ = proc.communicate()
            code = None
        except BaseException:  # an interrupted cell (KeyboardInterrupt) must not leave ranks
            _kill_group(proc)
            raise
        return Launch(command, code, time.perf_counter() - start, timeout_s, output, _read(trace))


def _is_echo(message: str) -> bool:
    """An error that only reports another rank's death (gloo and NCCL phrase it so)."""
    return any(s in message for s in ("Connection closed by peer", "remote worker", "Broken pipe"))


def _kill_group(proc: subprocess.Popen) -> None:
    """Stop torchrun and every process under it: SIGTERM, then SIGKILL after 5 s.

    torchrun starts each worker in a session of its own, so killing torchrun's process group
    would miss them; the process tree is collected first and every member is signalled.
    """
    try:
        family = [psutil.Process(proc.pid)]
        family += family[0].children(recursive=True)
    except psutil.NoSuchProcess:
        family = []
    for p in family:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.terminate()
    _, alive = psutil.wait_procs(family, timeout=5)
    for p in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    psutil.wait_procs(alive, timeout=5)
    proc.wait()


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
    """One paragraph for a launch that timed out or exited with an error."""
    if launch.timed_out:
        return (
            f"{what} did not finish within {launch.timeout_s:.0f} s, so every process was "
            "killed. A rank that waits forever usually sits in a collective (all_reduce, "
            "barrier, DDP's backward) that another rank never reaches, e.g. a collective "
            "inside `if rank == 0:`. Last output:\n" + launch.tail()
        )
    exc = launch.exception()
    where = f" on rank {exc['rank']}" if exc and exc["rank"] >= 0 else ""
    kind = f"{exc['type']}{where}: {exc['message']}" if exc else "no Python exception recorded"
    return f"{what} exited with code {launch.returncode} ({kind}). Last output:\n" + launch.tail()
