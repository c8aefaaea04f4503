"""Lesson 06's reference scripts: the `%%writefile` cells of solutions/06_ddp.ipynb, as the
package carries them (the notebooks are not installed). `course selftest` writes them into a
fresh folder and runs the checks on them; tests/test_selftest_lessons.py keeps them equal to
the notebook's cells (`written_by` reads them: a `%%writefile -a` cell appends to its file)."""

import re

WRITEFILE = re.compile(r"^%%writefile (?P<append>-a )?\{workdir\}/(?P<name>\S+)\n")


def written_by(nb) -> dict[str, str]:
    """file name -> the text the `%%writefile [-a] {workdir}/NAME` cells of `nb` leave in it
    (IPython ends each cell's text with a newline)."""
    files: dict[str, str] = {}
    for cell in nb.cells:
        match = WRITEFILE.match(cell.source) if cell.cell_type == "code" else None
        if match:
            before = files.get(match["name"], "") if match["append"] else ""
            files[match["name"]] = before + cell.source[match.end() :] + "\n"
    return files


SCRIPTS = {
    "ddp_setup.py": '''"""Per-process set-up for data-parallel training (imported by ddp_train.py)."""
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


# Your fixes: edit the code above, or redefine here any function you change.
### BEGIN SOLUTION
def setup(cfg: workload.Config):
    """Join the process group; return (rank, device, ddp_model, loader, sampler)."""
    backend, device, device_ids = device_for(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group(backend, timeout=timedelta(seconds=60))  # env:// from torchrun
    rank, world = dist.get_rank(), dist.get_world_size()
    model = DDP(workload.make_model().to(device), device_ids=device_ids)
    data = workload.make_dataset()
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, seed=cfg.seed)
    loader = DataLoader(data, batch_size=cfg.batch_size // world, sampler=sampler)  # a share
    return rank, device, model, loader, sampler
### END SOLUTION
''',
    "ddp_train.py": '''"""Data-parallel training. Run: torchrun --standalone --nproc_per_node 2 ddp_train.py"""
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


# Your fixes: edit the code above, or redefine here any function you change.
### BEGIN SOLUTION
def main(cfg: workload.Config) -> None:
    rank, device, model, loader, sampler = setup(cfg)
    optimizer = workload.make_optimizer(model.parameters(), cfg.lr)
    try:
        for epoch in range(cfg.epochs):
            sampler.set_epoch(epoch)  # a new shuffle each epoch: seed + epoch
            loss = train_epoch(model, loader, optimizer, device)
            if rank == 0:  # every rank holds the same weights: one of them writes
                print(f"epoch {epoch}: loss {loss.item():.4f}", flush=True)
                torch.save({"model": model.module.state_dict(), "epoch": epoch}, cfg.checkpoint)
    finally:  # runs when training raises, too
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
