"""What `course selftest` runs for notebook 03: each check with its reference answer, and
the headline effect (DataLoader workers, time per training epoch) as cells 7-21 do."""

from __future__ import annotations

import torch

from ...data import close_loader
from ...device import get_device, synchronize
from ...effects import effect
from ...models import SmallCNN
from . import reference as ref
from .demo import BATCH, decode_heavy, plain_loader, run_epoch, train_step


def answers() -> dict:
    """check id -> the arguments its locked cell passes, as the reference answers."""
    return {
        "03-profile": lambda: (ref.reference_profile,),
        "03-fast-loader": lambda: (ref.reference_fast_loader,),
        "03-transfer": lambda: (ref.reference_to_device,),
        "03-normalise": lambda: (ref.reference_make_normaliser,),
    }


def workers_effect():
    device = get_device()
    if device.type == "cpu":
        torch.set_num_threads(1)  # as the notebook: the workers need the other cores
    data = decode_heavy()
    model = SmallCNN(width=8).to(device)
    step = train_step(model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), device)

    def sync():
        synchronize(device)

    plain = ref.reference_profile(plain_loader(data, BATCH), step, sync)
    fast = ref.reference_fast_loader(data, BATCH, device)
    run_epoch(fast)  # starts the workers: not part of the comparison
    fast_profile = ref.reference_profile(fast, step, sync)
    close_loader(fast)
    return effect(
        f"DataLoader workers ({fast.num_workers})",
        metric="time per training epoch",
        baseline=plain.total_s,
        improved=fast_profile.total_s,
        show=False,
    )


def effects() -> dict:
    return {"DataLoader workers": workers_effect}
