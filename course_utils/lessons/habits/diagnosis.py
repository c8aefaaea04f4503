"""Runs that confirm a cause before lesson 10's fast-train check names it: the reference run
with one named mistake, and where a learner's run and the reference part. They run on the
check's side (the judge, under `course grade`), never beside the learner's code: a mistake's
run is the lesson's fix with one fault, so the grading kernel's harness withholds it."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from ...device import get_device
from . import loop


def close(a: list[float], b: list[float], rtol: float, atol: float) -> bool:
    return len(a) == len(b) and np.allclose(a, b, rtol=rtol, atol=atol)


MISTAKES = {  # a mistake -> what to say when a run with it reproduces the learner's log
    "unweighted": "the same as slow_train's run with an UNWEIGHTED loss: pass "
    "weight=torch.tensor(data.class_weights, device=device) to F.cross_entropy",
    "adam-l2": "the same as torch.optim.Adam with weight_decay (an L2 term in the gradient); "
    "slow_train's adamw_step decays the weights directly, as torch.optim.AdamW does",
    "no-zero-grad": "the same as a run that never zeroes the gradients (they accumulate): "
    "call optimizer.zero_grad() every step",
    "validate-first": "the same as validating when step % eval_every == 0; slow_train "
    "validates after the step: (step + 1) % eval_every == 0",
}


def why_different(
    losses, accs, ref_log, worst: float, data, steps: int, every: int, tol: tuple[float, float]
) -> str:
    """A cause only where a run with that one mistake reproduces the learner's log; else where
    the two runs part."""
    for mistake, said in MISTAKES.items():
        probe = mistake_log(data, steps, every, mistake)
        if close(losses, probe.losses, *tol) and close(accs, probe.val_accuracy, *tol):
            return f"your log is {said}"
    n_batches = len(data.x) // data.batch_size
    if close(losses, ref_log.losses, *tol) and worst <= tol[1]:
        return (
            f"training matches step for step; only the validation differs: slow_train "
            f"validates after every {every} steps, on all of x_val at once (section 1)"
        )
    k = next(
        (
            i
            for i, (a, b) in enumerate(zip(losses, ref_log.losses, strict=False))
            if not close([a], [b], *tol)
        ),
        min(len(losses), len(ref_log.losses)),
    )
    if k == 0:
        return "the first loss differs already, before any update: compare your first batch and your loss with slow_train's"
    if k == n_batches:
        return (
            f"the losses agree for the first {k} steps, until the data set ({len(data.x)} rows, "
            f"{n_batches} batches of {data.batch_size}) wraps around: slow_train takes batch "
            "step % (len(data.x) // data.batch_size)"
        )
    return (
        f"the losses agree for {k} step(s), then differ: compare what your loop does between "
        "two steps with slow_train and adamw_step (section 1)"
    )


def mistake_log(data, steps: int, every: int, mistake: str) -> loop.TrainLog:
    """The reference run with one named mistake, to confirm a cause before naming it."""
    device = get_device()
    model = loop.make_model().to(device).train()
    x, y = torch.from_numpy(data.x).to(device), torch.from_numpy(data.y).to(device)
    x_val, y_val = torch.from_numpy(data.x_val).to(device), torch.from_numpy(data.y_val).to(device)
    weight = None if mistake == "unweighted" else torch.tensor(data.class_weights, device=device)
    hyper = (loop.LR, loop.BETAS, loop.EPS, loop.WEIGHT_DECAY)
    opt = (torch.optim.Adam if mistake == "adam-l2" else torch.optim.AdamW)(
        model.parameters(), *hyper, foreach=True
    )
    b, n = data.batch_size, len(data.x) // data.batch_size
    log = loop.TrainLog()
    for step in range(steps):
        i = (step % n) * b
        loss = F.cross_entropy(model(x[i : i + b]), y[i : i + b], weight=weight)
        if mistake != "no-zero-grad":
            opt.zero_grad()
        loss.backward()
        opt.step()
        log.losses.append(float(loss.detach()))
        if (step if mistake == "validate-first" else step + 1) % every == 0:
            with torch.inference_mode():
                model.eval()
                log.val_accuracy.append(float((model(x_val).argmax(1) == y_val).float().mean()))
                model.train()
    return log
