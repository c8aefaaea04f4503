"""Lesson 06's checks: a DDP script run by torchrun, and accumulation with no_sync.

Both checks launch real processes through probes (learner_runs.py: beside the learner's code,
in its sandbox under `course grade`) and read what they did from the trace (workload.py), from
a counting communication hook and counted torch.distributed collectives (probe.py), never
from what the learner's code prints. What the trace and the checkpoint must equal (training in
one process on the same global batches, the full-batch gradient, each known mistake's) is
computed here.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path

from ...checks import Part, Threshold, check, correct
from ...probes import observe, specimen_rng
from . import workload
from .ending import judge_checkpoint, judge_shutdown
from .gradients import compared
from .judge import (
    RankFailed,
    judge_accumulation,
    judge_parameters,
    judge_trace,
    raise_learner_exception,
)
from .launch import Launch, describe_failure
from .learner_runs import (
    BATCH,
    NO_SYNC_WHAT,
    WORLD,
    as_launch,
    as_learner_file,
    check_config,
    ddp_script_run,
    finished_cleanly,
    no_sync_run,
)

# BATCH, the global batch of the check's launch, is named by the exercise text (and its test)
__all__ = ["BATCH", "THRESHOLDS", "WORLD", "check_ddp_script", "check_no_sync"]

THRESHOLDS = {
    "param_atol": Threshold(
        1e-4,
        "max |DDP - one process| over all parameters after 12 SGD steps (global batch 24: per "
        "rank and epoch 5 batches of 12 and one of 4; float32, gloo, 2 CPU processes, torch "
        "2.14, cpu-bf16 class): measured 6.0e-08 in each of the 4 valid red-team v4 launches "
        "(n=4; 3.4e-08 at the former 8 steps of batch 32, n=2); gradients summed or halved give "
        "0.31 / 0.23, a checkpoint one step early 0.053, the initial weights 0.52 (replayed)",
        measured_on=("cpu-bf16",),
    ),
    "grad_rtol": Threshold(
        1e-4,
        "max |accumulated DDP grad - full-batch grad| / max |full-batch grad|: measured "
        "1.9e-07 (gloo, 2 CPU processes, n=1 inspected); an unscaled or unsynchronised gradient is off "
        "by > 0.1. The same bound names a known mistake (probe.known_mistakes): on the 11 "
        "red-team v4 specimens each rank matched its own mistake's gradient within 7.5e-07 "
        "and every other candidate stayed >= 0.49 away (n=1 launch, 2 ranks)",
        measured_on=("cpu-bf16",),
    ),
    "launch_timeout_s": Threshold(
        120,
        "seconds before a launch is killed: a correct check launch took 25-42 s at load "
        "average 11-14 on 2 cores (n=9) and 10-14 s at load 4-5 (n=10); only a hung rank "
        "reaches 120 s",
        measured_on=("cpu-bf16",),
    ),
}


def _launch_error(launch: Launch, what: str) -> None:
    """A launch that exited with an error: not attempted, a reference used, or an error."""
    exc = launch.exception()
    if exc is None:
        raise RankFailed(f"failed: {describe_failure(launch, what)}")
    where = f"on rank {exc['rank']}" if exc["rank"] >= 0 else "in a worker"
    raise_learner_exception(exc, f"{where} of {what} (exit code {launch.returncode})")


def _learner_file(answer):
    """The check's answer: the learner's file as the locked cell's call hands it (a handle,
    learner_runs.LearnerFile, whose probes run beside it); a bare path is refused, since a
    probe given only data would run here, outside the learner's sandbox."""
    if not callable(answer):
        raise TypeError(
            f"the check takes the learner's file as check_ddp_script or check_no_sync hand it "
            f"(learner_runs.LearnerFile), not a {type(answer).__name__}"
        )
    return answer


# the sampler's seed of the check's run, drawn in the judge (the first in a notebook): the
# shuffle moves, every threshold's evidence (batches, steps, lr) stays
SEEDS = (0, 5, 11)


@check(
    "06-ddp-script",
    points=3,
    hint="Set each measurement of section 4 beside the goal it breaks, then find the one line "
    "behind it: what each process's loader batches, what the sampler's shuffle depends on, "
    "whose state_dict the checkpoint holds. Rerun lesson.observe_script on your fixed files "
    "before the check.",
    in_kernel="the trace each process of the learner's launch records (the samples of every "
    "training forward, its torch.save calls, an uncaught exception, whether its process group "
    "was up at exit), in the kernel's launch and its one-process run made to fail (whose trace "
    "also says whether the shutdown part can be judged); the checkpoint it wrote is loaded "
    "and compared with one process's training here",
)
def check_ddp_script_file(script, *, timeout_s: float | None = None) -> list[Part]:
    """`script`: ddp_train.py as check_ddp_script, the locked cell's call, hands it (a
    learner_runs.LearnerFile)."""
    seed = specimen_rng().choice(SEEDS)
    timeout = timeout_s or THRESHOLDS["launch_timeout_s"].value
    ran = observe(ddp_script_run, _learner_file(script), seed, timeout)
    with tempfile.TemporaryDirectory(prefix="course06-judge-") as here:
        cfg = check_config(seed, Path(here) / "checkpoint.pt")
        if ran["checkpoint"] is not None:  # the learner's bytes, read back weights-only
            cfg.checkpoint.write_bytes(ran["checkpoint"].numpy().tobytes())
        launch = as_launch(ran["launch"], {str(ran["checkpoint_path"]): str(cfg.checkpoint)})
        failing = None if ran["failing"] is None else as_launch(ran["failing"])
        return _judge_launch(str(ran["name"]), launch, failing, cfg)


