"""Blind red team (v4) for notebook 10's reworked checks 10-evaluate and 10-fast-train.

Written from the learner notebook (hints folded first), what it shows with `cu.show_source`
(slow_train, adamw_step, colleague_evaluate), `habits/demo.py`, the generic check API and
`redteam_helpers.py`; never the lesson's checks, probes or tests. Each case is a learner
answer with the verdict the check must give and, for a wrong one, the cause its failing parts
must name (`names`) and a cause they must not name (`not_names`), both regexes.

Run: COURSE_QUICK=1 COURSE_REDTEAM=all pytest -q -p no:cacheprovider
tests/redteam/test_10_v4_blind.py
"""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch.nn.functional as F
from redteam_helpers import FULL, assert_graded, case, grade
from torch import nn
from torch.profiler import ProfilerActivity, profile

from course_utils.lessons import habits as lesson
from course_utils.lessons.habits.loop import BETAS, EPS, LR, WEIGHT_DECAY

pytestmark = pytest.mark.skipif(
    not FULL, reason="timed and trained checks (seconds a case): COURSE_REDTEAM=all runs them"
)

# =============================================================================================
# 10-evaluate: the colleague's evaluate, fixed (or half-fixed)
# =============================================================================================


def _hits(model, x, y, batch_size):
    hits = 0
    for i in range(0, len(x), batch_size):
        hits += (model(x[i : i + batch_size]).argmax(1) == y[i : i + batch_size]).sum().item()
    return hits


def valid_no_grad_and_restore(model, x, y, batch_size=256):
    """eval(), no_grad, hits over all rows, train(was) in a finally."""
    was = model.training
    model.eval()
    try:
        with torch.no_grad():
            return _hits(model, x, y, batch_size) / len(x)
    finally:
        model.train(was)


def valid_inference_mode_concat_per_module_restore(model, x, y, batch_size=256):
    """Each module's flag saved and restored; predictions concatenated; inference_mode."""
    flags = {m: m.training for m in model.modules()}
    model.eval()
    try:
        with torch.inference_mode():
            preds = torch.cat(
                [model(x[i : i + batch_size]).argmax(1) for i in range(0, len(x), batch_size)]
            )
            return float((preds == y).double().mean())
    finally:
        for m, flag in flags.items():
            m.training = flag


def valid_set_grad_enabled_restored(model, x, y, batch_size=256):
    """The colleague's own switch, put back to what it was (try/finally)."""
    was, grad = model.training, torch.is_grad_enabled()
    torch.set_grad_enabled(False)
    model.eval()
    try:
        return _hits(model, x, y, batch_size) / len(x)
    finally:
        torch.set_grad_enabled(grad)
        model.train(was)


def valid_set_grad_enabled_as_context(model, x, y, batch_size=256):
    """set_grad_enabled used as a context manager, the way it restores itself."""
    was = model.training
    model.eval()
    with torch.set_grad_enabled(False):
        hits = _hits(model, x, y, batch_size)
    model.train(was)
    return hits / len(x)


def wrong_only_grad_fixed(model, x, y, batch_size=256):
    """Fixed only the second symptom: no_grad as a context, still train mode and batch means."""
    accuracies = []
    with torch.no_grad():
        for i in range(0, len(x), batch_size):
            logits = model(x[i : i + batch_size])
            accuracies.append((logits.argmax(1) == y[i : i + batch_size]).float().mean())
    return torch.stack(accuracies).mean().item()


def wrong_eval_never_restored(model, x, y, batch_size=256):
    """eval() and no_grad, exact count, but the model is left in eval mode."""
    model.eval()
    with torch.no_grad():
        return _hits(model, x, y, batch_size) / len(x)


def wrong_restores_top_only(model, x, y, batch_size=256):
    """`model.training = was` puts back the top module only; BN and Dropout stay in eval."""
    was = model.training
    model.eval()
    with torch.no_grad():
        acc = _hits(model, x, y, batch_size) / len(x)
    model.training = was
    return acc


