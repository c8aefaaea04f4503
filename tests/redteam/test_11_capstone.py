"""Red team of notebook 11's check `11-speedrun`, written blind (from the notebook, the solution
and the generic check API only, not the lesson's checks or tests).

Each case is a learner's `speedrun(train_set)`: wrong answers a half-understanding learner
would write, with the cause the failing parts must name (and causes they must not name), and
valid alternatives a strong learner would write. Judgement calls, decided here:
- `loss.item()` every step is slow on a GPU but costs nothing on a CPU, and the notebook grades
  time to target: valid (`valid-item-every-step`), not a wrong answer.
- not seeding is valid: the notebook asks for a fast run to the target, not a reproducible one
  (`valid-own-augmentation-unseeded`, `valid-own-holdout-early-stop` seed nothing).
- a smaller subset of the data is wrong here only because it misses the target: the notebook's
  rules state no data size, only the held-out accuracy and the time.

Every call of this check trains (the learner's run and the baseline, timed in pairs): cases
that fail before a full training (a reference called, the held-out reader called after one
epoch) run in CI, the rest with COURSE_REDTEAM=all. Results and open holes: README.md.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from redteam_helpers import assert_graded, case, grade, in_ci, open_holes

import course_utils as cu
from course_utils.lessons import capstone as lesson

MEAN = torch.tensor([0.4914, 0.4822, 0.4465]).view(1, 3, 1, 1)  # the course's normalisation
STD = torch.tensor([0.247, 0.2435, 0.2616]).view(1, 3, 1, 1)


def _loop(model, x, y, *, epochs=4, batch=32, lr=0.02, dtype=None, after_epoch=None, log=None):
    """The solution's loop (AdamW + one-cycle, the lesson's device batches), with hooks for the
    mistakes: `dtype` for autocast (None: the device's amp dtype where it pays), `after_epoch`
    returning True to stop, `log` collecting `loss.item()` every step."""
    device = cu.get_device()
    if dtype is None and cu.device_class(device) in ("cuda-tensorcore", "cpu-bf16"):
        dtype = cu.amp_dtype(device)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, foreach=True)
    steps = epochs * (len(x) // batch)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, lr, total_steps=steps)
    generator = torch.Generator().manual_seed(0)
    for epoch in range(epochs):
        for xb, yb in lesson.device_batches(x, y, batch, generator):
            with torch.autocast(device.type, dtype=dtype or torch.float32, enabled=bool(dtype)):
                loss = F.cross_entropy(model(xb), yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            if log is not None:
                log.append(loss.item())
        if after_epoch is not None and after_epoch(model, epoch):
            break
    return model


def _fresh_model(seed=0):
    torch.manual_seed(seed)
    return cu.SmallCNN(width=16).to(cu.get_device())


# --- wrong answers -----------------------------------------------------------------------


def wrong_calls_reference_speedrun(train_set):
    return lesson.reference_speedrun(train_set)


def wrong_calls_train_recipe(train_set):
    return lesson.train_recipe(lesson.tuned_recipe(), train_set, label="mine").model


def wrong_calls_fit(train_set):
    return lesson.fit(lesson.tuned_recipe(), train_set, leave=False).model


def wrong_early_stops_on_held_out(train_set):
    """Stops as soon as the test split says the target is reached (the notebook's rule 1)."""
    x, y = lesson.decode_all(train_set, cu.get_device())

    def reached(model, epoch):
        return lesson.held_out_accuracy(model) >= lesson.TARGET

    return _loop(_fresh_model(), x, y, epochs=6, after_epoch=reached)


def wrong_swallows_held_out_guard(train_set):
    """The same, but the guard's exception is caught and training goes on."""
    x, y = lesson.decode_all(train_set, cu.get_device())

    def reached(model, epoch):
        try:
            return lesson.held_out_accuracy(model) >= lesson.TARGET
        except Exception:
            return False

    return _loop(_fresh_model(), x, y, epochs=4, after_epoch=reached)


def wrong_early_stops_on_test_split_loader(train_set):
    """Reads the test split through the data module instead of the lesson's reader."""
    from torch.utils.data import DataLoader

    test = cu.load_data(n_train=len(train_set), n_test=1000).test
    loader = DataLoader(test, batch_size=500)
    x, y = lesson.decode_all(train_set, cu.get_device())

    def reached(model, epoch):
        return epoch >= 1 and cu.evaluate(model, loader) >= lesson.TARGET

    return _loop(_fresh_model(), x, y, epochs=6, after_epoch=reached)


def wrong_one_epoch(train_set):
    """Too few epochs: fast, short of the target."""
    x, y = lesson.decode_all(train_set, cu.get_device())
    return _loop(_fresh_model(), x, y, epochs=1)


def wrong_fifth_of_the_data(train_set):
    """'Less data is faster': a fifth of the images, the same epochs, short of the target."""
    from torch.utils.data import Subset

    part = Subset(train_set, range(len(train_set) // 5))
    x, y = lesson.decode_all(part, cu.get_device())
    return _loop(_fresh_model(), x, y, epochs=4)


_TRAINED: dict = {}


def wrong_returns_cached_model(train_set):
    """Trains once, then every later call returns the model it trained first."""
    if "model" not in _TRAINED:
        x, y = lesson.decode_all(train_set, cu.get_device())
        _TRAINED["model"] = _loop(_fresh_model(), x, y)
    return _TRAINED["model"]


_DECODED: dict = {}


def wrong_caches_decoded_images(train_set):
    """Decodes once per process, not per run: later runs leave data preparation out of the
    time (the notebook's rule: data preparation included)."""
    if "xy" not in _DECODED:
        _DECODED["xy"] = lesson.decode_all(train_set, cu.get_device())
    x, y = _DECODED["xy"]
    return _loop(_fresh_model(), x, y)


_GLOBAL: dict = {}


def wrong_reuses_a_trained_global_model(train_set):
    """The model is built once outside the function and the cell was run a few times before
    the check: each call adds one epoch to an already trained model."""
    x, y = lesson.decode_all(train_set, cu.get_device())
    return _loop(_GLOBAL["model"], x, y, epochs=1)


def _train_the_global_model():
    """What the learner's earlier runs of the cell did to the global model."""
    _GLOBAL["model"] = _fresh_model()
    x, y = lesson.decode_all(lesson.training_set(), cu.get_device())
    _loop(_GLOBAL["model"], x, y, epochs=3)


wrong_reuses_a_trained_global_model.before = _train_the_global_model


def wrong_fp16_autocast_without_scaler(train_set):
    """fp16 autocast, no GradScaler: small gradients flush to zero (lesson 04)."""
    x, y = lesson.decode_all(train_set, cu.get_device())
    return _loop(_fresh_model(), x, y, dtype=torch.float16)


def valid_leaks_two_threads(train_set):
    """Grabs both cores for itself (and leaves them to the baseline that runs next)."""
    torch.set_num_threads(2)
    x, y = lesson.decode_all(train_set, cu.get_device())
    return _loop(_fresh_model(), x, y)


def wrong_returns_model_and_losses(train_set):
    x, y = lesson.decode_all(train_set, cu.get_device())
    losses: list[float] = []
    model = _loop(_fresh_model(), x, y, log=losses)
    return model, losses


def wrong_casts_model_to_bf16(train_set):
    """'Mixed precision' as a bf16 model: the returned model no longer takes float32 images."""
    device = cu.get_device()
    model = _fresh_model().to(torch.bfloat16)
    x, y = lesson.decode_all(train_set, device)
    opt = torch.optim.AdamW(model.parameters(), lr=0.02)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, 0.02, total_steps=4 * (len(x) // 32))
    generator = torch.Generator().manual_seed(0)
    for _ in range(4):
        for xb, yb in lesson.device_batches(x, y, 32, generator):
            loss = F.cross_entropy(model(xb.to(torch.bfloat16)), yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
    return model


# --- valid alternatives ------------------------------------------------------------------


def valid_item_every_step(train_set):
    """The solution plus a loss log read every step: a sync, free on a CPU."""
    x, y = lesson.decode_all(train_set, cu.get_device())
    losses: list[float] = []
    return _loop(_fresh_model(), x, y, log=losses)


def valid_own_holdout_early_stop(train_set):
    """Holds out 250 training images and stops when they read 5 points above the target."""
    from torch.utils.data import Subset

    order = torch.randperm(len(train_set)).tolist()
    fit_part, val_part = Subset(train_set, order[250:]), Subset(train_set, order[:250])
    device = cu.get_device()
    x, y = lesson.decode_all(fit_part, device)
    vx, vy = lesson.decode_all(val_part, device)
    vx = (vx.float() / 255 - MEAN.to(device)) / STD.to(device)

    def reached(model, epoch):
        model.eval()
        with torch.no_grad():
            acc = (model(vx).argmax(1) == vy).float().mean().item()
        model.train()
        return epoch >= 2 and acc >= lesson.TARGET + 0.05

    model = cu.SmallCNN(width=16).to(device)
    return _loop(model, x, y, epochs=5, after_epoch=reached)


def valid_own_augmentation_unseeded(train_set):
    """Its own per-image crop, flip and normalisation on uint8 device tensors, no lesson batches."""
    device = cu.get_device()
    use_amp = cu.device_class(device) in ("cuda-tensorcore", "cpu-bf16")
    x, y = lesson.decode_all(train_set, device)
    mean, std = MEAN.to(device), STD.to(device)
    model = cu.SmallCNN(width=16).to(device)
    epochs, batch, lr = 5, 32, 0.02  # one more epoch than the solution: no seed, a margin
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, lr, total_steps=epochs * (len(x) // batch))
    padded = F.pad(x, (4, 4, 4, 4))
    for _ in range(epochs):
        order = torch.randperm(len(x), device=device)
        for i in range(len(x) // batch):
            idx = order[i * batch : (i + 1) * batch]
            rows = torch.randint(0, 9, (batch, 1), device=device) + torch.arange(32, device=device)
            cols = torch.randint(0, 9, (batch, 1), device=device) + torch.arange(32, device=device)
            xb = padded[idx][
                torch.arange(batch, device=device).view(-1, 1, 1, 1),
                torch.arange(3, device=device).view(1, 3, 1, 1),
                rows.view(batch, 1, 32, 1),
                cols.view(batch, 1, 1, 32),
            ]  # a random 32x32 crop of each zero-padded image
            flip = torch.rand(len(idx), device=device) < 0.5
            xb = torch.where(flip.view(-1, 1, 1, 1), xb.flip(3), xb)
            xb = (xb.float() / 255 - mean) / std
            with torch.autocast(device.type, dtype=cu.amp_dtype(device), enabled=use_amp):
                loss = F.cross_entropy(model(xb), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
    return model


REFERENCE = r"reference|train_recipe|\bfit\b|reference_speedrun"
HELD_OUT = r"held.?out|test.?split|held_out_accuracy"
# Blaming a read of the held-out split (every message reports "held-out accuracy ... on the
# held-out test split", so the words alone are no blame).
READ_HELD_OUT = r"held_out_accuracy|off.limits|(?<!never )read (it|the (held.?out|test))"

CASES = [
    case(wrong_calls_reference_speedrun, names=REFERENCE, not_names=HELD_OUT),
    case(wrong_calls_train_recipe, names=REFERENCE, not_names=HELD_OUT),
    case(wrong_calls_fit, names=REFERENCE, not_names=HELD_OUT),
    case(wrong_early_stops_on_held_out, names=HELD_OUT, not_names=r"reference"),
    case(valid_item_every_step, "passed"),
    case(valid_own_holdout_early_stop, "passed"),
    case(valid_own_augmentation_unseeded, "passed"),
    case(wrong_swallows_held_out_guard, names=HELD_OUT, not_names=r"reference"),
    case(wrong_early_stops_on_test_split_loader, names=r"test|held.?out", not_names=r"reference"),
    case(wrong_one_epoch, names=r"accura|target", not_names=rf"{REFERENCE}|{READ_HELD_OUT}"),
    case(
        wrong_fifth_of_the_data, names=r"accura|target", not_names=rf"{REFERENCE}|{READ_HELD_OUT}"
    ),
    case(wrong_returns_cached_model, names=r"fresh|same model|cach|reus|already", not_names=None),
    case(wrong_caches_decoded_images, names=r"decod|data prep|cach|reus", not_names=REFERENCE),
    case(
        wrong_reuses_a_trained_global_model,
        names=r"fresh|same model|reus|already|trained before|initiali",
        not_names=REFERENCE,
    ),
    case(
        wrong_fp16_autocast_without_scaler,
        names=r"GradScaler|scaler|float16|fp16|underflow",
        not_names=REFERENCE,
    ),
    # decided after the run: its two threads are counted (CPU seconds of all threads), and the
    # check now restores the thread count after each call, so the baseline that runs next is not
    # slowed by the leak (it was, idle: 4.39x against the reference's ~3.9x): judged on its
    # merits, it passes
    case(valid_leaks_two_threads, "passed"),
    case(wrong_returns_model_and_losses, names=r"return|tuple|module", not_names=HELD_OUT),
    case(wrong_casts_model_to_bf16, names=r"dtype|bfloat16|bf16|float32", not_names=HELD_OUT),
]

CHEAP = {
    "wrong-calls_reference_speedrun",
    "wrong-calls_train_recipe",
    "wrong-calls_fit",
    "wrong-early_stops_on_held_out",
    "wrong-swallows_held_out_guard",
}
HOLES: dict[str, str] = {}  # the 4 open after the blind run are closed (README.md, after fixes)
# no verdict yet: not strict, cut short. Empty: `leaks_two_threads` was decided (see its case).
UNDECIDED: dict[str, str] = {}


def _undecided(params: list) -> list:
    out = []
    for p in params:
        if p.id in UNDECIDED:
            marks = [
                pytest.mark.xfail(strict=False, reason=UNDECIDED[p.id]),
                pytest.mark.timeout(300),
            ]
            p = pytest.param(*p.values, marks=[*p.marks, *marks], id=p.id)
        out.append(p)
    return out


@pytest.mark.parametrize(
    "fn, expect, names, not_names", _undecided(open_holes(in_ci(CASES, CHEAP), HOLES))
)
def test_speedrun_check(fn, expect, names, not_names):
    cu.setup(True)
    threads = torch.get_num_threads()
    getattr(fn, "before", lambda: None)()
    try:
        result = grade(lesson.check_speedrun, fn)
    finally:
        torch.set_num_threads(threads)
    assert_graded(result, expect, names, not_names)
