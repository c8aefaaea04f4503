"""Exercise 2's starting point: a colleague's gradient accumulation under DDP, to diagnose.

It means to all-reduce once per optimizer step and to leave the mean gradient of the whole
batch, and it runs without an error. The notebook prints its source, and the benchmark launch
(bench.py) measures it beside the course's own: all-reduces counted by the communication
hook, and the size of the gradient it leaves against the full-batch mean.
"""

from __future__ import annotations

import torch.nn.functional as F


def colleague_accumulate(model, micro_batches) -> None:
    """Accumulate the gradients of `micro_batches` in `model` (DDP-wrapped), syncing once."""
    for i, (x, y) in enumerate(micro_batches):
        loss = F.cross_entropy(model(x), y)
        if i < len(micro_batches) - 1:
            with model.no_sync():  # no all-reduce for these micro-batches
                loss.backward()
        else:
            loss.backward()  # the last one synchronises the accumulated gradients


# --- exercise 1's starting point: a colleague's DDP script, as notebook 06's cells write it ---
# The notebook's two `%%writefile` cells start with these texts (tests/test_lesson_06.py keeps
# them equal); `observe_colleague` (observe.py) runs this copy, since the learner's cells are
# where the fixes go. It runs without an error and its loss goes down.

SETUP = '''"""Per-process set-up for data-parallel training (imported by ddp_train.py)."""
import os
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from course_utils.lessons.distributed import workload


def device_for(local_rank: int) -> tuple[str, torch.device, list[int] | None]:
    """(backend, this process's device, DDP's device_ids): one GPU per process under NCCL."""
    backend = workload.launch_backend(int(os.environ["WORLD_SIZE"]))  # gloo without enough GPUs
    if backend == "nccl":
        torch.cuda.set_device(local_rank)  # "cuda" now means this process's GPU, for NCCL too
        return backend, torch.device("cuda", local_rank), [local_rank]
    return backend, torch.device("cpu"), None  # a CPU module: DDP takes device_ids=None


def setup(cfg: workload.Config):
    """Join the process group; return (rank, device, ddp_model, loader, sampler)."""
    backend, device, device_ids = device_for(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group(backend, timeout=timedelta(seconds=60))  # env:// from torchrun
    rank, world = dist.get_rank(), dist.get_world_size()
    model = DDP(workload.make_model().to(device), device_ids=device_ids)
    data = workload.make_dataset()
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, seed=cfg.seed)
    loader = DataLoader(data, batch_size=cfg.batch_size, sampler=sampler)
    return rank, device, model, loader, sampler
'''

TRAIN = '''"""Data-parallel training. Run: torchrun --standalone --nproc_per_node 2 ddp_train.py"""
import torch
import torch.distributed as dist
import torch.nn.functional as F
from ddp_setup import setup

from course_utils.lessons.distributed import workload


def train_epoch(model, loader, optimizer, device) -> torch.Tensor:
    """One pass over this process's shard; returns the last batch's loss."""
    for x, y in loader:
        loss = F.cross_entropy(model(x.to(device)), y.to(device))
        optimizer.zero_grad()
        loss.backward()  # DDP averages the gradients over ranks here
        optimizer.step()
    return loss


def main(cfg: workload.Config) -> None:
    rank, device, model, loader, sampler = setup(cfg)
    optimizer = workload.make_optimizer(model.parameters(), cfg.lr)
    try:
        for epoch in range(cfg.epochs):
            loss = train_epoch(model, loader, optimizer, device)
            if rank == 0:  # every rank holds the same weights: one of them writes
                print(f"epoch {epoch}: loss {loss.item():.4f}", flush=True)
                torch.save({"model": model.state_dict(), "epoch": epoch}, cfg.checkpoint)
    finally:  # runs when training raises, too
        dist.destroy_process_group()
'''

MAIN_GUARD = """

if __name__ == "__main__":
    main(workload.parse_args())
"""


def colleague_scripts() -> dict[str, str]:
    """file name -> the colleague's file, runnable as it is."""
    return {"ddp_setup.py": SETUP, "ddp_train.py": TRAIN + MAIN_GUARD}