def wrong_always_train_after(model, x, y, batch_size=256):
    """model.train() at the end whatever the mode was: an eval-mode caller gets train mode."""
    model.eval()
    with torch.no_grad():
        acc = _hits(model, x, y, batch_size) / len(x)
    model.train()
    return acc


def wrong_mean_of_batch_accuracies(model, x, y, batch_size=256):
    """eval, no_grad, restored: but a mean of per-batch accuracies (short last batch)."""
    was = model.training
    model.eval()
    accs = []
    with torch.no_grad():
        for i in range(0, len(x), batch_size):
            accs.append(
                (model(x[i : i + batch_size]).argmax(1) == y[i : i + batch_size]).float().mean()
            )
    model.train(was)
    return torch.stack(accs).mean().item()


def wrong_set_grad_restored_to_true(model, x, y, batch_size=256):
    """set_grad_enabled(False) ... set_grad_enabled(True): right only when it was on."""
    was = model.training
    torch.set_grad_enabled(False)
    model.eval()
    acc = _hits(model, x, y, batch_size) / len(x)
    model.train(was)
    torch.set_grad_enabled(True)
    return acc


def wrong_bare_no_grad_call(model, x, y, batch_size=256):
    """`torch.no_grad()` written as a statement: builds a context manager and enters nothing."""
    was = model.training
    torch.no_grad()
    model.eval()
    acc = _hits(model, x, y, batch_size) / len(x)
    model.train(was)
    return acc


def wrong_detach_instead_of_no_grad(model, x, y, batch_size=256):
    """eval and restore right, but .detach() on the logits instead of switching autograd off."""
    was = model.training
    model.eval()
    hits = 0
    for i in range(0, len(x), batch_size):
        logits = model(x[i : i + batch_size]).detach()
        hits += (logits.argmax(1) == y[i : i + batch_size]).sum().item()
    model.train(was)
    return hits / len(x)


def wrong_dropout_only_eval(model, x, y, batch_size=256):
    """Blamed the varying accuracy on Dropout alone: BatchNorm stays in train mode."""
    drops = [m for m in model.modules() if isinstance(m, nn.Dropout)]
    was = [m.training for m in drops]
    for m in drops:
        m.eval()
    with torch.no_grad():
        acc = _hits(model, x, y, batch_size) / len(x)
    for m, w in zip(drops, was, strict=True):
        m.train(w)
    return acc


def wrong_returns_inference_tensor(model, x, y, batch_size=256):
    """All fixed, but returns the 0-d inference tensor made inside inference_mode, not a float."""
    was = model.training
    model.eval()
    with torch.inference_mode():
        hits = sum(
            (model(x[i : i + batch_size]).argmax(1) == y[i : i + batch_size]).sum()
            for i in range(0, len(x), batch_size)
        )
        acc = hits / len(x)
    model.train(was)
    return acc


def wrong_drops_last_batch(model, x, y, batch_size=256):
    """Only full batches (drop_last habit): the short last batch's rows are never scored."""
    was = model.training
    model.eval()
    hits, seen = 0, 0
    with torch.no_grad():
        for i in range(0, len(x) - batch_size + 1, batch_size):
            hits += (model(x[i : i + batch_size]).argmax(1) == y[i : i + batch_size]).sum().item()
            seen += batch_size
    model.train(was)
    return hits / seen


def valid_requires_grad_saved_and_restored(model, x, y, batch_size=256):
    """No autograd by freezing the parameters, each flag put back; eval mode restored."""
    flags = [(p, p.requires_grad) for p in model.parameters()]
    was = model.training
    model.requires_grad_(False).eval()
    try:
        return _hits(model, x, y, batch_size) / len(x)
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)
        model.train(was)


def wrong_freezes_params(model, x, y, batch_size=256):
    """ "No gradients" by requires_grad_(False) on the parameters, never switched back."""
    was = model.training
    model.requires_grad_(False)
    model.eval()
    acc = _hits(model, x, y, batch_size) / len(x)
    model.train(was)
    return acc