def check_ddp_script(script, *, timeout_s: float | None = None):
    """The locked cell's call, `lesson.check_ddp_script(workdir / "ddp_train.py")`: the check
    gets the learner's file as a handle (learner_runs.LearnerFile), so that its probes run
    beside the file (in the learner's sandbox under `course grade`)."""
    return check_ddp_script_file(as_learner_file(script), timeout_s=timeout_s)


check_ddp_script.__dict__.update(check_ddp_script_file.__dict__)  # check_id, ..., the body


def _judge_launch(name: str, launch: Launch, failing: Launch | None, cfg) -> list[Part]:
    if launch.timed_out:
        return [correct("runs under torchrun", False, describe_failure(launch))]
    teardown = launch.returncode != 0 and finished_cleanly(launch, WORLD)
    if launch.returncode != 0 and not teardown:
        _launch_error(launch, name)
    note = (
        f"; exit code {launch.returncode} came from a process aborting in the C++ "
        "teardown after every rank's Python had finished (a known gloo race), not your code"
        if teardown
        else ", exit code 0"
    )
    parts = [
        correct(
            "runs under torchrun",
            True,
            f"{workload.describe_launch(WORLD)} finished after {launch.seconds:.1f} s{note}",
        )
    ]
    parts += judge_trace(launch, cfg, WORLD)
    state, loads = judge_checkpoint(cfg.checkpoint)
    if loads is not None:
        parts.append(loads)
    if state is not None and _consistent(launch):
        parts.append(judge_parameters(launch, cfg, state, THRESHOLDS["param_atol"].value))
    parts.append(judge_shutdown(launch, failing))
    return parts


def _consistent(launch: Launch) -> bool:
    counts = Counter(e["rank"] for e in launch.of("forward"))
    return len(counts) == WORLD and len(set(counts.values())) == 1


# --- exercise 2: gradient accumulation with no_sync ---------------------------------------

# where in the data set the ranks' micro-batches start, drawn in the judge (the first in a
# notebook): the known mistakes' gradients stay >= 0.34 apart at each (0.49 at 0), against a
# grad_rtol of 1e-4
OFFSETS = (0, 32, 96)


@check(
    "06-no-sync",
    points=3,
    hint="Set each measurement beside what was meant: the all-reduces beside one synchronised "
    "backward's buckets (section 5: when does DDP decide to synchronise?), the gradient beside "
    "the full-batch mean (what is a sum of k means?).",
    in_kernel="the all-reduces DDP's communication hook counts, the learner's own collectives "
    "(counted around its call) and one synchronised backward's buckets, in the ranks of the "
    "kernel's launch; each rank's gradient is compared here",
)
def check_no_sync_file(path, *, timeout_s: float | None = None) -> list[Part]:
    """`path`: accumulate.py as check_no_sync, the locked cell's call, hands it (a
    learner_runs.LearnerFile)."""
    offset = specimen_rng().choice(OFFSETS)
    timeout = timeout_s or THRESHOLDS["launch_timeout_s"].value
    result = observe(no_sync_run, _learner_file(path), offset, timeout)
    if "launch" in result:
        launch = as_launch(result["launch"])
        if launch.timed_out:
            return [correct("runs under torchrun", False, describe_failure(launch, NO_SYNC_WHAT))]
        _launch_error(launch, NO_SYNC_WHAT)
    ranks = compared(result["ranks"], offset)
    parts = judge_accumulation(ranks, THRESHOLDS["grad_rtol"].value)
    parts[0].message += f" (on {workload.describe_launch(WORLD)})"
    return parts


def check_no_sync(path, *, timeout_s: float | None = None):
    """The locked cell's call, `lesson.check_no_sync(workdir / "accumulate.py")`: the check
    gets the learner's file as a handle (learner_runs.LearnerFile), so that its probes run
    beside the file (in the learner's sandbox under `course grade`)."""
    return check_no_sync_file(as_learner_file(path), timeout_s=timeout_s)


check_no_sync.__dict__.update(check_no_sync_file.__dict__)  # check_id, ..., the body
