"""What the fast-loader check observes of a loader at work: which items come in which order,
which processes load them, whether the next epoch is served by processes that outlived the first, what survives
pickling as under spawn, and whether batches bound for a GPU are pinned by the loader."""

from __future__ import annotations

import os

import psutil
import torch
from torch.utils.data import DataLoader

from ...checks import Part, correct
from ...data import close_loader
from .demo import BATCH, usable_cpus
from .probes import TransferSpy, spawn_problems


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


def observe_loader(loader, dataset, make_loader) -> list[Part]:
    """The parts of check 03-fast-loader that need no timing."""
    problems = spawn_problems(loader) if isinstance(loader, DataLoader) else []
    parts = [
        correct(
            "spawn-safe",
            not problems,
            "; ".join(problems) or "what the workers get pickles by reference",
        )
    ]
    try:
        first, pids1 = _epoch(loader)
        alive = {p.pid for p in psutil.Process().children(recursive=True)}  # after epoch 1
        second, pids2 = _epoch(loader)
    except Exception as exc:  # a collate that pins in a worker, a lambda under spawn, ...
        lines = [x for x in str(exc).strip().splitlines() if x.strip()]
        line = f"{lines[0]} ... {lines[-1].strip()}" if len(lines) > 1 else "".join(lines)
        return [
            *parts,
            correct(
                "two epochs", False, f"iterating your loader raised {type(exc).__name__}: {line}"
            ),
        ]
    n, workers = len(dataset), pids1 - {os.getpid()}
    every = sorted(first) == list(range(n)) and sorted(second) == list(range(n))
    moved = first != second and first != sorted(first)
    dropped = not every and len(set(first)) == len(first) == n - n % BATCH
    parts.append(
        correct(
            "reshuffled",
            every and moved,
            f"each epoch {'gave every image once' if every else 'did NOT give every image exactly once'}"
            + (
                f" ({len(first)} of {n}: the partial last batch was dropped; drop_last=False)"
                if dropped
                else ""
            )
            + ", "
            + (
                "in a new order each epoch"
                if moved
                else "in the same order both epochs: a training loader reshuffles every epoch"
            ),
        )
    )
    cap = usable_cpus()
    parts.append(
        correct(
            "workers",
            1 <= len(workers) <= cap,
            f"{len(workers)} worker process(es) loaded the batches; {cap} CPUs usable here"
            + (": loading still runs in the main process, between steps" if not workers else "")
            + (
                ": more workers than CPUs only compete (and cost memory)"
                if len(workers) > cap
                else ""
            ),
        )
    )
    if workers:
        kept = bool(pids2 - {os.getpid()}) and pids2 - {os.getpid()} <= alive
        parts.append(
            correct(
                "workers kept",
                kept,
                "the same workers served both epochs"
                if kept
                else "new worker processes started for the second epoch (seconds each under spawn): persistent_workers=True",
            )
        )
    gpu = make_loader(dataset, BATCH, torch.device("cuda"))
    pinned = bool(getattr(gpu, "pin_memory", False))
    collate_pins = _collate_pins(gpu, dataset)
    if torch.cuda.is_available():  # observe it: the batches themselves come out pinned
        try:
            pinned = next(iter(gpu))[0].is_pinned()
        finally:
            close_loader(gpu)
    if collate_pins:
        parts.append(
            correct(
                "pinned by the loader",
                False,
                f"for device cuda your collate_fn called pin_memory() {collate_pins} time(s) on one "
                "batch: a collate runs in the worker processes, per batch (and fails there on CUDA "
                "under fork); pin_memory=True lets the loader's own thread pin",
            )
        )
    parts.append(
        correct(
            "pinned for a GPU",
            pinned,
            f"for device cuda your loader has pin_memory={pinned}: the loader's own thread should pin "
            "batches bound for a GPU (decided from the device you are given)",
        )
    )
    return parts