TRAIN = r"train(ing)? mode|restor|left .*eval|eval mode"
EVALUATE = [
    case(valid_no_grad_and_restore, "passed"),
    case(valid_inference_mode_concat_per_module_restore, "passed"),
    case(valid_set_grad_enabled_restored, "passed"),
    case(valid_set_grad_enabled_as_context, "passed"),
    case(valid_requires_grad_saved_and_restored, "passed"),
    case(
        wrong_freezes_params,
        names=r"trainable|requires_grad|gradient",
        not_names=r"saved|mean of|mode restored|mode kept|call model\.eval",
    ),
    case(
        wrong_only_grad_fixed,
        names=r"eval|dropout|batchnorm|train mode",
        not_names=r"set_grad_enabled|saved",
    ),
    case(wrong_eval_never_restored, names=TRAIN, not_names=r"saved|mean of|set_grad_enabled"),
    case(
        wrong_restores_top_only,
        names=r"submodule|every module|train\(",
        not_names=r"saved|mean of|set_grad_enabled",
    ),
    case(
        wrong_always_train_after,
        names=r"eval mode|was|restor",
        not_names=r"saved|mean of|set_grad_enabled",
    ),
    case(
        wrong_mean_of_batch_accuracies,
        names=r"mean|per.batch|last batch|weigh",
        not_names=r"saved|set_grad_enabled|mode restored|mode kept|call model\.eval",
    ),
    case(
        wrong_set_grad_restored_to_true,
        names=r"grad|autograd",
        not_names=r"saved|mean of|mode restored|mode kept|call model\.eval",
    ),
    case(
        wrong_bare_no_grad_call,
        names=r"saved|autograd|no_grad|inference_mode",
        not_names=r"mean of|mode restored|mode kept|call model\.eval",
    ),
    case(
        wrong_detach_instead_of_no_grad,
        names=r"saved|autograd|no_grad|inference_mode",
        not_names=r"mean of|mode restored|mode kept|call model\.eval",
    ),
    case(
        wrong_dropout_only_eval,
        names=r"batchnorm|batch ?norm|running|eval\(\)|eval mode|submodule",
        not_names=r"saved|mean of|set_grad_enabled|dropout dropped",
    ),
    case(
        wrong_returns_inference_tensor,
        names=r"float|tensor",
        not_names=r"saved|mean of|mode restored|mode kept|call model\.eval",
    ),
    case(
        wrong_drops_last_batch,
        names=r"rows|last batch|all|len\(x\)",
        not_names=r"saved|set_grad_enabled|mode restored|mode kept|call model\.eval",
    ),
]


@pytest.mark.parametrize(("fn", "expect", "names", "not_names"), EVALUATE)
def test_evaluate(fn, expect, names, not_names):
    grad = torch.is_grad_enabled()
    try:
        assert_graded(grade(lesson.check_evaluate, fn), expect, names, not_names)
    finally:
        torch.set_grad_enabled(grad)


# =============================================================================================
# 10-fast-train: slow_train without its habits (or with one kept)
# =============================================================================================


def _fast(
    model,
    data,
    steps,
    device,
    eval_every=10,
    *,
    anomaly=False,
    profiler=False,
    item_each_step=False,
    zero_grad=True,
    make_optimizer=None,
    loop_optimizer=False,
    weighted=True,
    validate_at=None,
    val_autograd=False,
    floats=True,
):
    """The fixed loop, with one habit (or mistake) switched back on by a keyword."""
    model.to(device).train()
    x_all, y_all = torch.from_numpy(data.x).to(device), torch.from_numpy(data.y).to(device)
    x_val, y_val = torch.from_numpy(data.x_val).to(device), torch.from_numpy(data.y_val).to(device)
    weight = torch.tensor(data.class_weights, device=device) if weighted else None
    params = list(model.parameters())
    if loop_optimizer:
        state = [(torch.zeros_like(p), torch.zeros_like(p)) for p in params]
        optimizer = None
    elif make_optimizer:
        optimizer = make_optimizer(params)
    else:
        optimizer = torch.optim.AdamW(
            params, lr=LR, betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY, foreach=True
        )
    validate_at = validate_at or (lambda step: (step + 1) % eval_every == 0)
    bs, n = data.batch_size, len(data.x) // data.batch_size
    losses, accs = [], []
    with contextlib.ExitStack() as stack:
        if anomaly:
            stack.enter_context(torch.autograd.detect_anomaly())
        if profiler:
            stack.enter_context(
                profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True)
            )
        for step in range(steps):
            i = (step % n) * bs
            loss = F.cross_entropy(model(x_all[i : i + bs]), y_all[i : i + bs], weight=weight)
            if zero_grad and optimizer is not None:
                optimizer.zero_grad()
            elif zero_grad:
                model.zero_grad()
            loss.backward()
            if optimizer is None:
                lesson.adamw_step(params, state, step + 1, LR)
            else:
                optimizer.step()
            losses.append(loss.item() if item_each_step else loss.detach())
            if validate_at(step):
                model.eval()
                with contextlib.nullcontext() if val_autograd else torch.inference_mode():
                    acc = (model(x_val).argmax(1) == y_val).float().mean()
                accs.append(acc.item() if item_each_step else acc.detach())
                model.train()
    if not floats:
        return lesson.TrainLog(losses, accs)
    if not item_each_step:
        losses = torch.stack(losses).tolist() if losses else []
        accs = torch.stack(accs).tolist() if accs else []
    return lesson.TrainLog(losses, accs)


