"""Lesson 16's probes: each runs the learner's answer beside the learner's code, on specimens
it builds from plain arguments (a Layout's fields, a job's name, a file), and returns what it
saw as data (course_utils.probes). The checks compute what that data must equal themselves.

Readings taken here that a verdict rests on (the checks' `in_kernel`): exercise 3's outputs,
gradients, parameter shards and collectives, measured in the processes that run the learner's
`shard_block` (shard_probe.py)."""

from __future__ import annotations

import os
from pathlib import Path

from ...launch_result import describe, start
from ...model_runs import ModelRuns
from ...probes import learner_frame, probe
from .jobs import CHOOSING, SCENARIOS
from .layouts import PREDICTING
from .model import Layout
from .thresholds import THRESHOLDS

WORLD = 2  # exercise 3 runs on this many processes


@probe
def predictions(predict_comms, layouts: list[dict]) -> dict:
    """{"predicted": what the learner's predict_comms returned for each layout (a fresh Layout
    each), "ran": the ops it dispatched that run a model (model_runs)}; lesson.measured_comms
    refuses to run meanwhile (layouts.PREDICTING)."""
    PREDICTING.append(True)
    try:
        with ModelRuns() as runs:
            predicted = [predict_comms(Layout(**fields)) for fields in layouts]
    finally:
        PREDICTING.clear()
    return {"predicted": predicted, "ran": dict(runs.ops)}


@probe
def chosen_plan(choose_parallel, name: str):
    """What the learner's choose_parallel returns for the check's job named `name`."""
    job = next(j for j in SCENARIOS if j.name == name)
    CHOOSING.append(True)
    try:
        return choose_parallel(job)
    finally:
        CHOOSING.clear()


class LearnerFile:
    """The learner's file as a check's answer: a handle the locked cell's call makes from its
    path, so that the check's probes run where the file is. (A path alone is plain data, and
    a probe given only data runs where the check runs: in the judge under `course grade`,
    outside the sandbox that holds the file.) Calling it gives the path."""

    def __init__(self, path) -> None:
        self.path = os.fspath(path)
        self.__name__ = Path(self.path).name

    def __call__(self) -> str:
        return self.path

    def __repr__(self) -> str:
        return f"<the learner's file {self.path}>"


def _existing(file) -> Path:
    found = Path(os.fspath(file() if callable(file) else file)).resolve()
    if not found.exists():
        raise FileNotFoundError(f"{found} does not exist: run the %%writefile cell first")
    return found


@probe
def shard_preflight(path) -> dict:
    """The file's (a LearnerFile's) shard_block run once on a pretend world of 2 on the
    check's block (shard_probe.preflight): what it raised, what each rank would hold of each
    weight, and the collectives of a step. Not attempted raises here."""
    from .shard_probe import preflight

    found = preflight(_existing(path))
    raised = found.pop("raised")
    if raised is not None:
        if isinstance(raised, NotImplementedError):
            raise NotImplementedError()
        lines = str(raised).strip().splitlines()
        raised = {
            "type": type(raised).__name__,
            "message": lines[0][:300] if lines else "",
            "where": learner_frame(raised),
            "layouts": found.pop("layouts", None),  # set where the block's step raised
        }
    return {**found, "raised": raised}


@probe
def shard_run(path) -> dict:
    """The file's (a LearnerFile's) shard_block applied on 2 processes to the check's block,
    a training step run on the same batch on both (shard_probe.grade_file): each rank's
    output, gradients, parameter shards and collectives. Raises RuntimeError, with the
    failing rank's own error, if the launch fails."""
    found = _existing(path)
    print(f"running your shard_block on {describe(WORLD)} ...", flush=True)
    launch = start(
        "course_utils.lessons.parallel.worker",
        "shard",
        [found],
        nproc=WORLD,
        timeout_s=THRESHOLDS["shard_launch_timeout_s"].value,
        learner=True,
    ).finish()
    if launch.result is None:
        raise RuntimeError(launch.failure(f"shard_block in {found.name}"))
    return launch.result["result"]
