"""torchrun entry point of lesson 14: `python -m torch.distributed.run --nproc_per_node=2 -m
course_utils.lessons.timeline.worker LOOPS.json OUT_FOLDER`.

Every rank records each loop of LOOPS.json (loops.spec dicts) as DistributedDataParallel
training, one thread per rank, and writes its trace to OUT_FOLDER/<i>-rank<r>.json. A loop
with stall "communication" trains a model whose gradient is too large for the all-reduce to
hide behind backward (a wide embedding table, dense gradients, every row all-reduced).
"""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from .loops import make_model, make_step, record, slim

COMM_DEPTH = 6  # the "communication" loop's MLP: 14 gradient tensors


def run(loops: list[dict], folder: Path) -> None:
    me = dist.get_rank()
    for i, loop in enumerate(loops):
        if loop["stall"] == "communication":  # averaged by hand, tensor by tensor: no DDP
            step = make_step(loop, me, make_model(loop["seed"], depth=COMM_DEPTH))
        else:
            model = make_model(loop["seed"])
            ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=1)
            step = make_step(loop, me, ddp)
        dist.barrier()  # both ranks start recording together
        trace = slim(record(step))
        (folder / f"{i}-rank{me}.json").write_text(json.dumps(trace))
        dist.barrier()


def main() -> None:
    loops, folder = json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    try:
        run(loops, folder)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    if int(os.environ.get("RANK", "0")) == 0:
        (folder / "done").write_text("ok")


if __name__ == "__main__":
    main()