def valid_foreach_read_once(model, data, steps, device, eval_every=10):
    """from_numpy once, device= weights, foreach AdamW, inference_mode, one read at the end."""
    return _fast(model, data, steps, device, eval_every)


def valid_fused_read_per_validation(model, data, steps, device, eval_every=10):
    """fused AdamW, optimizer.zero_grad(set_to_none=False), no_grad validation, as_tensor per
    step with device=, losses kept in a device buffer read back once per validation."""
    model.to(device).train()
    weight = torch.as_tensor(data.class_weights, dtype=torch.float32, device=device)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=LR, betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY, fused=True
    )
    x_val = torch.as_tensor(data.x_val, device=device)
    y_val = torch.as_tensor(data.y_val, device=device)
    buf = torch.empty(steps, device=device)
    losses, accs, read = [], [], 0
    for step in range(steps):
        xb, yb = data.batch(step)
        x, y = torch.as_tensor(xb, device=device), torch.as_tensor(yb, device=device)
        loss = F.cross_entropy(model(x), y, weight=weight)
        optimizer.zero_grad(set_to_none=False)
        loss.backward()
        optimizer.step()
        buf[step] = loss.detach()
        if (step + 1) % eval_every == 0:
            model.eval()
            with torch.no_grad():
                acc = (model(x_val).argmax(1) == y_val).float().mean()
            model.train()
            chunk = torch.cat([buf[read : step + 1], acc.reshape(1)]).tolist()  # one sync
            losses += chunk[:-1]
            accs.append(chunk[-1])
            read = step + 1
    losses += buf[read:steps].tolist()
    return lesson.TrainLog(losses, accs)


def wrong_keeps_anomaly(model, data, steps, device, eval_every=10):
    """Removed the profiler, kept detect_anomaly ("it only checks for NaN")."""
    return _fast(model, data, steps, device, eval_every, anomaly=True)


def wrong_keeps_profiler(model, data, steps, device, eval_every=10):
    """Removed anomaly detection, kept the profiler (shapes and memory recorded)."""
    return _fast(model, data, steps, device, eval_every, profiler=True)


def wrong_item_each_step(model, data, steps, device, eval_every=10):
    """Print removed, but loss.item() still read every step."""
    return _fast(model, data, steps, device, eval_every, item_each_step=True)


def wrong_no_zero_grad(model, data, steps, device, eval_every=10):
    """ "set_to_none is the default, so zero_grad is a no-op": removed; gradients accumulate."""
    return _fast(model, data, steps, device, eval_every, zero_grad=False)


def wrong_fused_adam_l2(model, data, steps, device, eval_every=10):
    """fused Adam with weight_decay taken for AdamW: L2 in the gradient, not decoupled decay."""
    return _fast(
        model,
        data,
        steps,
        device,
        eval_every,
        make_optimizer=lambda p: torch.optim.Adam(
            p, lr=LR, betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY, fused=True
        ),
    )


