"""Lesson 03's probes for exercises 1 and 3: each builds its specimen from plain arguments,
runs the learner's function beside it (in the learner's kernel under `course grade`) and
returns what it saw as data (course_utils.probes). The checks (profile_check.py,
transfer_check.py) compute what that data must equal themselves."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader

from ...data import CIFAR_MEAN, CIFAR_STD
from ...probes import probe
from .demo import SimulatedTrainer, SleepyData, cpu_pipeline
from .probes import Bookended, DeviceFaults, TransferSpy, faults_info, raised_info, uint8_batch

PROFILE_BATCH = 8  # the profile scenarios' batches: 12 of 8 items for 96


@probe
def profile_reading(profile_epoch, n: int, item_s: float, step_s: float, edge_s: float) -> dict:
    """The learner's profiler on one epoch of `n` items taking `item_s` each to load, a
    simulated device working `step_s` per step, and a loader that waits `edge_s` before its
    first batch and after its last; and what the dataset and the device measured of their own
    time (the dataset's loading seconds, the device's busy seconds)."""
    data = SleepyData(n, item_s)
    device = SimulatedTrainer(step_s)
    loader = Bookended(DataLoader(data, batch_size=PROFILE_BATCH), edge_s, data)
    try:
        device.synchronize()
        got = profile_epoch(loader, device.step, device.synchronize)
        device.synchronize()
    finally:
        device.close()
    return {"profile": got, "loading_s": data.loading_s, "busy_s": device.busy_s}


# --- exercise 3: the batch on the device ---------------------------------------------------


@probe
def transfer_output(to_device, device: str, size: int | None, mean, std) -> dict:
    """The learner's to_device on a uint8 batch: the lesson's images through cpu_pipeline
    (`size` None) or uint8_batch(16, size); its output and the pin_memory() calls it made on
    pageable memory (pinning simulated where there is no GPU)."""
    device = torch.device(device)
    if size is None:
        images = cpu_pipeline()[0]
        batch = (images, torch.arange(len(images)))
    else:
        batch = uint8_batch(16, size)
    spy = TransferSpy(simulate=device.type != "cuda")  # no pinned memory without a GPU
    spy.batch_numels = (batch[0].numel(), batch[1].numel())
    with spy:
        out = to_device(batch, device, tuple(mean), tuple(std))
    return {"out": out, "pins": spy.pinned_pageable}


def _on_meta(to_device, cuda_as_meta: bool) -> dict:
    """Two batches, pageable then (simulated) pinned, through to_device on the meta device,
    or asked for `cuda` with meta standing in for it: what crossed, how, in which call, and
    where it went."""
    spy = TransferSpy(simulate=True, cuda_as="meta" if cuda_as_meta else None)
    pageable = uint8_batch()
    pinned = tuple(t.clone() for t in pageable)
    spy.pinned_ids.update(id(t) for t in pinned)
    spy.batch_numels = (pageable[0].numel(), pageable[1].numel())
    device = torch.device("cuda" if cuda_as_meta else "meta")  # made outside the spy
    faults = DeviceFaults()  # outside the spy: it sees the calls the spy passes on
    outs = []
    try:
        with faults, spy:
            for call, b in enumerate((pageable, pinned)):
                spy.call = call
                outs.append(to_device(b, device, CIFAR_MEAN, CIFAR_STD))
    except Exception as exc:  # the learner's fault if a device fault was seen, else meta's
        return {"raised": raised_info(exc), "faults": faults_info(faults)}
    devices = [
        [t.device.type if isinstance(t, torch.Tensor) else type(t).__name__ for t in o][:2]
        for o in outs
    ]
    return {
        "devices": devices,
        "crossed_bytes": spy.crossed_bytes,
        "copies": [list(c) for c in spy.copies],
        "sources": list(spy.sources),
        "dtypes": list(spy.dtypes),
        "others": [dict(o) for o in spy.others],
        "pins": spy.pinned_pageable,
    }


@probe
def transfer_on_meta(to_device) -> dict:
    """On the meta device (a stand-in for a GPU on any machine): where the results land, the
    bytes that cross, per-batch pinning, non_blocking from (simulated) pinned memory; and,
    where this machine has no GPU, the same function asked for `cuda` (for code that
    decides from `device.type`), meta standing in."""
    seen = {"meta": _on_meta(to_device, False)}
    if "raised" not in seen["meta"] and not torch.cuda.is_available():
        seen["cuda"] = _on_meta(to_device, True)
    return seen
