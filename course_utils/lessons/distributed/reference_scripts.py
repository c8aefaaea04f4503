"""Lesson 06's reference scripts: the `%%writefile` cells of solutions/06_ddp.ipynb, as the
package carries them (the notebooks are not installed). `course selftest` writes them into a
fresh folder and runs the checks on them; tests/test_selftest_lessons.py keeps them equal to
the notebook's cells."""

SCRIPTS = {
    "ddp_setup.py": '''"""Per-process set-up for data-parallel training (imported by ddp_train.py)."""
import os
from datetime import timedelta

import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from course_utils.lessons.distributed import workload


def setup(cfg: workload.Config):
    """Join the process group; return (rank, device, ddp_model, loader, sampler)."""
    ### BEGIN SOLUTION
    backend, device = workload.backend_and_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group(backend, timeout=timedelta(seconds=60))  # env:// from torchrun
    rank, world = dist.get_rank(), dist.get_world_size()
    model = DDP(workload.make_model().to(device), device_ids=workload.device_ids(device))
    data = workload.make_dataset()
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, seed=cfg.seed)
    loader = DataLoader(data, batch_size=cfg.batch_size // world, sampler=sampler)
    return rank, device, model, loader, sampler
    ### END SOLUTION
''',
    "ddp_train.py": '''"""Data-parallel training. Run: torchrun --standalone --nproc_per_node 2 ddp_train.py"""
import torch
import torch.distributed as dist
import torch.nn.functional as F
from ddp_setup import setup

from course_utils.lessons.distributed import workload


def main(cfg: workload.Config) -> None:
    rank, device, model, loader, sampler = setup(cfg)
    optimizer = workload.make_optimizer(model.parameters(), cfg.lr)
    ### BEGIN SOLUTION
    try:
        for epoch in range(cfg.epochs):
            sampler.set_epoch(epoch)  # a new shuffle each epoch: seed + epoch
            for x, y in loader:
                loss = F.cross_entropy(model(x.to(device)), y.to(device))
                optimizer.zero_grad()
                loss.backward()  # DDP averages the gradients over ranks here
                optimizer.step()
            if rank == 0:  # every rank holds the same weights: one of them writes
                print(f"epoch {epoch}: loss {loss.item():.4f}", flush=True)
                torch.save({"model": model.module.state_dict(), "epoch": epoch}, cfg.checkpoint)
    finally:
        dist.destroy_process_group()
    ### END SOLUTION


if __name__ == "__main__":
    main(workload.parse_args())
''',
    "accumulate.py": '''"""Gradient accumulation under DDP (imported by the check's worker processes)."""
import contextlib

import torch.nn.functional as F


def accumulate_gradients(model, micro_batches):
    """Leave in .grad the mean gradient over every micro-batch of every rank."""
    ### BEGIN SOLUTION
    k = len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        last = i == k - 1
        with contextlib.nullcontext() if last else model.no_sync():
            loss = F.cross_entropy(model(x), y) / k  # forward inside no_sync too
            loss.backward()
    ### END SOLUTION
''',
}
