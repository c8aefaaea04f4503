"""The fast-loader check's probes: what a learner's loader does at work, read beside it (in the
learner's kernel under `course grade`) and returned as plain data: which items came in which
order, which processes loaded them, which processes outlived the first epoch, what survives
pickling as under spawn, and whether batches bound for a GPU are pinned by the loader. The
check (checks.py, loader_parts.py) decides from these readings; it also times epochs of the
loader from its own side (`loader_epoch`), against a baseline it runs itself."""

from __future__ import annotations

import os

import psutil
import torch
from torch.utils.data import DataLoader, Subset

from ...data import close_loader
from ...probes import probe
from .demo import BATCH, Traced, decode_heavy
from .probes import TransferSpy, spawn_problems


def traced_images(n_images: int) -> Traced:
    """The check's data set: `n_images` decode-heavy images less 33, so the last batch is
    partial, each item labelled with (index, loading process)."""
    images = decode_heavy(n_images)
    return Traced(Subset(images, range(len(images) - BATCH // 2 - 1)))


def _epoch(loader) -> tuple[list[int], set[int]]:
    """Item indices in the order they came, and the processes that loaded them."""
    order, pids = [], set()
    for _, tag in loader:
        order += tag[:, 0].tolist()
        pids |= set(tag[:, 1].tolist())
    return order, pids


def _collate_pins(loader, dataset) -> int:
    """pin_memory() calls the loader's collate_fn makes on one batch, run here in-process."""
    collate = getattr(loader, "collate_fn", None)
    if collate is None:
        return 0
    spy = TransferSpy(simulate=True)
    try:
        with spy:
            collate([dataset[i] for i in range(2)])
    except Exception:
        return 0  # what iterating the loader shows is judged above
    return spy.pinned_pageable


def _two_epochs(loader) -> dict:
    """Both epochs' orders and loading processes, and the processes alive after the first."""
    try:
        first, pids1 = _epoch(loader)
        alive = {p.pid for p in psutil.Process().children(recursive=True)}  # after epoch 1
        second, pids2 = _epoch(loader)
    except Exception as exc:  # a collate that pins in a worker, a lambda under spawn, ...
        lines = [x for x in str(exc).strip().splitlines() if x.strip()]
        line = f"{lines[0]} ... {lines[-1].strip()}" if len(lines) > 1 else "".join(lines)
        return {"raised": f"{type(exc).__name__}: {line}"}
    return {
        "first": first,
        "second": second,
        "pids1": sorted(pids1),
        "pids2": sorted(pids2),
        "alive": sorted(alive),
    }


@probe
def loader_seen(make_loader, n_images: int, device: str) -> dict:
    """The learner's loader for `device` on the check's data set, two epochs, and the same
    function asked for a CUDA loader: what the check's parts need, as data."""
    dataset = traced_images(n_images)
    loader = make_loader(dataset, BATCH, torch.device(device))
    try:
        seen = {
            "spawn": spawn_problems(loader) if isinstance(loader, DataLoader) else [],
            "main": os.getpid(),
            "num_workers": getattr(loader, "num_workers", None),
            **_two_epochs(loader),
        }
    finally:
        close_loader(loader)
    if "raised" in seen:
        return seen
    gpu = make_loader(dataset, BATCH, torch.device("cuda"))
    pinned = bool(getattr(gpu, "pin_memory", False))
    collate_pins = _collate_pins(gpu, dataset)
    if torch.cuda.is_available():  # observe it: the batches themselves come out pinned
        try:
            pinned = next(iter(gpu))[0].is_pinned()
        finally:
            close_loader(gpu)
    return {**seen, "cuda_pinned": pinned, "cuda_collate_pins": collate_pins}


# The loaders whose epochs the check times: kept here between its calls (its workers stay
# up, as persistent_workers asks), by the key the check chose, until `loader_closed`.
_TIMED: dict[str, object] = {}


@probe
def loader_epoch(make_loader, key: str, n_images: int, device: str) -> dict:
    """One epoch of the learner's loader over `decode_heavy(n_images)` (made on the first
    call for `key`, then reused): the samples and the sum of their labels, the work done."""
    loader = _TIMED.get(key)
    if loader is None:
        loader = make_loader(decode_heavy(n_images), BATCH, torch.device(device))
        _TIMED[key] = loader
    samples = labels = 0
    for _, y in loader:
        samples, labels = samples + len(y), labels + int(torch.as_tensor(y).sum())
    return {"samples": samples, "labels": labels}


@probe
def loader_closed(make_loader, key: str) -> None:
    """Stop the workers of the loader timed under `key`."""
    loader = _TIMED.pop(key, None)
    if loader is not None:
        close_loader(loader)
