"""Lesson 08's exercise 4 (08-accum-clip), decided on the check's side: accumulated steps that
each make one known mistake, replayed on the learner's specimen to confirm a cause before a
message names it (accum_check._accum_mistake, accum_check._accum_norm). Nothing here runs the learner's
code: the probes (probes.py) do."""

from __future__ import annotations

from torch import nn

from .diagnosis import total_norm

# mistake -> (a step that makes exactly it, what to tell a learner whose parameters match, what
# the norm it returns is: told when the learner returned that same number)


def _accumulate(model, loss_fn, micro, optimizer, divide: bool = True) -> None:
    optimizer.zero_grad(set_to_none=True)
    for x, y in micro:
        loss = loss_fn(model(x), y)
        (loss / len(micro) if divide else loss).backward()


def clip_every_micro_batch(model, loss_fn, micro, optimizer, max_norm):
    optimizer.zero_grad(set_to_none=True)
    for x, y in micro:
        (loss_fn(model(x), y) / len(micro)).backward()
        norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return norm


def summed_not_averaged(model, loss_fn, micro, optimizer, max_norm):
    _accumulate(model, loss_fn, micro, optimizer, divide=False)
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return norm


def summed_and_clipped_each(model, loss_fn, micro, optimizer, max_norm):
    optimizer.zero_grad(set_to_none=True)
    for x, y in micro:
        loss_fn(model(x), y).backward()
        norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return norm


def last_micro_batch_only(model, loss_fn, micro, optimizer, max_norm):
    for x, y in micro:
        optimizer.zero_grad(set_to_none=True)
        (loss_fn(model(x), y) / len(micro)).backward()
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return norm


def step_every_micro_batch(model, loss_fn, micro, optimizer, max_norm):
    norm = None
    for x, y in micro:
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        optimizer.step()
    return norm


def accumulated_unclipped(model, loss_fn, micro, optimizer, max_norm):
    _accumulate(model, loss_fn, micro, optimizer)
    norm = total_norm([p for p in model.parameters() if p.grad is not None])
    optimizer.step()
    return norm


def clipped_before_last_backward(model, loss_fn, micro, optimizer, max_norm):
    optimizer.zero_grad(set_to_none=True)
    norm = None
    for i, (x, y) in enumerate(micro):
        if i == len(micro) - 1:
            norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        (loss_fn(model(x), y) / len(micro)).backward()
    optimizer.step()
    return norm


def divided_by_samples(model, loss_fn, micro, optimizer, max_norm):
    optimizer.zero_grad(set_to_none=True)
    for x, y in micro:
        (loss_fn(model(x), y) / len(x)).backward()
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return norm


def accumulated_first_group(model, loss_fn, micro, optimizer, max_norm):
    _accumulate(model, loss_fn, micro, optimizer)
    norm = total_norm([p for p in model.parameters() if p.grad is not None])
    nn.utils.clip_grad_norm_(optimizer.param_groups[0]["params"], max_norm)
    optimizer.step()
    return norm


# mistake -> (a step that makes exactly it, what to tell a learner whose parameters match)
def divided_by(count: int):
    """An accumulated clipped step whose losses are divided by a typed-in `count`."""

    def step(model, loss_fn, micro, optimizer, max_norm):
        optimizer.zero_grad(set_to_none=True)
        for x, y in micro:
            (loss_fn(model(x), y) / count).backward()
        norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        optimizer.step()
        return norm

    step.__name__ = f"divided_by_{count}"
    return step


def _typed_in(count: int) -> tuple:
    return (
        divided_by(count),
        f"parameters equal steps whose losses are always divided by {count}, though the two "
        "steps had different numbers of micro-batches: divide by len(micro_batches)",
        f"the norm of a gradient divided by {count} instead of the number of micro-batches",
    )


ACCUM_MISTAKES = {
    "clip every micro-batch": (
        clip_every_micro_batch,
        "parameters equal a step that clipped after EVERY micro-batch's backward(): each clip "
        "shortened a partial sum, and the micro-batches before the last were shortened again "
        "and again. The gradient is complete only after the last backward()",
        "the norm of a partial sum: what the last micro-batch's clip saw, after the earlier "
        "clips had shortened the rest",
    ),
    "summed": (
        summed_not_averaged,
        "parameters equal a step on the SUM of the micro-batch gradients (k times the whole "
        "batch's mean): divide each micro-batch's loss by the number of micro-batches "
        "(lesson 07)",
        "k times the whole batch's norm: the norm of the SUM of the micro-batch gradients",
    ),
    "summed, clipped each": (
        summed_and_clipped_each,
        "parameters equal a step that summed the micro-batch losses (no division by their "
        "number) AND clipped after every micro-batch's backward()",
        "the norm of a partial SUM (no division) after the earlier clips",
    ),
    "last micro-batch only": (
        last_micro_batch_only,
        "parameters equal a step on the LAST micro-batch's gradient alone: a zero_grad inside "
        "the loop threw the earlier micro-batches' gradients away",
        "the norm of the last micro-batch's gradient alone",
    ),
    "step every micro-batch": (
        step_every_micro_batch,
        "parameters equal one clipped optimizer.step() per micro-batch: accumulation takes one "
        "step for all of them",
        "the norm of the last micro-batch's gradient, stepped on its own",
    ),
    "unclipped": (
        accumulated_unclipped,
        "parameters equal the accumulated step UNCLIPPED, though its norm is above max_norm",
        "the right norm",
    ),
    "clip before last backward": (
        clipped_before_last_backward,
        "parameters equal a step that clipped before the LAST micro-batch's backward(): that "
        "micro-batch's gradient was added after the clip",
        "the norm before the last micro-batch's gradient was added",
    ),
    "divided by samples": (
        divided_by_samples,
        "parameters equal steps whose losses are divided by the micro-batch's number of "
        "SAMPLES: the loss is already a mean over them; divide by the number of micro-batches, "
        "len(micro_batches)",
        "the norm of a gradient divided by the micro-batch's sample count",
    ),
    "first group": (
        accumulated_first_group,
        "you clipped only the first param group's parameters (the optimizer has two): clip "
        "every parameter the optimizer updates",
        "the right norm",
    ),
    **{f"divided by {n}": _typed_in(n) for n in (2, 4, 8)},
}
