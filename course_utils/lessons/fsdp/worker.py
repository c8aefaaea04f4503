"""torchrun entry point of lesson 13: `python -m torch.distributed.run --standalone
--nproc_per_node=2 -m course_utils.lessons.fsdp.worker TASK --out R.json [...]`.

Tasks: `plans NAME... [--untimed A,B]` measures every plan on the named models
(scenarios.MODELS), only counting the all-gathers of the untimed ones; `demo`
adds what the notebook shows beside them (mixed precision, a sharded checkpoint); `shard
FILE` grades a learner's `shard_model` (shard_probe). Rank 0 writes one JSON result.
"""

from __future__ import annotations

import argparse
import json
import os
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from . import collectives
from .launch import backend_for


def setup() -> torch.device:
    world = int(os.environ["WORLD_SIZE"])
    backend = backend_for(world)
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
    dist.init_process_group(backend, timeout=timedelta(seconds=120))
    collectives.install()
    torch.set_num_threads(1)
    return device


def run(task: str, names: list[str], device, rounds: int, steps: int, folder: Path,
        untimed: tuple = ()) -> dict:  # fmt: skip
    from . import scenarios

    if task == "plans":  # untimed models: all-gathers counted, no timing rounds
        return {
            n: scenarios.measure(
                n, device, rounds=0 if n in untimed else rounds, steps=steps, peaks=False
            )
            for n in names
        }
    if task == "demo":
        from .extras import checkpoint_round_trip, mixed_precision

        return {
            "plans": scenarios.measure("demo", device, rounds=rounds, steps=steps),
            "ranks": scenarios.per_rank("demo", device),
            "mixed_precision": mixed_precision(device),
            "checkpoint": checkpoint_round_trip(device, folder / "checkpoint"),
        }
    if task == "shard":
        from .shard_probe import grade_file

        return grade_file(Path(names[0]), device)
    raise ValueError(f"unknown task {task!r}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("task")
    parser.add_argument("names", nargs="*")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=4)  # interleaved timing rounds
    parser.add_argument("--steps", type=int, default=2)  # training steps per timed sample
    parser.add_argument("--untimed", default="")  # plans: models (a,b) only counted, not timed
    args = parser.parse_args()
    device = setup()
    try:
        untimed = tuple(filter(None, args.untimed.split(",")))
        result = run(
            args.task, args.names, device, args.rounds, args.steps, args.out.parent, untimed
        )
        result = {
            "result": result,
            "world": dist.get_world_size(),
            "backend": dist.get_backend(),
            "device": str(device),
            "torch": torch.__version__,
        }
        if dist.get_rank() == 0:
            args.out.write_text(json.dumps(result))
        dist.barrier()  # nobody tears down its connections while a peer still uses them
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
