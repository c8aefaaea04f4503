"""The parts of check 03-fast-loader that need no timing, decided from what the kernel's probe
(observe.loader_seen) read of the learner's loader: every image once per epoch and a new
order, worker processes that exist, fit the CPUs and outlive the epoch, parts that pickle
as under spawn, and pinning left to the loader for a GPU."""

from __future__ import annotations

from ...checks import Part, correct


def _ints(values) -> list[int]:
    return [int(v) for v in values]


def loader_parts(seen: dict, n: int, batch: int, cap: int) -> list[Part]:
    """`seen`: observe.loader_seen's reading; `n` items in the data set, batches of `batch`,
    `cap` CPUs usable here."""
    problems = [str(p) for p in seen.get("spawn", [])]
    parts = [
        correct(
            "spawn-safe",
            not problems,
            "; ".join(problems) or "what the workers get pickles by reference",
        )
    ]
    if "raised" in seen:
        said = f"iterating your loader raised {seen['raised']}"
        return [*parts, correct("two epochs", False, said)]
    first, second = _ints(seen["first"]), _ints(seen["second"])
    main = int(seen["main"])
    workers, later = set(_ints(seen["pids1"])) - {main}, set(_ints(seen["pids2"])) - {main}
    every = sorted(first) == list(range(n)) and sorted(second) == list(range(n))
    moved = first != second and first != sorted(first)
    dropped = not every and len(set(first)) == len(first) == n - n % batch
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
        kept = bool(later) and later <= set(_ints(seen["alive"]))
        parts.append(
            correct(
                "workers kept",
                kept,
                "the same workers served both epochs"
                if kept
                else "new worker processes started for the second epoch (seconds each under spawn): persistent_workers=True",
            )
        )
    collate_pins, pinned = int(seen["cuda_collate_pins"]), bool(seen["cuda_pinned"])
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
