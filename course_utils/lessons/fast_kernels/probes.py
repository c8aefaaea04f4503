"""Lesson 05's probes: each builds its specimen from plain arguments (the variable-size images
and their order, the SENet pair and its input by seed, a compile timing's three numbers),
runs the learner's answer beside it (in the learner's kernel under `course grade`), and
returns what it saw as data (course_utils.probes). The checks (checks.py, break_even.py)
compute what that data must equal themselves."""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from ...guards import _as_learner
from ...probes import probe
from . import demo, layout
from .compiling import CompileTiming
from .reference import ReferenceSqueezeExcite


def specimen(order: int = 0) -> tuple[list[tuple[int, int]], list[torch.Tensor]]:
    """The bucketing check's images (demo.variable_size_images) and their sizes; `order` > 0:
    the same images in an order drawn from that seed (every count of shapes and padding a
    bucketing gives stays the same)."""
    sizes, images = demo.image_sizes(), demo.variable_size_images()
    if order:
        perm = torch.randperm(len(sizes), generator=torch.Generator().manual_seed(order))
        sizes, images = [sizes[i] for i in perm], [images[i] for i in perm]
    return sizes, images


# --- exercise 1: bucketing -----------------------------------------------------------------


@probe
def bucket_reading(bucket_batches, pad_collate, order: int) -> dict:
    """The learner's batches of specimen(order), and what its collate made of each
    (demo.batch_outputs: shapes, and each sample's slot cut to the sample's size)."""
    sizes, images = specimen(order)
    batches = [[int(i) for i in b] for b in bucket_batches(sizes, demo.BATCH)]
    return {"batches": batches, "outputs": demo.batch_outputs(batches, pad_collate, images)}


@probe
def first_epoch_reading(pad_collate, batches: list, order: int, width: int) -> dict:
    """demo.first_epoch_s on CUDA with the learner's collate over `batches` (the check times
    the whole call from its side); the shapes its collate fed the network, the work done."""
    _, images = specimen(order)
    fed: list[list[int]] = []

    def collate(batch):
        out = pad_collate(batch)
        fed.append(list(getattr(out, "shape", ())))
        return out

    demo.first_epoch_s(batches, collate, images, width=width)
    return {"shapes": fed}


# --- exercise 2: channels_last -------------------------------------------------------------


def _runner(squeeze_excite):
    """How the learner's network runs: as learner code (a reference it calls is refused),
    but the lesson's own gate, passed as the answer, as itself."""
    if squeeze_excite is ReferenceSqueezeExcite:
        return lambda fn, *args: fn(*args)
    return _as_learner(lambda fn, *args: fn(*args))


def _converted(to_channels_last, squeeze_excite, seed: int):
    """The SENet with the learner's gate (the legacy one's weights), and the input of `seed`,
    through the learner's conversion."""
    _, mine = layout.make_pair(squeeze_excite)
    return to_channels_last(mine, layout.images(seed=seed))


@probe
def channels_last_reading(to_channels_last, squeeze_excite, seed: int) -> dict:
    """The learner's conversion of the SENet with its gate and of layout.images(seed=seed):
    what it returned, the conv weights still NCHW, the input's shape and layout, the first
    layers that lost the layout (layout_trace), the network's output, and one gate's output
    alone on layout.gate_input (a different pooling shows there)."""
    run = _runner(squeeze_excite)
    model, xl = _converted(to_channels_last, squeeze_excite, seed)
    if not isinstance(model, nn.Module) or not isinstance(xl, torch.Tensor):
        return {"returned": [type(model).__name__, type(xl).__name__]}
    seen = {
        "returned": ["Module", "Tensor"],
        "nchw": layout.nchw_weights(model),
        "shape": list(xl.shape),
        "channels_last": layout.is_cl(xl),
    }
    if xl.shape != layout.images(seed=seed).shape:
        return seen
    seen["losses"] = [str(loss) for loss in run(layout.layout_trace, model, xl)]
    with torch.no_grad():
        seen["out"] = run(model, xl)
    seen["gate"] = layout.gate_output(squeeze_excite, run)
    return seen


# The converted networks the speed part times: kept between its calls, by the key it chose.
_BENCHES: dict[str, tuple] = {}


@probe
def cl_bench_step(to_channels_last, squeeze_excite, key: str, seed: int) -> float:
    """One fp32 training step (forward + backward, gradients dropped) of the learner's
    converted SENet (made on the first call for `key`) on one CPU thread: the loss it
    computed, the work done."""
    bench = _BENCHES.get(key)
    if bench is None:
        model, xl = _converted(to_channels_last, squeeze_excite, seed)
        bench = _BENCHES[key] = (model.train(), xl, _runner(squeeze_excite))
    model, xl, run = bench
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        loss = run(model, xl).sum()
        loss.backward()
        model.zero_grad(set_to_none=True)
        return float(loss.detach())
    finally:
        torch.set_num_threads(threads)


@probe
def cl_bench_done(to_channels_last, squeeze_excite, key: str) -> None:
    """Drop the network timed under `key`."""
    _BENCHES.pop(key, None)


# --- exercise 3: should this run compile? -----------------------------------------------------


@probe
def compile_decisions(should_compile, cases: list) -> list:
    """The learner's answer for each (timing, run lengths, compiles) of `cases`, each call on
    a fresh CompileTiming (so one call cannot change what the next is asked): per run length,
    its answer (or that it divided by zero) and the timing fields the call changed."""
    out = []
    for timing, lengths, compiles in cases:
        said = []
        for n in lengths:
            given = CompileTiming(*timing)
            try:
                answer = {"answer": should_compile(given, n, compiles)}
            except ZeroDivisionError:
                answer = {"zero_division": True}
            fields = dataclasses.asdict(CompileTiming(*timing))
            answer["changed"] = [k for k, v in fields.items() if getattr(given, k, None) != v]
            said.append(answer)
        out.append(said)
    return out
