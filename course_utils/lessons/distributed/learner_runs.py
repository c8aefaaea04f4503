"""Lesson 06's probes: each launches a learner's file beside the learner's code (in the
kernel, or its sandbox under `course grade`) and returns what the processes did, as data
(course_utils.probes): the trace of every process (workload.py), the checkpoint's bytes, the
counts and gradients exercise 2's ranks report (probe.py). The checks (checks.py) replay,
load and compare all of it themselves.

A launch travels as a dict (`launch_data`) and is read back as a `launch.Launch`
(`as_launch`), with the failing rank's own error already put in words here, where its logs
are."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import torch

from ...probes import probe
from . import workload
from .launch import WHAT, Launch, describe_failure, start_alone, torchrun

WORLD = 2  # processes per check: enough to show sharding and averaging, fits a 2-core CPU
# The check's global batch: each rank's 64 samples (128 / 2) make 5 batches of 12 and a last
# one of 4, so a script that drops an epoch's smaller last batch loses samples the trace shows
# (a batch that divides the data evenly, as 32 does, hides it)
BATCH, EPOCHS, LR = 24, 2, 0.1
OUTPUT_CHARS = 20_000  # the end of a launch's output that travels (tracebacks, torchrun's lines)
CHECKPOINT_BYTES = 16 * 2**20  # at most this much of the checkpoint travels (the model's: 3 KB)


def check_config(seed: int, checkpoint: Path) -> workload.Config:
    """The check's run of the learner's script: 2 epochs of global batch 24, lr 0.1."""
    cfg = workload.Config(epochs=EPOCHS, batch_size=BATCH, lr=LR, seed=seed)
    cfg.checkpoint = checkpoint
    return cfg


def launch_data(launch: Launch) -> dict:
    """A finished launch as plain data; `described`: describe_failure's words for it, where
    it timed out or failed (the failing rank's logs exist only here), with launch.WHAT where
    the check puts what was launched."""
    failed = launch.timed_out or launch.returncode != 0
    return {
        "command": [str(c) for c in launch.command],
        "returncode": launch.returncode,
        "seconds": launch.seconds,
        "timeout_s": launch.timeout_s,
        "output": launch.output[-OUTPUT_CHARS:],
        "events": launch.events,
        "described": describe_failure(launch, WHAT) if failed else "",
    }


def as_launch(data: dict, paths: dict[str, str] | None = None) -> Launch:
    """A launch from `launch_data`, each traced path renamed by `paths` (the checkpoint's, in
    the kernel's folder, to where the check wrote the bytes it was sent)."""
    events = []
    for event in data["events"]:
        event = dict(event)
        if paths and event.get("path") in paths:
            event["path"] = paths[event["path"]]
        events.append(event)
    code = data["returncode"]
    return Launch(
        [str(c) for c in data["command"]],
        None if code is None else int(code),
        float(data["seconds"]),
        float(data["timeout_s"]),
        str(data["output"]),
        events,
        described=str(data.get("described", "")),
    )


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


def as_learner_file(path) -> LearnerFile:
    return path if isinstance(path, LearnerFile) else LearnerFile(path)


def _existing(file, what: str) -> Path:
    """The path a LearnerFile stands for (called: beside the learner's code), which exists."""
    found = Path(os.fspath(file() if callable(file) else file)).resolve()
    if not found.exists():
        raise FileNotFoundError(f"{found} does not exist: run the {what} first")
    return found


def _args(cfg: workload.Config, checkpoint: Path) -> list:
    return ["--epochs", cfg.epochs, "--batch-size", cfg.batch_size, "--lr", cfg.lr,
            "--seed", cfg.seed, "--checkpoint", checkpoint]  # fmt: skip


def _failing_env() -> dict:
    """Every training forward raises; and the one process uses the backend of the main
    launch (on one GPU, a world of one would otherwise pick NCCL while the check's two
    processes run gloo)."""
    env = {workload.FAIL_ENV: "1"}
    if workload.launch_backend(WORLD) == "gloo":
        env["COURSE_DEVICE"] = "cpu"
    return env


def finished_cleanly(launch: Launch, world: int) -> bool:
    """Every rank's Python reached a normal exit and none raised."""
    return not launch.of("exception") and {e["rank"] for e in launch.of("exit")} == set(
        range(world)
    )


def _checkpoint_bytes(path: Path) -> torch.Tensor | None:
    if not path.exists():
        return None
    with open(path, "rb") as f:
        blob = f.read(CHECKPOINT_BYTES)
    return (
        torch.frombuffer(bytearray(blob), dtype=torch.uint8)
        if blob
        else torch.zeros(0, dtype=torch.uint8)
    )


@probe
def ddp_script_run(script, seed: int, timeout_s: float) -> dict:
    """The learner's script (a LearnerFile) under torchrun on WORLD processes
    (check_config(seed)), beside it one process whose every training forward the check makes
    fail (start_alone): the script's name, both launches, the checkpoint's bytes (None: none
    written) and where it was written."""
    script_path = _existing(script, "%%writefile cells")
    with tempfile.TemporaryDirectory(prefix="course06-") as out:
        cfg = check_config(seed, Path(out) / "checkpoint.pt")
        print(f"launching {script_path.name} on {WORLD} processes under torchrun ...")  # 5-20 s
        failing = start_alone(
            script_path,
            _args(cfg, Path(out) / "failing.pt"),
            timeout_s=timeout_s,
            env=_failing_env(),
        )
        try:
            launch = torchrun(
                script_path, _args(cfg, cfg.checkpoint), nproc=WORLD, timeout_s=timeout_s
            )
            ran = launch.returncode == 0 or (
                not launch.timed_out and finished_cleanly(launch, WORLD)
            )
            failed = failing.finish() if ran else None  # the shutdown part reads it
        finally:
            failing.kill()
        return {
            "name": script_path.name,
            "launch": launch_data(launch),
            "failing": None if failed is None else launch_data(failed),
            "checkpoint": _checkpoint_bytes(cfg.checkpoint),
            "checkpoint_path": str(cfg.checkpoint),
        }


NO_SYNC_WHAT = "accumulate_gradients under 2 processes"


def measure_no_sync(paths: list[Path], timeout_s: float = 120, offset: int = 0) -> dict[str, dict]:
    """Run probe.py once on WORLD processes for one or more learner files: resolved path ->
    {"world", "offset", "ranks": what each rank reported}, or {"launch", "what"} where the
    launch wrote no report."""
    with tempfile.TemporaryDirectory(prefix="course06-") as out:
        report = Path(out) / "probe.json"
        launch = torchrun(
            "course_utils.lessons.distributed.probe",
            ["--out", report, "--offset", offset, *[Path(p).resolve() for p in paths]],
            nproc=WORLD,
            module=True,
            timeout_s=timeout_s,
        )
        if not report.exists():  # written by rank 0 once every file was measured
            return {str(Path(p).resolve()): {"launch": launch, "what": NO_SYNC_WHAT} for p in paths}
        results = json.loads(report.read_text())
    return {r["ranks"][0]["path"]: r for r in results}


@probe
def no_sync_run(path, offset: int, timeout_s: float) -> dict:
    """The learner's accumulate_gradients (in a LearnerFile) on WORLD processes (probe.py,
    micro-batches from `offset`): each rank's report (its counts and the gradient it was
    left), or the launch that failed."""
    found = _existing(path, "%%writefile cell")
    print(f"launching {found.name} on {WORLD} processes under torchrun ...")  # 5-20 s
    result = measure_no_sync([found], timeout_s, offset)[str(found)]
    if "launch" in result:
        return {"launch": launch_data(result["launch"])}
    ranks = [dict(rank) for rank in result["ranks"]]
    for rank in ranks:  # the gradient as a tensor: it crosses as one, not as many numbers
        if rank.get("grad") is not None:
            rank["grad"] = torch.as_tensor(rank["grad"], dtype=torch.float32)
    return {"ranks": ranks}
