"""Lesson 13's probes: each runs the learner's answer beside the learner's code, on a model it
builds from plain arguments (a Spec's fields, a scenario's name), and returns what it saw as
data (course_utils.probes). The checks compute what that data must equal themselves: the bytes
each rank holds (pretend worlds), each plan's need and time, one process's training.

Readings taken here that a verdict rests on (the checks' `in_kernel`): the bytes of each rank's
parameter shards and the all-gathers of a step, counted in the processes that train the
learner's sharded model, and the FSDP group of each parameter after its shard_model ran on a
pretend world (to name a cause)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import torch

from ...model_runs import ModelRuns
from ...probes import learner_frame, probe
from .launch import describe, torchrun
from .model import STRATEGIES, Spec
from .plans import WORLD, Scenario
from .scenarios import MODELS
from .shard_groups import preflight
from .shard_probe import SPEC
from .sharding import PREDICTING
from .thresholds import THRESHOLDS


def spec_data(spec: Spec) -> dict:
    """A Spec as data: both sides build the same model from it."""
    return dataclasses.asdict(spec)


@probe
def predictions(predict_bytes, spec: dict, world: int, optimizer: str) -> dict:
    """{"predicted": strategy -> what the learner's predict_bytes returned, each asked on a
    fresh model of `spec`; "ran": the ops it dispatched that run a model (model_runs)}. The
    lesson's measuring functions refuse to run meanwhile (sharding.PREDICTING)."""
    model_spec, out, runs = Spec(**spec), {}, ModelRuns()
    PREDICTING.append(True)
    try:
        for strategy in STRATEGIES:
            model = model_spec.build()
            with runs:
                out[strategy] = predict_bytes(model, strategy, world, optimizer)
    finally:
        PREDICTING.clear()
    return {"predicted": out, "ran": dict(runs.ops)}


@probe
def chosen_plan(choose_plan, model: str, device_bytes: int, name: str = ""):
    """What the learner's choose_plan returns for a scenario of the named model (plans.MODELS,
    its optimizer and per-rank batch) on devices of `device_bytes`."""
    spec, optimizer, batch = MODELS[model]
    scenario = Scenario(
        spec.build(), optimizer, spec.batch(batch, seed=100), WORLD, int(device_bytes), name
    )
    return choose_plan(scenario)


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
    """The path a LearnerFile stands for (called: beside the learner's code), which exists."""
    found = Path(os.fspath(file() if callable(file) else file)).resolve()
    if not found.exists():
        raise FileNotFoundError(f"{found} does not exist: run the %%writefile cell first")
    return found


@probe
def shard_groups(path) -> dict:
    """The file's (a LearnerFile's) shard_model run once on shard_probe.SPEC in a pretend world of 2
    (shard_groups.preflight): what it raised, whether it sharded a copy, which parameters
    are in no group and which blocks sit in the root's. Not attempted raises here."""
    found = preflight(_existing(path), SPEC)
    raised = None
    if found.raised is not None:
        lines = str(found.raised).strip().splitlines()
        raised = {
            "type": type(found.raised).__name__,
            "message": lines[0][:300] if lines else "",
            "where": learner_frame(found.raised),
        }
    return {
        "raised": raised,
        "root_first": found.root_first,
        "copy": found.copy,
        "plain": list(found.plain),
        "blocks_in_root": list(found.blocks_in_root),
    }


@probe
def shard_training(path) -> dict:
    """The file's (a LearnerFile's) shard_model applied on 2 processes to a fresh shard_probe.SPEC model that
    then trains (shard_probe.grade_file): each rank's parameters after training, and what it
    counted. Raises RuntimeError, with the failing rank's own error, if the launch fails."""
    found = _existing(path)
    print(f"training your shard_model on {describe(WORLD)} ...")
    launch = torchrun(
        "shard",
        [found],
        nproc=WORLD,
        timeout_s=THRESHOLDS["shard_launch_timeout_s"].value,
        learner=True,
    )
    if launch.result is None:
        raise RuntimeError(launch.failure(f"shard_model in {found.name}"))
    ranks = launch.result["result"]["ranks"]
    for rank in ranks:  # the parameters as tensors: they cross as tensors, not JSON numbers
        rank["params"] = {n: torch.tensor(v) for n, v in rank.get("params", {}).items()}
    return {"ranks": ranks}
