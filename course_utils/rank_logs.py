"""What each rank of a torchrun launch wrote, and which rank failed how (for launch.py).

torchrun keeps each rank's stdout and stderr in files of their own (`--log_dir`, `--redirects
3`): <logs>/<run>/attempt_<n>/<local rank>/{stdout,stderr}.log. `Follow` reads them as they
grow, whole lines only, each prefixed "[rankN]: ": Python writes a `print`'s text and its newline
in two writes, so a reader that takes whatever is there, as torchrun's own `--tee` does, can cut
a line in two. torchrun's footer names the ranks that failed and their exit codes; each failure
carries the end of that rank's own stderr (the last lines of its traceback), which the footer
never shows.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass
from pathlib import Path

# the "[rankN]: " put before a rank's lines here (and by torch, before a traceback's lines)
PREFIX = re.compile(r"^\[rank(\d+)\]:\s?")
# a rank's error that only reports another rank's death (gloo and NCCL phrase it so)
ECHOES = ("Connection closed by peer", "Connection reset by peer", "remote worker", "Broken pipe")
STDERR_LINES = 12  # of a failing rank's stderr shown: a traceback's last frames and its message
# a rank in torchrun's failure footer: "rank : 1 (local_rank: 1)" then "exitcode : -6 (pid: 42)"
_FOOTER = re.compile(
    r"rank\s*:\s*(?P<rank>\d+)\s*\(local_rank:\s*(?P<local>\d+)\)\s*\n\s*"
    r"exitcode\s*:\s*(?P<code>-?\d+)"
)


@dataclass
class RankExit:
    """A rank that exited with an error, as torchrun's footer reports it, and its own stderr."""

    rank: int
    exitcode: int
    stderr: str | None  # its stderr's end, prefixes removed; None: not kept apart (macOS)

    @property
    def signal_name(self) -> str | None:
        """SIGABRT for exit code -6: the rank was killed by that signal."""
        if self.exitcode >= 0:
            return None
        try:
            return signal.Signals(-self.exitcode).name
        except ValueError:
            return f"signal {-self.exitcode}"

    def is_echo(self) -> bool:
        """Stopped by torchrun once another rank failed, or failed only because it did."""
        return self.signal_name == "SIGTERM" or any(s in (self.stderr or "") for s in ECHOES)

    def describe(self, world: int, output_tail: str = "") -> str:
        how = (
            f"was killed by {self.signal_name} (exit code {self.exitcode})"
            if self.signal_name
            else f"exited with code {self.exitcode}"
        )
        if self.stderr is None:  # torchrun keeps no file per rank on macOS and Windows
            said = f"; the launch's last output:\n{output_tail}"
        else:
            said = (
                f"; the end of its stderr:\n{self.stderr}"
                if self.stderr
                else " and wrote no stderr"
            )
        return f"rank {self.rank} of {world} {how}{said}"


def one_prefix(line: str) -> str:
    """ "[rank1]: [rank1]: ValueError" (ours before torch's own) -> one prefix."""
    first = PREFIX.match(line)
    if first:
        rest = line[first.end() :]
        again = PREFIX.match(rest)
        if again and again[1] == first[1]:
            return line[: first.end()] + rest[again.end() :]
    return line


class Follow:
    """Each rank's stdout and stderr files under `logs`, read as they grow: `read()` returns the
    whole lines written since the last call; `read(final=True)` also a last line without its
    newline (the rank has ended)."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self._offsets: dict[Path, int] = {}
        self._partial: dict[Path, bytes] = {}

    def read(self, final: bool = False) -> list[str]:
        lines = []
        # per rank, stdout before stderr: a traceback usually follows what the rank printed
        found = self.logs.glob("*/attempt_*/*/std*.log")
        for path in sorted(found, key=lambda p: (str(p.parent), p.name != "stdout.log")):
            with open(path, "rb") as f:
                f.seek(self._offsets.get(path, 0))
                data = f.read()
            self._offsets[path] = self._offsets.get(path, 0) + len(data)
            *whole, rest = (self._partial.pop(path, b"") + data).split(b"\n")
            if rest and final:
                whole.append(rest)
            elif rest:
                self._partial[path] = rest
            rank = path.parent.name  # the local rank, which is the rank on one node
            lines += [one_prefix(f"[rank{rank}]: {w.decode(errors='replace')}\n") for w in whole]
        return lines


def failures(output: str, logs: Path) -> list[RankExit]:
    """The ranks of torchrun's footer, root cause first, each with the end of its stderr."""
    root = output.rfind("Root Cause")
    ordered = sorted(_FOOTER.finditer(output), key=lambda m: (m.start() < root, m.start()))
    failed, seen = [], set()
    for m in ordered:
        rank = int(m["rank"])
        if rank not in seen:
            seen.add(rank)
            failed.append(RankExit(rank, int(m["code"]), stderr_tail(logs, int(m["local"]))))
    return failed


def stderr_tail(logs: Path, local_rank: int, lines: int = STDERR_LINES) -> str | None:
    """The last lines of a rank's stderr file (the last attempt's), prefixes removed; None
    where torchrun kept no such file."""
    files = sorted(logs.glob(f"*/attempt_*/{local_rank}/stderr.log"))
    if not files:
        return None
    text = files[-1].read_text(errors="replace")
    kept = [PREFIX.sub("", line) for line in text.rstrip().splitlines()]
    return "\n".join(kept[-lines:])
