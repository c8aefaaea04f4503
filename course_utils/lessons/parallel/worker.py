"""torchrun entry point of lesson 16: `python -m torch.distributed.run --nproc_per_node=2 -m
course_utils.lessons.parallel.worker TASK --out R.json [...]`.

Tasks: `demo` measures what the notebook shows (tensor_demo.py: a block split by hand, by
`parallelize_module` and with sequence parallelism; pipeline.py: GPipe and 1F1B); `pipeline`
the schedules alone (on more ranks); `shard FILE` runs a learner's `shard_block` (exercise 3,
shard_probe.py). Rank 0 writes one JSON result.
"""

from __future__ import annotations

import argparse
import json
import os
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from ...launch_result import backend_for


def setup() -> torch.device:
    world = int(os.environ["WORLD_SIZE"])
    backend = backend_for(world)
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
    dist.init_process_group(backend, timeout=timedelta(seconds=120))
    torch.set_num_threads(1)
    return device


def run(args, device) -> dict:
    world = dist.get_world_size()
    if args.task in ("demo", "pipeline"):
        from .pipeline import run_schedules

        micro = [int(m) for m in args.micro_batches.split(",")]
        out = {"pipeline": run_schedules(device, micro_batches=micro, steps=args.steps,
                                         forward_s=args.forward_ms / 1e3)}  # fmt: skip
        if args.task == "demo":
            from .tensor_demo import tensor_parallel

            everyone = [None] * world
            dist.all_gather_object(everyone, tensor_parallel(device, world))
            out["tensor"] = everyone
        return out
    if args.task == "shard":
        from .shard_probe import grade_file

        return grade_file(Path(args.names[0]), device)
    raise ValueError(f"unknown task {args.task!r}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("task")
    parser.add_argument("names", nargs="*")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--micro-batches", default="4,8")  # pipeline: m of each run
    parser.add_argument("--steps", type=int, default=1)  # pipeline: measured steps after one
    parser.add_argument("--forward-ms", type=float, default=20.0)  # a stage's forward
    args = parser.parse_args()
    device = setup()
    try:
        result = {
            "result": run(args, device),
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