def wrong_fused_default_lr(model, data, steps, device, eval_every=10):
    """fused AdamW on its defaults: lr 1e-3, not the imported LR."""
    return _fast(
        model,
        data,
        steps,
        device,
        eval_every,
        make_optimizer=lambda p: torch.optim.AdamW(p, fused=True),
    )


def wrong_unweighted_loss(model, data, steps, device, eval_every=10):
    """Dropped the host-built weight tensor, and with it the weighted loss."""
    return _fast(model, data, steps, device, eval_every, weighted=False)


def wrong_validates_once_at_end(model, data, steps, device, eval_every=10):
    """Validation moved out of the loop "to save time": once, after the last step."""
    return _fast(model, data, steps, device, eval_every, validate_at=lambda s: s == steps - 1)


def wrong_validates_every_other_time(model, data, steps, device, eval_every=10):
    """Validates every 2*eval_every steps: half as often as asked."""
    return _fast(
        model,
        data,
        steps,
        device,
        eval_every,
        validate_at=lambda s: (s + 1) % (2 * eval_every) == 0,
    )


def wrong_validates_off_by_one(model, data, steps, device, eval_every=10):
    """`step % eval_every == 0`: validates before steps 1, 11, ... instead of after 10, 20."""
    return _fast(model, data, steps, device, eval_every, validate_at=lambda s: s % eval_every == 0)


def wrong_keeps_loop_optimizer(model, data, steps, device, eval_every=10):
    """Everything fixed but the hand-written AdamW (8 small ops per parameter tensor)."""
    return _fast(model, data, steps, device, eval_every, loop_optimizer=True)


def wrong_val_with_autograd(model, data, steps, device, eval_every=10):
    """model.eval() in validation, but autograd still on (activations saved for nothing)."""
    return _fast(model, data, steps, device, eval_every, val_autograd=True)


def wrong_returns_loss_tensors(model, data, steps, device, eval_every=10):
    """Kept losses on the device and never read them back: TrainLog of 0-d tensors."""
    return _fast(model, data, steps, device, eval_every, floats=False)


RESULTS = r"loss|param|differ|match"
SPEEDISH = r"profiler|anomaly|sync"
FAST_TRAIN = [
    case(valid_foreach_read_once, "passed"),
    case(valid_fused_read_per_validation, "passed"),
    case(wrong_keeps_anomaly, names=r"anomaly", not_names=r"profiler"),
    case(wrong_keeps_profiler, names=r"profiler", not_names=r"anomaly"),
    case(wrong_item_each_step, names=r"sync|\.item|item\(", not_names=r"profiler|anomaly"),
    case(wrong_no_zero_grad, names=RESULTS, not_names=SPEEDISH),
    case(wrong_fused_adam_l2, names=RESULTS, not_names=SPEEDISH),
    case(wrong_fused_default_lr, names=RESULTS, not_names=SPEEDISH),
    case(wrong_unweighted_loss, names=RESULTS, not_names=SPEEDISH),
    case(wrong_validates_once_at_end, names=r"validat|val_accuracy|accurac", not_names=SPEEDISH),
    case(
        wrong_validates_every_other_time, names=r"validat|val_accuracy|accurac", not_names=SPEEDISH
    ),
    case(wrong_validates_off_by_one, names=r"validat|val_accuracy|accurac", not_names=SPEEDISH),
    case(
        wrong_keeps_loop_optimizer,
        names=r"optimizer|for-loop|per.*tensor",
        not_names=r"profiler|anomaly|sync",
    ),
    case(wrong_val_with_autograd, names=r"autograd|validation", not_names=r"profiler|anomaly|sync"),
    case(wrong_returns_loss_tensors, names=r"float|tensor", not_names=r"profiler|anomaly"),
]


@pytest.mark.parametrize(("fn", "expect", "names", "not_names"), FAST_TRAIN)
def test_fast_train(fn, expect, names, not_names):
    anomaly = torch.is_anomaly_enabled()
    try:
        assert_graded(grade(lesson.check_fast_train, fn), expect, names, not_names)
    finally:
        torch.autograd.set_detect_anomaly(anomaly)
