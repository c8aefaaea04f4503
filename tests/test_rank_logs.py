"""What each rank wrote (course_utils/rank_logs.py): its own files followed as whole lines, and
torchrun's footer read for which rank failed how, with that rank's own stderr."""

from __future__ import annotations

from pathlib import Path

from course_utils import launch as harness
from course_utils.rank_logs import Follow, failures, one_prefix

FOOTER = """\
[rank0]: RuntimeError: [gloo] Connection reset by peer
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
ddp_train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-12-07_08:48:06
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 4696)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 4696
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-07_08:48:06
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -6 (pid: 4697)  (SIGABRT)
  error_file: <N/A>
  traceback : Signal 6 (SIGABRT) received by PID 4697
============================================================
"""


def logs_with(tmp_path, **stderr: str) -> Path:
    for local_rank, text in stderr.items():
        folder = tmp_path / "run_x" / "attempt_0" / local_rank.removeprefix("r")
        folder.mkdir(parents=True)
        (folder / "stderr.log").write_text(text)
    return tmp_path


def test_the_footer_is_read_root_cause_first_each_rank_with_its_own_stderr(tmp_path):
    logs = logs_with(
        tmp_path,
        r0="[rank0]: RuntimeError: [gloo] Connection reset by peer\n",
        r1="terminate called after throwing an instance of 'gloo::IoException'\n",
    )
    failed = failures(FOOTER, logs)
    assert [(f.rank, f.exitcode, f.signal_name) for f in failed] == [
        (1, -6, "SIGABRT"),
        (0, -15, "SIGTERM"),
    ]
    assert failed[1].stderr == "RuntimeError: [gloo] Connection reset by peer"  # prefix gone
    done = harness.Finished(["torchrun"], 1, 3.0, 120, FOOTER, world=2, failed=failed)
    assert done.rank_error() == (
        "rank 1 of 2 was killed by SIGABRT (exit code -6); the end of its stderr:\n"
        "terminate called after throwing an instance of 'gloo::IoException'"
    )


def test_where_torchrun_kept_no_file_per_rank_the_launchs_output_is_shown(tmp_path):
    """macOS and Windows: torchrun ignores --redirects, so no stderr file exists."""
    [failed, _] = failures(FOOTER, tmp_path)
    assert failed.stderr is None
    said = failed.describe(2, output_tail="Fatal Python error: Aborted")
    assert said.endswith("; the launch's last output:\nFatal Python error: Aborted")


def test_a_line_written_in_two_parts_is_read_whole(tmp_path):
    """print() writes its text, then the newline: a read between the two sees half a line."""
    folder = tmp_path / "run_x" / "attempt_0" / "1"
    folder.mkdir(parents=True)
    out = folder / "stdout.log"
    follow = Follow(tmp_path)
    out.write_text("rank 1 on port 4120")
    assert follow.read() == []
    with out.open("a") as f:
        f.write("9\n[rank1]: Traceback (most recent call last):\nlast words")
    assert follow.read() == [
        "[rank1]: rank 1 on port 41209\n",
        "[rank1]: Traceback (most recent call last):\n",
    ]
    assert follow.read(final=True) == ["[rank1]: last words\n"]


def test_our_prefix_before_torchs_own_is_kept_once():
    assert one_prefix("[rank1]: [rank1]: ValueError: x\n") == "[rank1]: ValueError: x\n"
    assert one_prefix("[rank0]: epoch 0\n") == "[rank0]: epoch 0\n"
    assert one_prefix("[rank0]: [rank1]: odd\n") == "[rank0]: [rank1]: odd\n"
