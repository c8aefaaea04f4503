"""Exercise 3's check (optional): the learner's `shard_model`, in a file, applied on 2
processes to a fresh 3-block model that then trains 3 SGD-momentum steps (shard_probe.py).
Before launching, shard_model runs once on a pretend world (shard_groups.preflight): a file
that raises, or that shards a copy, is told why without a launch, and the groups it made name
the cause of a failing measurement. Both run beside the learner's code (probes.py); the
parameters they train are compared here with one process's training of the same model."""

from __future__ import annotations

import torch

from ...checks import Part, check, correct
from ...probes import LearnerRaised, observe
from .probes import LearnerFile, shard_groups, shard_training
from .shard_probe import SPEC, global_batches, one_process
from .thresholds import THRESHOLDS


def _not_launched(found: dict) -> list[Part] | None:
    """The verdict where the pretend world already decides it (None: launch)."""
    raised = found["raised"]
    if raised is not None and found["root_first"]:
        return [
            correct(
                "blocks sharded before the root",
                False,
                f"fully_shard({found['root_first']}) raised {raised['type']} "
                f"({raised['message']}) after fully_shard had already sharded a module that "
                "holds it (the root): its parameters were already in the root's group. Shard "
                "bottom-up: each block first, then the root",
            )
        ]
    if raised is not None:
        raise LearnerRaised(str(raised["type"]), str(raised["message"]), str(raised["where"]))
    if found["copy"]:
        return [
            correct(
                "sharded in place",
                False,
                f"shard_model left the model it was given unsharded (every parameter a plain "
                f"tensor) and returned another module ({found['copy']}): sharded a copy. The "
                "caller trains the model it passed; fully_shard changes a module in place",
            )
        ]
    return None


def _drift(found: dict, gap: float) -> str:
    """Why the parameters differ, where the probes saw it: parameters in no group whose copies
    drifted apart between the ranks (gradients never averaged)."""
    plain = found["plain"]
    if not plain or gap <= THRESHOLDS["param_atol"].value:
        return ""
    names = ", ".join(plain[:4]) + (" ..." if len(plain) > 4 else "")
    head = (
        "the head's parameters (the root's own)"
        if all(n.startswith("head.") for n in plain)
        else "some parameters"
    )
    return (
        f": {head} belong to no FSDP group ({names}: plain tensors), so each rank updated "
        f"its copy with its own half batch's gradient, never averaged; the two ranks' copies "
        f"differ by {gap:.2g}. Shard the root after the blocks"
    )


def _precision(ranks: list[dict]) -> str:
    """Why the parameters differ, where the forwards saw it: layers that computed with weights
    of a lower precision than the float32 the model holds (a MixedPrecisionPolicy)."""
    lower = sorted({d for r in ranks for d in r.get("compute_dtypes", [])} - {"float32"})
    if not lower:
        return ""
    return (
        f": the layers computed with {' and '.join(lower)} weights (a MixedPrecisionPolicy's "
        "param_dtype), so every step rounds where one float32 process does not; this exercise "
        "trains in float32, so leave mp_policy out"
    )


def _grouping(found: dict) -> str:
    in_root = found["blocks_in_root"]
    if not in_root:
        return ""
    many = len(in_root) > 1
    blocks = ("blocks " if many else "block ") + ", ".join(map(str, in_root))
    return (
        f": {blocks} {'sit' if many else 'sits'} in the root's group with the head (no "
        "fully_shard of " + ("their" if many else "its") + " own), gathered together"
    )


@check(
    "13-fully-shard",
    points=1,
    hint="Reread section 4: which modules get their own group, in which order are they "
    "wrapped, and which parameters belong to no block? Run the check after each change.",
    in_kernel="the bytes of each rank's parameter shards and the all-gathers of a step "
    "(counted by a patched all-gather in the processes that train the learner's sharded "
    "model), and, to name a cause, the FSDP group of each parameter after its shard_model ran "
    "on a pretend world",
)
def check_shard_file(path) -> list[Part]:
    """`path`: shard.py as check_shard, the locked cell's call, hands it (a
    probes.LearnerFile)."""
    if not callable(path):  # a bare path is data: its probes would run here, not beside it
        raise TypeError(
            f"the check takes the learner's file as check_shard hands it (probes.LearnerFile), "
            f"not a {type(path).__name__}"
        )
    found = observe(shard_groups, path)  # not attempted, raising, or a copy: without a launch
    decided = _not_launched(found)
    if decided is not None:
        return decided
    ranks = observe(shard_training, path)["ranks"]
    raised = next((r["exception"] for r in ranks if r["exception"]), None)
    if raised:
        if raised["type"] == "NotImplementedError":
            raise NotImplementedError()
        raise LearnerRaised(f"{raised['type']} in shard_model", str(raised["message"]))
    return _parts(found, ranks)


def check_shard(path):
    """The locked cell's call, `lesson.check_shard(workdir / "shard.py")`: the check gets the
    learner's file as a handle (probes.LearnerFile), so that its probes run beside the file
    (in the learner's sandbox under `course grade`)."""
    return check_shard_file(path if isinstance(path, LearnerFile) else LearnerFile(path))


check_shard.__dict__.update(check_shard_file.__dict__)  # check_id, points, ..., the body


# --- from what the ranks sent to the parts ------------------------------------------------------


def _bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _as_params(sent) -> dict[str, torch.Tensor]:
    if not isinstance(sent, dict):
        raise TypeError(f"a rank sent {type(sent).__name__} for its parameters")
    return {str(n): torch.as_tensor(v, dtype=torch.float32) for n, v in sent.items()}


def _rank_gap(ranks: list[dict]) -> float:
    """Largest difference between the ranks' copies of plain (unsharded) parameters: 0 where
    their gradients were averaged, as DDP or FSDP2 would."""
    gap, params = 0.0, [_as_params(r["params"]) for r in ranks]
    for name in sorted({n for r in ranks for n in r["plain"]}):
        copies = [p[name] for p in params if name in p]
        if len(copies) == len(params) and all(c.shape == copies[0].shape for c in copies):
            stacked = torch.stack(copies)
            gap = max(gap, (stacked.max(0).values - stacked.min(0).values).abs().max().item())
    return gap


def _parts(found: dict, ranks: list[dict]) -> list[Part]:
    expected = one_process(global_batches(torch.device("cpu")))
    atol = THRESHOLDS["param_atol"].value
    diffs = []
    for r in ranks:
        got = list(_as_params(r["params"]).values())
        same = len(got) == len(expected) and all(
            a.shape == b.shape for a, b in zip(got, expected, strict=False)
        )
        diff = (
            max((a - b).abs().max().item() for a, b in zip(got, expected, strict=True))
            if same
            else float("inf")
        )
        diffs.append((diff, same))
    worst, same = max(diffs)
    full = _bytes(expected)
    largest_block = max(_bytes(b.parameters()) for b in SPEC.build().blocks)
    held = max(r["held"] / full for r in ranks)
    gather = max(r["largest_gather"] / largest_block for r in ranks)
    trains = same and worst <= atol
    gathers = 0 < gather <= THRESHOLDS["gather_fraction"].value
    drift = "" if trains else _drift(found, _rank_gap(ranks)) or _precision(ranks)
    return [
        correct(
            "trains like one process",
            trains,
            f"after 3 SGD-momentum steps the parameters differ from one process on the whole "
            f"batches by at most {worst:.2g} (allowed {atol:g})" + drift
            if same
            else "the model's parameters no longer have the shapes of the model given",
            value=worst,
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
