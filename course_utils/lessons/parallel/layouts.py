"""Exercise 1's layouts: the specimens the check poses, what each sends (counted on a pretend
world, in the check's own process), and the numbers the usual half-understandings give.

Each case is one layout and a few variants of its shapes; a notebook always takes the first
(the one the red team's cases were written against), the judge draws one per grading run.
Every variant keeps the case's trap: the first block's input that needs no gradient (no norm
before it), bf16 bytes, a hidden width unlike the model's width, four ranks.
"""

from __future__ import annotations

from ...pretend_world import pretend_world
from .comms import KINDS, step_comms
from .model import Layout, parallelize

PREDICTING: list[bool] = []  # set while exercise 1's check runs the learner's prediction

CASES = {  # case name -> its variants, the first the notebook's
    "megatron, no norm before the first block": (
        Layout("megatron", blocks=2, norm=False, batch=3, seq=5, width=12, hidden=32),
        Layout("megatron", blocks=3, norm=False, batch=2, seq=7, width=10, hidden=24),
        Layout("megatron", blocks=2, norm=False, batch=5, seq=3, width=6, hidden=16, world=4),
    ),
    "megatron, bf16, 4 ranks": (
        Layout("megatron", blocks=3, batch=2, seq=7, width=10, hidden=24, dtype="bfloat16",
               world=4),
        Layout("megatron", blocks=2, batch=3, seq=5, width=14, hidden=32, dtype="bfloat16",
               world=4),
    ),
    "sequence parallel": (
        Layout("sequence", blocks=2, batch=3, seq=8, width=12, hidden=32),
        Layout("sequence", blocks=3, batch=2, seq=12, width=10, hidden=24, world=4),
        Layout("sequence", blocks=2, batch=5, seq=6, width=8, hidden=16, dtype="bfloat16"),
    ),
    "a column layer gathered": (
        Layout("gathered", blocks=2, norm=False, batch=2, seq=5, width=6, hidden=40, world=4),
        Layout("gathered", blocks=3, norm=False, batch=3, seq=4, width=10, hidden=24, world=2),
    ),
    "a row layer alone": (
        Layout("split", blocks=2, batch=3, seq=4, width=8, hidden=48, dtype="bfloat16"),
        Layout("split", blocks=3, batch=2, seq=5, width=12, hidden=32, world=4),
    ),
    # without a norm the first block's input needs no gradient, yet its backward still
    # all-gathers the hidden activation (the blind round's hole: a split layout with a norm
    # could not tell a prediction that skips it)
    "a row layer alone, no norm": (
        Layout("split", blocks=1, norm=False, batch=3, seq=4, width=8, hidden=48),
        Layout("split", blocks=2, norm=False, batch=2, seq=5, width=12, hidden=32, world=4),
    ),
}  # fmt: skip


def drawn(rng) -> dict[str, Layout]:
    """One variant per case (the first in a notebook: course_utils.probes.specimen_rng)."""
    return {name: rng.choice(variants) for name, variants in CASES.items()}


_MEASURED: dict[Layout, dict] = {}


def measured_comms(layout: Layout) -> dict:
    """The collectives one training step of `layout` issues on each rank, counted (forward,
    then backward of the output's sum): {"forward": {kind: [calls, bytes]}, "backward": ...}.
    Runs the real `parallelize_module` on rank 0 of a pretend world in this process: every
    rank issues the same collectives with the same shapes."""
    if PREDICTING:
        raise RuntimeError(
            "predict_comms called lesson.measured_comms: exercise 1 asks for a prediction from "
            "the layout, made before anything is counted"
        )
    if layout not in _MEASURED:
        from torch.distributed.device_mesh import init_device_mesh

        with pretend_world(0, layout.world):
            mesh = init_device_mesh("cpu", (layout.world,))
            model = parallelize(layout.build(), layout, mesh)
            _MEASURED[layout] = step_comms(model, layout.fed(0))
    return _MEASURED[layout]


def normalised(counts: dict) -> dict[str, dict[str, tuple[int, int]]]:
    """{phase: {kind: (calls, bytes)}} with every phase and kind present (0, 0 when absent)."""
    return {
        phase: {k: tuple(int(v) for v in counts.get(phase, {}).get(k, (0, 0))) for k in KINDS}
        for phase in ("forward", "backward")
    }


# --- what a half-understanding predicts, from the truth -------------------------------------


def variants(layout: Layout, truth: dict) -> dict[str, dict]:
    """cause -> the whole prediction that cause gives for `layout` (each derived from the
    measured truth, so a learner whose every number equals one made exactly that mistake)."""
    t = normalised(truth)
    element = 2 if layout.dtype == "bfloat16" else 4
    whole = layout.batch * layout.seq * layout.width * element  # the block output's bytes
    out = {
        "no backward: a forward collective's gradient needs its own collective in backward":
            _with(t, backward={}),
        "an all-gather's or reduce-scatter's bytes as one rank's shard, not the whole tensor":
            _scale(t, lambda kind: 1 if kind == "all_reduce" else 1 / layout.world),
        "bytes as a ring moves them per rank": _scale(t, lambda kind: _ring(kind, layout.world)),
    }  # fmt: skip
    if element == 2:
        out["bytes of float32 elements, not bfloat16"] = _scale(t, lambda kind: 2)
    if layout.style == "megatron":
        blocks = layout.blocks
        out["an all-reduce after the column-parallel layer too"] = _with(
            t, forward={"all_reduce": (2 * blocks, 2 * blocks * whole)}
        )
        if not layout.norm:
            out["an all-reduce of the first block's input gradient, which the data never needs"] = (
                _with(t, backward={"all_reduce": (blocks, blocks * whole)})
            )  # fmt: skip
    if layout.style == "sequence":
        n = layout.blocks
        out["sequence parallel taken to keep the all-reduces"] = _with(
            t, forward={"all_reduce": (n, n * whole)}, backward={"all_reduce": (n, n * whole)}
        )
    if layout.style in ("gathered", "split"):
        key = "forward" if layout.style == "gathered" else "backward"
        calls = t[key]["all_gather"][0]
        out["an all-gather's bytes of the model width, not the hidden width"] = _with(
            t, **{key: {**t[key], "all_gather": (calls, calls * whole)}}
        )
    return out


def _with(t: dict, **phases) -> dict:
    return {**t, **{p: {**{k: (0, 0) for k in KINDS}, **v} for p, v in phases.items()}}


def _scale(t: dict, factor) -> dict:
    return {
        p: {k: (c, round(b * factor(k))) for k, (c, b) in kinds.items()} for p, kinds in t.items()
    }


def _ring(kind: str, world: int) -> float:
    """What a ring algorithm sends per rank, as a share of the whole tensor."""
    return (2 if kind == "all_reduce" else 1) * (world - 1) / world
