"""Exercise 3's check (optional): the learner's `shard_model`, in a file, applied on 2
processes to a fresh 3-block model that then trains 3 SGD-momentum steps (shard_probe.py).
Before launching, shard_model runs once here on a pretend world (shard_groups.preflight): a
file that raises, or that shards a copy, is told why without a launch, and the groups it made
name the cause of a failing measurement."""

from __future__ import annotations

from pathlib import Path

from ...checks import Part, check, correct
from .launch import describe, torchrun
from .shard_groups import WORLD, Preflight, preflight
from .shard_probe import SPEC
from .thresholds import THRESHOLDS


def _not_launched(found: Preflight) -> list[Part] | None:
    """The verdict where the pretend world already decides it (None: launch)."""
    if found.raised is not None and found.root_first:
        exc = found.raised
        first = (str(exc).strip().splitlines() or [""])[0]
        return [
            correct(
                "blocks sharded before the root",
                False,
                f"fully_shard({found.root_first}) raised {type(exc).__name__} ({first}) after "
                "fully_shard had already sharded a module that holds it (the root): its "
                "parameters were already in the root's group. Shard bottom-up: each block "
                "first, then the root",
            )
        ]
    if found.raised is not None:
        raise found.raised
    if found.copy:
        return [
            correct(
                "sharded in place",
                False,
                f"shard_model left the model it was given unsharded (every parameter a plain "
                f"tensor) and returned another module ({found.copy}): sharded a copy. The "
                "caller trains the model it passed; fully_shard changes a module in place",
            )
        ]
    return None


def _drift(found: Preflight, ranks: list[dict]) -> str:
    """Why the parameters differ, where the probes saw it: parameters in no group whose copies
    drifted apart between the ranks (gradients never averaged)."""
    gap = max(r["rank_gap"] for r in ranks)
    if not found.plain or gap <= THRESHOLDS["param_atol"].value:
        return ""
    names = ", ".join(found.plain[:4]) + (" ..." if len(found.plain) > 4 else "")
    head = (
        "the head's parameters (the root's own)"
        if all(n.startswith("head.") for n in found.plain)
        else "some parameters"
    )
    return (
        f": {head} belong to no FSDP group ({names}: plain tensors), so each rank updated "
        f"its copy with its own half batch's gradient, never averaged; the two ranks' copies "
        f"differ by {gap:.2g}. Shard the root after the blocks"
    )


def _grouping(found: Preflight) -> str:
    if not found.blocks_in_root:
        return ""
    many = len(found.blocks_in_root) > 1
    blocks = ("blocks " if many else "block ") + ", ".join(map(str, found.blocks_in_root))
    return (
        f": {blocks} {'sit' if many else 'sits'} in the root's group with the head (no "
        "fully_shard of " + ("their" if many else "its") + " own), gathered together"
    )


@check(
    "13-fully-shard",
    points=1,
    hint="Reread section 4: which modules get their own group, in which order are they "
    "wrapped, and which parameters belong to no block? Run the check after each change.",
)
def check_shard(path) -> list[Part]:
    path = Path(path).resolve()
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: run the %%writefile cell first")
    found = preflight(path, SPEC)  # not attempted, raising, or a copy: without a launch
    decided = _not_launched(found)
    if decided is not None:
        return decided
    print(f"training your shard_model on {describe(WORLD)} ...")
    launch = torchrun(
        "shard",
        [path],
        nproc=WORLD,
        timeout_s=THRESHOLDS["shard_launch_timeout_s"].value,
        learner=True,
    )
    if launch.result is None:
        raise RuntimeError(launch.failure(f"shard_model in {path.name}"))
    ranks = launch.result["result"]["ranks"]
    raised = next((r["exception"] for r in ranks if r["exception"]), None)
    if raised:
        if raised["type"] == "NotImplementedError":
            raise NotImplementedError()
        raise RuntimeError(f"{raised['type']} in shard_model: {raised['message']}")
    return _parts(found, ranks)


def _parts(found: Preflight, ranks: list[dict]) -> list[Part]:
    worst = max(ranks, key=lambda r: r["diff"])
    atol = THRESHOLDS["param_atol"].value
    held = max(r["held"] / r["full"] for r in ranks)
    gather = max(r["largest_gather"] / r["largest_block"] for r in ranks)
    trains = worst["same_shapes"] and worst["diff"] <= atol
    gathers = 0 < gather <= THRESHOLDS["gather_fraction"].value
    return [
        correct(
            "trains like one process",
            trains,
            f"after 3 SGD-momentum steps the parameters differ from one process on the whole "
            f"batches by at most {worst['diff']:.2g} (allowed {atol:g})"
            + ("" if trains else _drift(found, ranks))
            if worst["same_shapes"]
            else "the model's parameters no longer have the shapes of the model given",
            value=worst["diff"],
            threshold=atol,
            better="lower",
        ),
        correct(
            "parameters sharded",
            held <= THRESHOLDS["held_fraction"].value,
            f"each rank holds {held:.2f} of the model's parameter bytes",
            value=held,
            threshold=THRESHOLDS["held_fraction"].value,
            better="lower",
        ),
        correct(
            "one block gathered at a time",
            gathers,
            f"the largest all-gather of a step moved {gather:.2f}x the largest block's bytes "
            f"({ranks[0]['gathers']} all-gathers per step)" + ("" if gathers else _grouping(found)),
            value=gather,
            threshold=THRESHOLDS["gather_fraction"].value,
            better="lower",
        ),
    ]
