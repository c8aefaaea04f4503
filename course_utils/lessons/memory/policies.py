"""A selective-checkpointing policy as data: what it decided for each operator, recorded beside
the learner's code (`recording`) and replayed in the judge (`replaying`), which measures the
plan itself. In torch 2.14 a policy runs in the forward only (its context's `is_recompute` is
always False); the recomputation reads the cached outputs by position."""

from __future__ import annotations

from collections.abc import Callable

from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

SAVE_NAMES = ("MUST_SAVE", "PREFER_SAVE")
MATMULS = ("aten.mm.", "aten.addmm.", "aten.bmm.", "aten._scaled_dot_product")


def decision_name(decision) -> str:
    """A policy's return value in words: a CheckpointPolicy's name, a bool as torch reads it
    (True: MUST_SAVE), anything else "invalid: <type>" (torch takes it as recompute)."""
    if isinstance(decision, bool):
        return "MUST_SAVE" if decision else "PREFER_RECOMPUTE"
    if isinstance(decision, CheckpointPolicy):
        return decision.name
    return f"invalid: {type(decision).__name__}"


def recording(policy: Callable, regions: list) -> Callable:
    """A context_fn for checkpoint() that runs `policy` and appends, per checkpointed region, the
    list of [operator, decision name] it gave in order."""

    def context_fn():
        calls: list = []
        regions.append(calls)

        def recorded(ctx, op, *args, **kwargs):
            decision = policy(ctx, op, *args, **kwargs)
            calls.append([str(op), decision_name(decision)])
            return decision

        return create_selective_checkpoint_contexts(recorded)

    return context_fn


class Mismatch(Exception):
    """Raised when a replay meets another operator than the one recorded at that position."""


def replaying(regions: list) -> Callable:
    """A context_fn that gives, region by region and call by call, the recorded decisions
    (an invalid one as PREFER_RECOMPUTE, as torch takes it)."""
    pending = iter(regions)

    def context_fn():
        calls = iter(next(pending))

        def replayed(ctx, op, *args, **kwargs):
            name, decision = next(calls, (None, None))
            if name != str(op):
                raise Mismatch(f"recorded {name}, replayed {op}")
            return CheckpointPolicy.__members__.get(decision, CheckpointPolicy.PREFER_RECOMPUTE)

        return create_selective_checkpoint_contexts(replayed)

    return context_fn


def summary(regions: list) -> dict:
    """{"matmuls recomputed": [...], "saved": n, "recomputed": n, "invalid": [...]} over all
    regions: the facts a message may name."""
    calls = [call for region in regions for call in region]
    saved = [op for op, d in calls if d in SAVE_NAMES]
    invalid = sorted({d.split(": ")[1] for _, d in calls if d.startswith("invalid")})
    matmuls = sorted({op for op, d in calls if op.startswith(MATMULS) and d not in SAVE_NAMES})
    return {
        "matmuls recomputed": matmuls,
        "saved": len(saved),
        "calls": len(calls),
        "invalid": invalid,
    }


def logged_ops(regions: list) -> list[str]:
    """The distinct operators a policy was asked about, in first-seen order."""
    return list(dict.fromkeys(op for region in regions for op, _ in region))
