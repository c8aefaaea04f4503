"""Exercise 3's reference file, as the notebook's %%writefile cell writes it (a test keeps them
equal). Verified by check_shard on 2 gloo processes (torch 2.14, cpu-bf16 class)."""

SHARD = '''"""Tensor parallel on the lesson's Block (imported by the check's worker processes)."""
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module


def shard_block(block, mesh):
    """Split `block` (norm, up, down) over `mesh`, in place; every rank is given the whole
    input and returns the whole output."""
    plan = {"up": ColwiseParallel(), "down": RowwiseParallel()}  # one all-reduce, after down
    return parallelize_module(block, mesh, plan)
'''
