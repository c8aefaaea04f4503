"""Exercise 3's check (optional): the learner's `shard_block(block, mesh)`, in a file, applied
to the check's block. First on a pretend world (shard_probe.preflight): a file that raises,
leaves a weight whole or sends more than one all-reduce per forward is told so without a
launch. Then on 2 processes (shard_probe.grade_file): the output and every gradient of one
step must equal the block whole in one process, which this check computes itself."""

from __future__ import annotations

import torch

from ...checks import Part, check, correct
from ...probes import LearnerRaised, observe
from .probes import LearnerFile, shard_preflight, shard_run
from .shard_probe import SHAPE, WEIGHTS, block, whole_step
from .thresholds import THRESHOLDS


def _held(found: dict) -> list[str]:
    """The weights a rank holds more than THRESHOLDS["held_fraction"] of."""
    whole = dict(block().named_parameters())
    limit = THRESHOLDS["held_fraction"].value
    return [n for n in WEIGHTS if found["held"].get(n, 0) > limit * whole[n].numel()]


def _forward_said(calls: list) -> str:
    if not calls:
        return "no collective"
    return ", ".join(f"{kind} of {size:,} B" for kind, size in calls)


def _preflight_parts(found: dict) -> list[Part] | None:
    """The verdict where the pretend world already decides it (None: launch)."""
    raised = found["raised"]
    if raised is not None and raised.get("layouts"):
        return [_step_raised(raised)]
    if raised is not None:
        raise LearnerRaised(str(raised["type"]), str(raised["message"]), str(raised["where"]))
    whole_bytes = _whole_bytes()
    forward = [tuple(c) for c in found["forward"]]
    minimal = forward == [("all_reduce", whole_bytes)]
    held = _held(found)
    if held or not minimal:
        parts = [
            correct(
                "each rank holds half of each weight",
                not held,
                "each rank holds about half of up.weight and down.weight"
                if not held
                else f"each rank holds all of {' and '.join(held)}: that layer is not split",
            ),
            correct(
                "one all-reduce per forward",
                minimal,
                f"a forward of the block sends {_forward_said(forward)}; the fewest a split "
                f"block needs is one all-reduce of its output ({whole_bytes:,} B)",
            ),
        ]
        return parts
    return None


# a Linear's weight is (out features, in features): split by rows it is column-parallel
STYLE = {"Shard(dim=0)": "column-parallel", "Shard(dim=1)": "row-parallel", "whole": "whole"}


def _step_raised(raised: dict) -> Part:
    """A block that shards but cannot take a step: torch's error, and the layout that made it."""
    layouts = {n: str(v) for n, v in raised["layouts"].items()}
    said = ", ".join(f"{n} {v} ({STYLE.get(v, 'another split')})" for n, v in layouts.items())
    megatron = [STYLE.get(v) for v in layouts.values()] == ["column-parallel", "row-parallel"]
    rule = (
        ""
        if megatron
        else ". A column-parallel layer's output is split along its features, which only a "
        "row-parallel layer expects as its input: up column-parallel, then down row-parallel"
    )
    return correct(
        "a step of the sharded block",
        False,
        f"a step of your block raised {raised['type']}: {raised['message']}. Your layout: "
        f"{said}{rule}",
    )


def _whole_bytes() -> int:
    """Bytes of the block's output (float32): the one all-reduce a split block needs."""
    return SHAPE[0] * SHAPE[1] * SHAPE[2] * 4


def _grads_off(off: dict[str, float]) -> str:
    """Which gradients differ from the whole block's, and by how much, largest first."""
    if not off:
        return ""
    said = ", ".join(f"{n} by {d:.2g}" for n, d in sorted(off.items(), key=lambda kv: -kv[1]))
    return f"; these differ: {said}"


def _as_tensor(value) -> torch.Tensor:
    return torch.as_tensor(value, dtype=torch.float32)


def _run_parts(ranks: list[dict]) -> list[Part]:
    expected = whole_step()
    atol = THRESHOLDS["output_atol"].value
    worst_out, worst_grad, missing, off = 0.0, 0.0, [], {}
    for r in ranks:
        out = _as_tensor(r["output"])
        if out.shape != expected["output"].shape:
            worst_out = float("inf")
        else:
            worst_out = max(worst_out, (out - expected["output"]).abs().max().item())
        for name, want in expected["grads"].items():
            got = r["grads"].get(name)
            if got is None or _as_tensor(got).shape != want.shape:
                missing.append(name)
                continue
            diff = (_as_tensor(got) - want).abs().max().item()
            worst_grad = max(worst_grad, diff)
            if diff > atol:
                off[name] = max(off.get(name, 0.0), diff)
    shape_said = (
        ""
        if worst_out != float("inf")
        else f": the output's shape is not {tuple(SHAPE)}, the "
        "block's (each rank is given the whole batch and must return the whole output)"
    )
    return [
        correct(
            "output equal to the whole block",
            worst_out <= atol,
            f"largest difference from the block whole in one process {worst_out:.2g} (allowed "
            f"{atol:g})" + shape_said,
            value=worst_out if worst_out != float("inf") else None,
            threshold=atol,
            better="lower",
        ),
        correct(
            "gradients equal",
            worst_grad <= atol and not missing,
            f"every parameter's gradient within {worst_grad:.2g} of the whole block's (allowed "
            f"{atol:g})" + _grads_off(off)
            if not missing
            else f"no gradient of the whole shape for {', '.join(sorted(set(missing)))}",
            value=worst_grad,
            threshold=atol,
            better="lower",
        ),
        correct(
            "each rank holds half of each weight",
            not any(_held(r) for r in ranks),
            "each rank holds about half of up.weight and down.weight",
        ),
        correct(
            "one all-reduce per forward",
            all(
                [tuple(c) for c in r["forward"]] == [("all_reduce", _whole_bytes())] for r in ranks
            ),
            "each rank's forward sends one all-reduce of the block's output",
        ),
    ]


@check(
    "16-shard-block",
    points=1,
    hint="Reread section 2: which layer is split by its output features, which by its input "
    "features, and what does that leave each rank holding after the second one? Count the "
    "collectives of your block's forward with lesson.Counted.",
    in_kernel="the outputs, gradients, parameter shards and collectives of the processes that "
    "run the learner's shard_block (compared here with the block whole, computed by the check)",
)
def check_shard_file(path) -> list[Part]:
    """`path`: tp_block.py as check_shard hands it (a probes.LearnerFile)."""
    if not callable(path):  # a bare path is data: its probes would run here, not beside it
        raise TypeError(
            f"the check takes the learner's file as check_shard hands it (probes.LearnerFile), "
            f"not a {type(path).__name__}"
        )
    decided = _preflight_parts(observe(shard_preflight, path))
    if decided is not None:
        return decided
    ranks = observe(shard_run, path)["ranks"]
    raised = next((r["exception"] for r in ranks if r["exception"]), None)
    if raised:
        if raised["type"] == "NotImplementedError":
            raise NotImplementedError()
        raise LearnerRaised(f"{raised['type']} in shard_block", str(raised["message"]))
    return _run_parts(ranks)


def check_shard(path):
    """The locked cell's call, `lesson.check_shard(workdir / "tp_block.py")`: the check gets
    the learner's file as a handle (probes.LearnerFile), so that its probes run beside it."""
    return check_shard_file(path if isinstance(path, LearnerFile) else LearnerFile(path))


check_shard.__dict__.update(check_shard_file.__dict__)  # check_id, points, ..., the body
