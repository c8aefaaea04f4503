"""One process as one rank of a pretend world: the real torch.distributed code (DTensor,
`parallelize_module`, FSDP2, DDP) runs, and every collective moves nothing.

It is torch's own fake process group (`torch.testing._internal.distributed.fake_pg`, the one
torch's tests use to trace large parallel models on one machine): a collective returns at once
and leaves its output as it was. What a rank *holds* (shards, buffers), and which collectives
it *issues* with which shapes, are exactly what a real rank would hold and issue; the values
a collective should have produced are not (a sum over ranks is not computed). So it answers
"how many bytes?" and "which collectives?", never "which numbers?": a real launch does that.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

import torch.distributed as dist


@contextlib.contextmanager
def pretend_world(rank: int, world: int) -> Iterator[None]:
    """Inside, this process is rank `rank` of `world`, with collectives that send nothing."""
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise RuntimeError("this process already belongs to a process group")
    hook = sys.excepthook  # init_process_group chains a "[rankN]:" prefix onto it
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
    try:
        yield
    finally:
        dist.destroy_process_group()
        sys.excepthook = hook
