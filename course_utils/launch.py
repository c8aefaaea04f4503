"""torchrun from a notebook: a free port, a line per rank as it starts, a deadline, one retry of
a failed rendezvous, and the failing rank's own error.

Lessons 06 (DDP) and 13 (FSDP2) launch through this. Why each part:
- The rendezvous store binds port 0 on 127.0.0.1, so the OS hands it a free port at the moment it
  binds (no fixed 29500, and no gap between picking a port and binding it): launches beside
  another torchrun, another notebook or a grader never collide. `is_host=1` makes a port that is
  taken fail at once instead of waiting a minute as a client of whoever holds it.
- A rendezvous that fails (a pinned port taken, a store that did not answer in time on a loaded
  machine) is retried once, on a new free port, and the retry is said in one line.
- Each rank prints "rank 0 of 2 started (pid ...)" as its process appears: importing torch in
  every rank takes 5-40 s on a loaded laptop, and a cell silent that long looks hung.
- torchrun's own footer only says "exited with code 1 (no Python exception recorded)". Each
  rank's stdout and stderr go to files of their own (rank_logs.py), followed into the output
  line by line, so a failure shows the failing rank's own stderr: the end of its traceback, or
  the signal that killed it.
- Every launch has a deadline; at it, or when the cell is interrupted, torchrun and every rank
  are killed (processes.kill_tree). Output is read by a thread as it comes, so a launch left
  running while the notebook computes never blocks on a full pipe.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from .processes import kill_tree
from .rank_logs import PREFIX, Follow, RankExit, failures

# what fails when the rendezvous does: the agent's store (taken port, no answer) or a rank's
# connection to it; a script's own error never reads like this
RENDEZVOUS_FAILED = re.compile(
    r"Rendezvous\w*Error|DistStoreError|DistNetworkError|EADDRINUSE|address already in use"
    r"|failed to listen on any local network address",
    re.IGNORECASE,
)


@dataclass
class Finished:
    """What one launch did: exit code (None: killed at its deadline), time, combined output
    (each rank's lines prefixed "[rankN]: "), and the ranks that failed."""

    command: list[str]
    returncode: int | None
    seconds: float
    timeout_s: float
    output: str
    world: int = 1
    failed: list[RankExit] = field(default_factory=list)
    retried: str = ""  # why the launch was retried once ("" if it was not)

    @property
    def timed_out(self) -> bool:
        return self.returncode is None

    def tail(self, lines: int = 12) -> str:
        return "\n".join(self.output.strip().splitlines()[-lines:])

    def root_failure(self, rank: int | None = None) -> RankExit | None:
        """The rank whose error started the failure (or `rank`'s, where it failed): not one
        that torchrun stopped, nor one that lost its connection to a rank that died."""
        if rank is not None:
            return next((f for f in self.failed if f.rank == rank), None)
        causes = [f for f in self.failed if not f.is_echo()] or self.failed
        return causes[0] if causes else None

    def rank_error(self, rank: int | None = None) -> str:
        """The failing rank's own error in a few lines; torchrun's own last lines where no rank
        failed (a rendezvous that never formed); "" for a launch that succeeded."""
        if self.returncode == 0 or self.timed_out:
            return ""
        failure = self.root_failure(rank) or self.root_failure()
        if failure is not None:
            return failure.describe(self.world, self.tail())
        return "torchrun failed before any rank ran; its last lines:\n" + self.tail(6)


class Watched:
    """One process with a deadline, its stdout and stderr read together as they come.

    `stop_when`: checked every 0.1 s; once true, nothing more is needed from the process and it
    is killed (its exit code is then -9) instead of waited for."""

    def __init__(
        self,
        command: list[str],
        *,
        timeout_s: float,
        cwd: Path | str | None = None,
        env: dict | None = None,
        stop_when: Callable[[], bool] | None = None,
    ) -> None:
        self.command, self.timeout_s = command, timeout_s
        self._lines: list[str] = []
        self._start = time.perf_counter()
        self.proc = subprocess.Popen(
            command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, errors="replace",
        )  # fmt: skip
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if stop_when is not None:
            threading.Thread(target=self._stop_when, args=(stop_when,), daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self._lines.append(line)

    def add(self, lines: list[str]) -> None:
        """Lines from elsewhere (a rank's own files), in the order they come."""
        self._lines.extend(lines)

    def output(self) -> str:
        return "".join(self._lines)

    def _stop_when(self, done: Callable[[], bool]) -> None:
        while self.proc.poll() is None:
            if done():
                self.proc.kill()
                return
            time.sleep(0.1)

    def finish(self) -> Finished:
        """Wait for the process, up to its deadline (then kill it and all it started)."""
        left = max(1.0, self.timeout_s - (time.perf_counter() - self._start))
        try:
            code = self.proc.wait(timeout=left)
        except subprocess.TimeoutExpired:
            self.kill()
            code = None
        except BaseException:  # an interrupted cell (KeyboardInterrupt) must not leave ranks
            self.kill()
            raise
        self._reader.join(timeout=10)
        seconds = time.perf_counter() - self._start
        return Finished(self.command, code, seconds, self.timeout_s, self.output())

    def kill(self) -> None:
        """SIGTERM the process and everything under it (a torchrun rank then leaves its process
        group cleanly), SIGKILL what is left after 5 s."""
        if self.proc.poll() is None:
            kill_tree(self.proc.pid, grace_s=5)
        self.proc.wait()


def environment(env: dict | None = None) -> dict:
    """The ranks' environment: unbuffered (their lines reach the notebook as printed) and one
    intra-op thread each unless `env` says otherwise (two ranks on two cores would otherwise
    each start a thread per core and fight over them; torchrun would also print a banner)."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", **(env or {})}


class Torchrun:
    """A torchrun launch under way; `finish()` waits for it (retrying a failed rendezvous once)
    and returns a `Finished`. `target`: the script and its arguments, or ["-m", module, ...]."""

    def __init__(
        self,
        target: list[str],
        *,
        nproc: int,
        timeout_s: float,
        cwd: Path | str | None = None,
        env: dict | None = None,
        progress: bool = True,
        port: int = 0,
        on_retry: Callable[[], None] | None = None,
    ) -> None:
        self.target, self.nproc, self.timeout_s = [str(t) for t in target], nproc, timeout_s
        self._cwd, self._env = cwd, environment(env)
        self._progress, self._on_retry = progress, on_retry
        self._start = time.perf_counter()
        self._attempt(port)

    def _attempt(self, port: int) -> None:
        self._logs = tempfile.TemporaryDirectory(prefix="course-torchrun-")
        self.command = [
            sys.executable, "-m", "torch.distributed.run", "--nnodes=1",
            f"--nproc_per_node={self.nproc}", "--rdzv_backend=c10d",
            f"--rdzv_endpoint=127.0.0.1:{port}", f"--rdzv_id={uuid.uuid4()}",
            "--rdzv_conf=is_host=1", f"--log_dir={self._logs.name}", "--redirects=3",
            *self.target,
        ]  # fmt: skip
        left = self.timeout_s - (time.perf_counter() - self._start)
        self._job = Watched(self.command, timeout_s=left, cwd=self._cwd, env=self._env)
        self._follower = threading.Thread(
            target=self._follow, args=(self._job, Follow(Path(self._logs.name))), daemon=True
        )
        self._follower.start()
        if self._progress:
            threading.Thread(target=self._announce, args=(self._job.proc,), daemon=True).start()

    def _announce(self, proc: subprocess.Popen) -> None:
        """Print a line per rank as its process appears (torchrun's children are the ranks)."""
        seen: set[int] = set()
        try:
            agent = psutil.Process(proc.pid)
            while proc.poll() is None and len(seen) < self.nproc:
                for child in agent.children():  # in start order: torchrun starts rank 0 first
                    rank = _rank_of(child, default=len(seen))
                    if child.pid not in seen and rank is not None:
                        seen.add(child.pid)
                        print(f"rank {rank} of {self.nproc} started (pid {child.pid})", flush=True)
                time.sleep(0.1)
        except psutil.Error:  # torchrun itself ended
            return

    @staticmethod
    def _follow(job: Watched, ranks: Follow) -> None:
        """Each rank's lines into the launch's output as they are written, the last ones too."""
        while True:
            running = job.proc.poll() is None
            try:
                job.add(ranks.read(final=not running))
            except OSError:  # the logs were removed: the launch was killed
                return
            if not running:
                return
            time.sleep(0.1)

    def finish(self) -> Finished:
        done = self._finish_attempt()
        left = self.timeout_s - (time.perf_counter() - self._start)
        reason = _rendezvous_failure(done)
        if reason and left > 10:
            print(f"the rendezvous failed ({reason}); retrying once on a new free port", flush=True)
            if self._on_retry is not None:
                self._on_retry()
            self._attempt(0)
            done = self._finish_attempt()
            done.retried = reason
        done.seconds = time.perf_counter() - self._start
        done.timeout_s = self.timeout_s
        return done

    def _finish_attempt(self) -> Finished:
        try:
            done = self._job.finish()
            self._follower.join(timeout=10)
            done.output, done.world = self._job.output(), self.nproc
            if done.returncode not in (0, None):
                done.failed = failures(done.output, Path(self._logs.name))
            return done
        finally:
            self._logs.cleanup()

    def kill(self) -> None:
        """Stop it now (a measurement beside it failed), and remove its logs."""
        self._job.kill()
        self._logs.cleanup()


def _rank_of(process: psutil.Process, default: int) -> int | None:
    """The rank torchrun gave a process ($RANK); None until it runs Python (a child between
    fork and exec still shows torchrun's environment); `default`, its start order, where the
    environment of another process cannot be read (macOS)."""
    try:
        rank = process.environ().get("RANK")
    except psutil.AccessDenied:
        return default
    except psutil.NoSuchProcess:  # it ended already: said by the failure, if it failed
        return None
    return int(rank) if rank is not None and rank.isdigit() else None


def _rendezvous_failure(done: Finished) -> str:
    """Why the rendezvous failed, in a few words, or "" if the launch failed otherwise."""
    if done.returncode in (0, None):
        return ""
    # torchrun's own lines only: a rank's DistNetworkError is usually a peer that died first
    own = "\n".join(line for line in done.output.splitlines() if not PREFIX.match(line))
    found = RENDEZVOUS_FAILED.search(own)
    if not found:
        return ""
    taken = re.search(r"EADDRINUSE|address already in use", own, re.IGNORECASE)
    return "its port was taken" if taken else found[0]
