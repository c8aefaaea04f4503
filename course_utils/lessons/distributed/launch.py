"""Launch a script under torchrun from a notebook, and never hang doing it.

`python -m torch.distributed.run` is `torchrun` (the same entry point, and it works in any
virtual environment or on Colab). `--standalone` runs a single-node rendezvous on a free
port that torchrun picks itself, so two notebooks or graders on one machine never collide.
Every launch has a deadline: on timeout the whole process tree (torchrun and its workers)
is killed and the result says so, with the end of the output to diagnose from; an
interrupted cell kills it too.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ...processes import kill_tree
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


class Running:
    """A launch under way: `finish()` waits for it (up to its deadline) and reads its trace.

    Started by `start_torchrun` or `start_alone`, so that two launches can run at once.
    `stop_at`: an event after which nothing more is needed from the process: once the trace
    holds it, the process is killed (a watcher thread) instead of being waited for.
    """

    def __init__(
        self, command: list[str], cwd, env: dict, timeout_s: float, stop_at: str | None = None
    ) -> None:
        self.command, self.timeout_s = command, timeout_s
        self._trace = tempfile.TemporaryDirectory(prefix="course06-trace-")
        env = {**env, TRACE_ENV: self._trace.name}
        self._start = time.perf_counter()
        self._proc = subprocess.Popen(
            command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip
        if stop_at:
            threading.Thread(target=self._stop_at, args=(stop_at,), daemon=True).start()

    def _stop_at(self, event: str) -> None:
        needle = f'"event": "{event}"'
        while self._proc.poll() is None:
            try:
                seen = any(needle in p.read_text() for p in Path(self._trace.name).glob("*.jsonl"))
            except OSError:  # the trace was removed: the launch is over
                return
            if seen:
                self._proc.kill()
                return
            time.sleep(0.1)

    def finish(self) -> Launch:
        left = max(1.0, self.timeout_s - (time.perf_counter() - self._start))
        try:
            output, _ = self._proc.communicate(timeout=left)
            code = self._proc.returncode
        except subprocess.TimeoutExpired:
            _kill_group(self._proc)
            output, _ = self._proc.communicate()
            code = None
        except BaseException:  # an interrupted cell (KeyboardInterrupt) must not leave ranks
            self.kill()
            raise
        seconds = time.perf_counter() - self._start
        events = _read(self._trace.name)
        self._trace.cleanup()
        return Launch(self.command, code, seconds, self.timeout_s, output, events)

    def kill(self) -> None:
        """Stop it now (a launch beside one that failed), and remove its trace."""
        if self._proc.poll() is None:
            _kill_group(self._proc)
        self._trace.cleanup()


def _environment(learner: bool, env: dict | None) -> dict:
    """One intra-op thread per process: two processes on two cores would otherwise each start
    one thread per core and fight over them."""
    run_env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "OMP_WAIT_POLICY": "PASSIVE",
        "PYTHONUNBUFFERED": "1",
        **(env or {}),
    }
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
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone",
        f"--nproc_per_node={nproc}", *target, *map(str, args),
    ]  # fmt: skip
    cwd = Path(script).parent if not module else None
    return Running(command, cwd, _environment(learner, env), timeout_s)


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
    run_env = {**_environment(True, env), **ALONE_ENV}
    for name in ("TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RUN_ID"):
        run_env.pop(name, None)  # rank 0 hosts its own store, as without an agent
    return Running(command, script.parent, run_env, timeout_s, stop_at="exit")


def _is_echo(message: str) -> bool:
    """An error that only reports another rank's death (gloo and NCCL phrase it so)."""
    return any(s in message for s in ("Connection closed by peer", "remote worker", "Broken pipe"))


def _kill_group(proc: subprocess.Popen) -> None:
    """Stop torchrun and every process under it: SIGTERM, then SIGKILL after 5 s."""
    kill_tree(proc.pid, grace_s=5)
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
