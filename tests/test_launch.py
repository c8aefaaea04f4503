"""The harness's torchrun launcher (course_utils/launch.py), which lessons 06 and 13 share: a free
port, a line per rank as it starts, one retry of a failed rendezvous, and the failing rank's own
error instead of torchrun's footer.

Each real launch costs a few seconds (two ranks import torch.distributed); the rest read made-up
output and log files.
"""

from __future__ import annotations

import socket
import textwrap
from pathlib import Path

import pytest
from test_rank_logs import FOOTER

from course_utils import launch as harness
from course_utils.lessons.distributed import launch as ddp_launch
from course_utils.lessons.fsdp import launch as fsdp_launch
from course_utils.rank_logs import RankExit

SCRIPT = textwrap.dedent(
    """
    import os, sys
    import torch, torch.distributed as dist
    rank = int(os.environ["RANK"])
    print(f"rank {rank} on port {os.environ['MASTER_PORT']}", flush=True)
    dist.init_process_group("gloo")
    mode = sys.argv[1]
    if mode == "raise" and rank == 1:
        raise ValueError("the learner's own bug on rank 1")
    if mode == "abort" and rank == 1:
        print("rank 1 about to abort", file=sys.stderr, flush=True)
        os.abort()
    total = torch.ones(1)
    dist.all_reduce(total)
    assert total.item() == dist.get_world_size()
    dist.destroy_process_group()
    """
)


@pytest.fixture
def script(tmp_path) -> Path:
    path = tmp_path / "collective.py"
    path.write_text(SCRIPT)
    return path


def ports(done: harness.Finished) -> set[int]:
    return {int(line.rsplit(" ", 1)[1]) for line in done.output.splitlines() if " on port " in line}


def test_two_launches_at_once_both_succeed_each_on_a_free_port_of_its_own(script, capsys):
    first = harness.Torchrun([script, "ok"], nproc=2, timeout_s=120)
    second = harness.Torchrun([script, "ok"], nproc=2, timeout_s=120)
    a, b = first.finish(), second.finish()
    assert (a.returncode, b.returncode) == (0, 0), a.tail() + "\n" + b.tail()
    assert len(ports(a)) == 1 and len(ports(b)) == 1  # both ranks of a launch meet on one port
    assert ports(a) != ports(b) and 29500 not in ports(a) | ports(b)
    shown = capsys.readouterr().out
    for rank in (0, 1):
        assert shown.count(f"rank {rank} of 2 started (pid ") == 2


def test_a_taken_port_fails_the_rendezvous_fast_and_is_retried_once_on_a_free_one(script, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        done = harness.Torchrun(
            [script, "ok"], nproc=2, timeout_s=120, port=taken.getsockname()[1]
        ).finish()
    assert done.returncode == 0 and done.retried == "its port was taken"
    said = [line for line in capsys.readouterr().out.splitlines() if "retrying" in line]
    assert said == ["the rendezvous failed (its port was taken); retrying once on a new free port"]


def test_a_rank_that_raises_is_shown_by_its_own_traceback_not_torchruns_footer(script):
    done = harness.Torchrun([script, "raise"], nproc=2, timeout_s=120, progress=False).finish()
    assert done.returncode != 0 and not done.retried
    error = done.rank_error()
    assert error.startswith("rank 1 of 2 exited with code 1; the end of its stderr:")
    assert "ValueError: the learner's own bug on rank 1" in error
    assert 'raise ValueError("the learner' in error  # the traceback's last frame
    assert "ChildFailedError" not in error and "error_file" not in error


def test_a_rank_killed_by_a_signal_is_named_with_the_signal_and_its_stderr(script):
    done = harness.Torchrun([script, "abort"], nproc=2, timeout_s=120, progress=False).finish()
    error = done.rank_error()
    assert error.startswith("rank 1 of 2 was killed by SIGABRT (exit code -6)"), error
    assert "rank 1 about to abort" in error


# --- made-up results: which rank is the cause, and which failures are retried ------------------


def test_a_peer_that_only_lost_its_connection_is_not_taken_for_the_cause():
    echo = RankExit(0, 1, "RuntimeError: Connection closed by peer")
    cause = RankExit(1, 1, "ZeroDivisionError: division by zero")
    done = harness.Finished(["torchrun"], 1, 3.0, 120, "", world=2, failed=[echo, cause])
    assert done.root_failure() is cause and done.root_failure(rank=0) is echo


def test_torchruns_own_error_is_shown_where_no_rank_ran():
    output = "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: no store\n"
    done = harness.Finished(["torchrun"], 1, 3.0, 120, output, world=2)
    assert done.rank_error().startswith("torchrun failed before any rank ran; its last lines:")
    assert harness._rendezvous_failure(done) == "RendezvousConnectionError"


def test_a_ranks_own_network_error_is_not_retried_as_a_rendezvous_failure():
    """A rank's DistNetworkError is usually a peer that died first: a retry would only double
    the time before the learner sees the error."""
    output = "[rank0]: torch.distributed.DistNetworkError: Connection reset by peer\n" + FOOTER
    done = harness.Finished(["torchrun"], 1, 3.0, 120, output, world=2)
    assert harness._rendezvous_failure(done) == ""


# --- both lessons launch through it, and say what the failing rank said ------------------------

ABORTED = harness.Finished(
    ["torchrun"], 1, 3.0, 120, FOOTER, world=2,
    failed=[RankExit(1, -6, "terminate called after throwing 'gloo::IoException'")],
)  # fmt: skip


class FakeTorchrun:
    """Stands in for harness.Torchrun: records the target, finishes as ABORTED."""

    targets: list[list[str]] = []

    def __init__(self, target, **options) -> None:
        FakeTorchrun.targets.append([str(t) for t in target])
        self.command = ["torchrun", *target]

    def finish(self) -> harness.Finished:
        return ABORTED

    def kill(self) -> None:
        pass


def test_both_lessons_launch_through_the_harness_and_show_the_failing_ranks_stderr(
    monkeypatch, tmp_path
):
    monkeypatch.setattr(harness, "Torchrun", FakeTorchrun)
    FakeTorchrun.targets = []
    ddp = ddp_launch.torchrun(tmp_path / "ddp_train.py", ["--epochs", 1])
    fsdp = fsdp_launch.torchrun("demo", ["--rounds", 1])
    assert FakeTorchrun.targets[0][1:] == ["--epochs", "1"]
    assert FakeTorchrun.targets[1][:3] == ["-m", "course_utils.lessons.fsdp.worker", "demo"]
    said = ddp_launch.describe_failure(ddp, "ddp_train.py")
    assert said.startswith("ddp_train.py exited with code 1 (rank 1 killed by SIGABRT). Rank 1")
    assert "gloo::IoException" in said and "no Python exception recorded" not in said
    said = fsdp.failure("the notebook's launch")
    assert said.startswith("the notebook's launch exited with code 1 and no result. Rank 1 of 2")
    assert "gloo::IoException" in said and "Root Cause" not in said
