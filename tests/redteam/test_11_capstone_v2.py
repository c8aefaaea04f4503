"""Red team, round 2, for 11-capstone's `check_speedrun`: the rules added last (a fresh model
trained on the renamed `train_set` of every call, data prepared inside every call, the test
split off limits in DataLoader workers too, fp16 autocast only through a GradScaler).

Written blind, from the notebook's markdown alone (section 1, the exercise, its hint): each
`wrong_*` is a plausible learner mistake with the cause its message must name (and causes it
must not be blamed for); each `valid_*` is an answer a strong learner could write. A learner
function's "earlier cell" (state made before `lesson.check_speedrun(speedrun)` runs) is its
`prepare`, run just before the check. Every case trains for real in quick mode (SmallCNN,
2,500 offline images), so a valid case costs 20-60 s on a 2-core CPU; CI runs the cases in
`CI_KEEP`, COURSE_REDTEAM=all runs them all.
"""

from __future__ import annotations

import copy
import io

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from redteam_helpers import assert_graded, blame, case, grade, in_ci
from torch.utils.data import DataLoader, Subset

import course_utils as cu
from course_utils.lessons import capstone as lesson

pytestmark = pytest.mark.timeout(900)

MEAN = torch.tensor([0.4914, 0.4822, 0.4465]).view(1, 3, 1, 1)
STD = torch.tensor([0.2470, 0.2435, 0.2616]).view(1, 3, 1, 1)

# What the learner's notebook holds from earlier cells (filled by `prepare`s, cleared after).
NB: dict = {}


def before(prepare):
    """Marks a learner function with the earlier cell it relies on."""

    def mark(fn):
        fn.prepare = prepare
        return fn

    return mark


# ---- the learner's own helpers (an earlier cell: functions, no data) ---------------------


def choices(device):
    """(model, epochs, batch, peak_lr, use_amp, channels_last) for this device."""
    use_amp = cu.device_class(device) in ("cpu-bf16", "cuda-tensorcore")
    layout = cu.channels_last_pays(device, autocast=use_amp)
    return cu.SmallCNN(width=16), 4, 32, 0.02, use_amp, layout


def train_tensors(
    model,
    x,
    y,
    device,
    epochs=4,
    batch=32,
    peak=0.02,
    use_amp=None,
    seed=0,
    on_epoch=None,
    on_step=None,
):
    """One-cycle AdamW on uint8 images already on the device (lesson 03's loop); `on_epoch`
    is called with the model after each epoch."""
    if use_amp is None:
        use_amp = cu.device_class(device) in ("cpu-bf16", "cuda-tensorcore")
    model = model.to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=peak / 25, weight_decay=5e-4)
    per_epoch = (len(x) + batch - 1) // batch
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, peak, total_steps=epochs * per_epoch)
    g = torch.Generator(device=device).manual_seed(seed)
    for _ in range(epochs):
        for xb, yb in lesson.device_batches(x, y, batch, g):
            with torch.autocast(device.type, dtype=cu.amp_dtype(device), enabled=use_amp):
                loss = F.cross_entropy(model(xb), yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            if on_step is not None:
                on_step(model)
        if on_epoch is not None:
            on_epoch(model.eval())
            model.train()
    return model.eval()


def normalise(xb):
    return (xb.float() / 255 - MEAN.to(xb.device)) / STD.to(xb.device)


# ---- wrong answers ------------------------------------------------------------------------


def wrong_global_train_set(train_set):
    """Trains on the notebook's global `train_set` (lesson.training_set()), not its argument:
    every call learns the original class names, so its model predicts the old names."""
    torch.manual_seed(0)
    device = cu.get_device()
    x, y = lesson.decode_all(NB.setdefault("train_set", lesson.training_set()), device)
    return train_tensors(cu.SmallCNN(width=16), x, y, device)


def _decode_global():
    NB["x"], NB["y"] = lesson.decode_all(lesson.training_set(), cu.get_device())


@before(_decode_global)
def wrong_decoded_in_earlier_cell(train_set):
    """Decoded the images once in an earlier cell and only reads the renamed labels from its
    argument (`train_set.targets`): the data preparation is out of the timed call."""
    torch.manual_seed(0)
    device = cu.get_device()
    y = torch.as_tensor(train_set.targets, device=device)
    return train_tensors(cu.SmallCNN(width=16), NB["x"], y, device)


@before(_decode_global)
def wrong_labels_from_earlier_cell(train_set):
    """Decodes its argument's images but takes the labels decoded in an earlier cell from the
    unrenamed set: the model learns (and predicts) the old class names."""
    torch.manual_seed(0)
    device = cu.get_device()
    x, _ = lesson.decode_all(train_set, device)
    return train_tensors(cu.SmallCNN(width=16), x, NB["y"], device)


CACHE: dict = {}


def wrong_cache_across_calls(train_set):
    """Memoises decode_all in a module-level cache keyed by the set's length: the 2nd and 3rd
    calls reuse the 1st call's images *and* its labels (another renaming)."""
    torch.manual_seed(0)
    device = cu.get_device()
    key = ("xy", len(train_set))
    if key not in CACHE:
        CACHE[key] = lesson.decode_all(train_set, device)
    x, y = CACHE[key]
    return train_tensors(cu.SmallCNN(width=16), x, y, device)


def wrong_cache_images_only(train_set):
    """Caches only the decoded images across calls, reading each call's labels fresh from
    `train_set.targets`: labels are right, but the decoding was taken out of the timed runs."""
    torch.manual_seed(0)
    device = cu.get_device()
    key = ("x", len(train_set))
    if key not in CACHE:
        CACHE[key] = lesson.decode_all(train_set, device)[0]
    y = torch.as_tensor(train_set.targets, device=device)
    return train_tensors(cu.SmallCNN(width=16), CACHE[key], y, device)


def wrong_cache_pil_items(train_set):
    """Caches the (PIL image) items of the first call and converts them to tensors each call,
    labels from each call's `train_set.targets`: the images were decoded once, not per call."""
    torch.manual_seed(0)
    device = cu.get_device()
    if "ims" not in CACHE:
        CACHE["ims"] = [train_set[i][0] for i in range(len(train_set))]
    arr = np.stack([np.asarray(im, dtype=np.uint8) for im in CACHE["ims"]])
    x = torch.from_numpy(arr).permute(0, 3, 1, 2).contiguous().to(device)
    y = torch.as_tensor(train_set.targets, device=device)
    return train_tensors(cu.SmallCNN(width=16), x, y, device)


def wrong_cache_checked_by_first_item(train_set):
    """Caches the decoded images and, to be safe, reuses them only while the call's first
    image matches the cached one (one item read per call); labels from `train_set.targets`."""
    torch.manual_seed(0)
    device = cu.get_device()
    first = torch.from_numpy(np.array(train_set[0][0], dtype=np.uint8)).permute(2, 0, 1)
    if "x" not in CACHE or not torch.equal(CACHE["x"][0].cpu(), first):
        CACHE["x"] = lesson.decode_all(train_set, device)[0]
    y = torch.as_tensor(train_set.targets, device=device)
    return train_tensors(cu.SmallCNN(width=16), CACHE["x"], y, device)


def wrong_undo_renaming(train_set):
    """Reads the renaming off its argument (`train_set.shift`) and undoes it "to get the real
    classes": the model predicts the original names, not the ones it is judged under."""
    torch.manual_seed(0)
    device = cu.get_device()
    x, y = lesson.decode_all(train_set, device)
    y = (y - getattr(train_set, "shift", 0)) % 10
    return train_tensors(cu.SmallCNN(width=16), x, y, device)


def wrong_kept_model(train_set):
    """Keeps one model in a global and trains it further each call (a full run every time):
    only the first call builds a fresh model."""
    torch.manual_seed(0)
    device = cu.get_device()
    if "model" not in NB:
        NB["model"] = cu.SmallCNN(width=16)
    x, y = lesson.decode_all(train_set, device)
    return train_tensors(NB["model"], x, y, device)


def wrong_kept_model_copied(train_set):
    """Trains one global model further each call but returns a deepcopy of it ("so the caller
    cannot change mine"): a new object every call, the same training carried over."""
    torch.manual_seed(0)
    device = cu.get_device()
    if "model" not in NB:
        NB["model"] = cu.SmallCNN(width=16)
    x, y = lesson.decode_all(train_set, device)
    return copy.deepcopy(train_tensors(NB["model"], x, y, device))


def wrong_warm_start_from_first_call(train_set):
    """Trains fresh on the first call, saves its weights, and later calls start from them with
    a new head and 2 epochs: the later timed runs reuse the first call's training."""
    torch.manual_seed(0)
    device = cu.get_device()
    x, y = lesson.decode_all(train_set, device)
    model = cu.SmallCNN(width=16)
    if "first" not in NB:
        NB["first"] = copy.deepcopy(train_tensors(model, x, y, device).state_dict())
        return model
    model.load_state_dict(NB["first"])
    model.net[-1].reset_parameters()
    return train_tensors(model, x, y, device, epochs=2)


def wrong_weaker_later_calls(train_set):
    """Counts its calls and trains 1 epoch instead of 4 after the first ("the first run showed
    it reaches the target"): the later timed runs return models below the target."""
    torch.manual_seed(0)
    device = cu.get_device()
    NB["calls"] = NB.get("calls", 0) + 1
    x, y = lesson.decode_all(train_set, device)
    epochs = 4 if NB["calls"] == 1 else 1
    return train_tensors(cu.SmallCNN(width=16), x, y, device, epochs=epochs)


def _pretrain():
    torch.manual_seed(1)
    device = cu.get_device()
    x, y = lesson.decode_all(lesson.training_set(), device)
    model = train_tensors(cu.SmallCNN(width=16), x, y, device)
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    NB["weights"] = buf.getvalue()


@before(_pretrain)
def wrong_pretrained_finetune(train_set):
    """Builds a new SmallCNN but loads the state_dict an earlier cell trained, gives it a new
    head and fine-tunes 2 epochs on its argument: the model object is new, its training not."""
    torch.manual_seed(0)
    device = cu.get_device()
    model = cu.SmallCNN(width=16)
    model.load_state_dict(torch.load(io.BytesIO(NB["weights"])))
    model.net[-1].reset_parameters()  # a new head: the class names move each call
    x, y = lesson.decode_all(train_set, device)
    return train_tensors(model, x, y, device, epochs=2)


def _val_set():
    NB["val"] = cu.load_data().test  # an earlier cell: "a validation set"


def _val_accuracy(model, loader, device):
    hits = total = 0
    with torch.no_grad():
        for xb, yb in loader:
            hits += (model(xb.to(device)).argmax(1) == yb.to(device)).sum()
            total += len(yb)
    return float(hits) / total


def _train_with_val(train_set, make_loader):
    """Trains 4 epochs and keeps the weights of its best late epoch on the "validation" set,
    each evaluation in try/except ("validation is optional")."""
    torch.manual_seed(0)
    device = cu.get_device()
    x, y = lesson.decode_all(train_set, device)
    model = cu.SmallCNN(width=16).to(device)
    best = {"acc": -1.0, "state": None, "epoch": 0}

    def on_epoch(m):
        best["epoch"] += 1
        if best["epoch"] < 3:
            return
        try:
            acc = _val_accuracy(m, make_loader(), device)
        except Exception:
            return
        NB.setdefault("val_log", []).append(acc)  # the learner's print(acc)
        if acc > best["acc"]:
            best["acc"], best["state"] = acc, copy.deepcopy(m.state_dict())

    train_tensors(model, x, y, device, on_epoch=on_epoch)
    if best["state"] is not None:
        model.load_state_dict(best["state"])
    return model.eval()


@before(_val_set)
def wrong_test_split_in_workers(train_set):
    """Selects its best epoch on `cu.load_data().test` (kept from an earlier cell) through a
    DataLoader with 2 worker processes, the evaluation's errors swallowed."""
    return _train_with_val(train_set, lambda: DataLoader(NB["val"], batch_size=500, num_workers=2))


@before(_val_set)
def wrong_test_split_in_spawned_workers(train_set):
    """The same peek with spawned workers (macOS's default start method): the test split is
    read in fresh interpreters, the evaluation's errors swallowed."""
    return _train_with_val(
        train_set,
        lambda: DataLoader(
            NB["val"], batch_size=500, num_workers=2, multiprocessing_context="spawn"
        ),
    )


def _collate_pil(items):
    ims, labs = zip(*items, strict=True)
    arr = np.stack([np.asarray(im, dtype=np.uint8) for im in ims])
    return torch.from_numpy(arr).permute(0, 3, 1, 2), torch.tensor(labs)


def _stats_in_worker(worker_id):
    """Each decoding worker measures the channel means on the "whole data set", test split
    included, and says nothing when it cannot."""
    try:
        test = cu.load_data().test
        NB["worker_mean"] = torch.stack([test[i][0] for i in range(256)]).mean((0, 2, 3))
    except Exception:
        pass


def wrong_test_split_in_worker_init(train_set):
    """Decodes its argument through a DataLoader (2 workers) whose worker_init_fn reads test
    images for normalisation statistics, the error swallowed: the read happens in a worker."""
    torch.manual_seed(0)
    device = cu.get_device()
    loader = DataLoader(
        train_set,
        batch_size=250,
        num_workers=2,
        collate_fn=_collate_pil,
        worker_init_fn=_stats_in_worker,
    )
    xs, ys = zip(*loader, strict=True)
    x, y = torch.cat(xs).contiguous().to(device), torch.cat(ys).to(device)
    return train_tensors(cu.SmallCNN(width=16), x, y, device)


def _persistent_val_loader():
    _val_set()
    loader = DataLoader(NB["val"], batch_size=500, num_workers=2, persistent_workers=True)
    next(iter(loader))  # the earlier cell tried it once: its workers are up
    NB["val_loader"] = loader


@before(_persistent_val_loader)
def wrong_test_split_persistent_workers(train_set):
    """Selects its best epoch through a validation loader over the test split made in an
    earlier cell with persistent_workers=True: its workers were started before the check."""
    return _train_with_val(train_set, lambda: NB["val_loader"])


def wrong_fp16_without_scaler(train_set):
    """Mixes precisions "where each pays": bf16 autocast for the convolutions, fp16 autocast
    for the linear head, and no GradScaler: fp16 gradients are left unscaled."""
    torch.manual_seed(0)
    device = cu.get_device()
    x, y = lesson.decode_all(train_set, device)
    model = cu.SmallCNN(width=16).to(device).train()
    body, head = model.net[:-1], model.net[-1]
    opt = torch.optim.AdamW(model.parameters(), lr=0.02 / 25, weight_decay=5e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, 0.02, total_steps=4 * 79)
    g = torch.Generator(device=device).manual_seed(0)
    for _ in range(4):
        for xb, yb in lesson.device_batches(x, y, 32, g):
            with torch.autocast(device.type, dtype=torch.bfloat16):
                feats = body(xb)
            with torch.autocast(device.type, dtype=torch.float16):
                loss = F.cross_entropy(head(feats.float()), yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
    return model.eval()


# ---- valid answers --------------------------------------------------------------------------


def valid_plain(train_set):
    """The notebook's recipe: decode_all once per call, device_batches, AdamW + one-cycle,
    bf16 autocast and channels_last where the course's tables say they pay."""
    torch.manual_seed(0)
    device = cu.get_device()
    model, epochs, batch, peak, use_amp, layout = choices(device)
    x, y = lesson.decode_all(train_set, device)
    if layout:
        model = model.to(memory_format=torch.channels_last)
    return train_tensors(model, x, y, device, epochs, batch, peak, use_amp)


def augment(xb):
    """Per-image random 4-pixel translation and horizontal flip, on uint8 (N, 3, 32, 32)."""
    n = len(xb)
    xp = F.pad(xb, (4, 4, 4, 4))
    dy, dx = torch.randint(0, 9, (2, n, 1), device=xb.device)
    rows = (dy + torch.arange(32, device=xb.device))[:, None, :, None]
    cols = (dx + torch.arange(32, device=xb.device))[:, None, None, :]
    chans = torch.arange(3, device=xb.device)[None, :, None, None]
    xb = xp[torch.arange(n, device=xb.device)[:, None, None, None], chans, rows, cols]
    flip = torch.rand(n, device=xb.device) < 0.5
    return torch.where(flip[:, None, None, None], xb.flip(3), xb)


def valid_own_decoding(train_set):
    """Decodes the items itself (PIL -> numpy, labels from the items), augments per image
    with its own crop/flip and trains with SGD-Nesterov + one-cycle in fp32."""
    torch.manual_seed(0)
    device = cu.get_device()
    images, labels = zip(*(train_set[i] for i in range(len(train_set))), strict=True)
    x = torch.from_numpy(np.stack([np.asarray(im, dtype=np.uint8) for im in images]))
    x = x.permute(0, 3, 1, 2).contiguous().to(device)
    y = torch.tensor(labels, device=device)
    model = cu.SmallCNN(width=16).to(device).train()
    epochs, batch = 5, 32
    opt = torch.optim.SGD(
        model.parameters(), lr=0.01, momentum=0.9, nesterov=True, weight_decay=5e-4
    )
    per_epoch = (len(x) + batch - 1) // batch
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, 0.1, total_steps=epochs * per_epoch)
    for _ in range(epochs):
        order = torch.randperm(len(x), device=device)
        for i in range(0, len(x), batch):
            idx = order[i : i + batch]
            loss = F.cross_entropy(model(normalise(augment(x[idx]))), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
    return model.eval()


def valid_holdout_validation(train_set):
    """Holds out 10% of its argument as a validation split (as section 1 suggests), trains on
    the rest and keeps the best of its epochs on that split."""
    torch.manual_seed(0)
    device = cu.get_device()
    order = torch.randperm(len(train_set), generator=torch.Generator().manual_seed(0)).tolist()
    n_val = len(train_set) // 10
    x, y = lesson.decode_all(Subset(train_set, order[n_val:]), device)
    xv, yv = lesson.decode_all(Subset(train_set, order[:n_val]), device)
    best = {"acc": -1.0, "state": None}

    def on_epoch(m):
        with torch.no_grad():
            acc = (m(normalise(xv)).argmax(1) == yv).float().mean().item()
        if acc >= best["acc"]:
            best["acc"], best["state"] = acc, copy.deepcopy(m.state_dict())

    model = train_tensors(cu.SmallCNN(width=16), x, y, device, epochs=5, on_epoch=on_epoch)
    model.load_state_dict(best["state"])
    return model.eval()


def valid_best_epoch_deepcopy(train_set):
    """Holds out 10% of its argument and keeps `copy.deepcopy(model)` of the best epoch on it
    (the common "best model" idiom), returning that copy: built and trained in this call."""
    torch.manual_seed(0)
    device = cu.get_device()
    order = torch.randperm(len(train_set), generator=torch.Generator().manual_seed(0)).tolist()
    n_val = len(train_set) // 10
    x, y = lesson.decode_all(Subset(train_set, order[n_val:]), device)
    xv, yv = lesson.decode_all(Subset(train_set, order[:n_val]), device)
    best = {"acc": -1.0, "model": None}

    def on_epoch(m):
        with torch.no_grad():
            acc = (m(normalise(xv)).argmax(1) == yv).float().mean().item()
        if acc >= best["acc"]:
            best["acc"], best["model"] = acc, copy.deepcopy(m)

    train_tensors(cu.SmallCNN(width=16), x, y, device, epochs=5, on_epoch=on_epoch)
    return best["model"].eval()


def valid_ema_weights(train_set):
    """Keeps an exponential moving average of the weights with torch's own
    `swa_utils.AveragedModel` (buffers averaged too) and returns the averaged model."""
    from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

    torch.manual_seed(0)
    device = cu.get_device()
    x, y = lesson.decode_all(train_set, device)
    model = cu.SmallCNN(width=16).to(device)
    ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.95), use_buffers=True)

    def after_step(m):
        ema.update_parameters(m)

    train_tensors(model, x, y, device, epochs=5, on_step=after_step)
    return ema.module.eval()


def valid_decode_in_workers(train_set):
    """Decodes its argument once per call through a DataLoader with 2 workers (not persistent,
    made inside the call) into uint8 tensors, then trains on them: prep inside the call."""
    torch.manual_seed(0)
    device = cu.get_device()

    def collate(items):
        ims, labs = zip(*items, strict=True)
        arr = np.stack([np.asarray(im, dtype=np.uint8) for im in ims])
        return torch.from_numpy(arr).permute(0, 3, 1, 2), torch.tensor(labs)

    loader = DataLoader(train_set, batch_size=250, num_workers=2, collate_fn=collate)
    xs, ys = zip(*loader, strict=True)
    x, y = torch.cat(xs).contiguous().to(device), torch.cat(ys).to(device)
    return train_tensors(cu.SmallCNN(width=16), x, y, device)


def valid_fp16_head_with_scaler(train_set):
    """wrong_fp16_without_scaler done right: the fp16 part trains through torch.amp.GradScaler,
    as the hint asks (odd on a CPU, but within the rules)."""
    torch.manual_seed(0)
    device = cu.get_device()
    x, y = lesson.decode_all(train_set, device)
    model = cu.SmallCNN(width=16).to(device).train()
    body, head = model.net[:-1], model.net[-1]
    opt = torch.optim.AdamW(model.parameters(), lr=0.02 / 25, weight_decay=5e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, 0.02, total_steps=4 * 79)
    scaler = torch.amp.GradScaler(device.type)
    g = torch.Generator(device=device).manual_seed(0)
    for _ in range(4):
        for xb, yb in lesson.device_batches(x, y, 32, g):
            with torch.autocast(device.type, dtype=torch.bfloat16):
                feats = body(xb)
            with torch.autocast(device.type, dtype=torch.float16):
                loss = F.cross_entropy(head(feats.float()), yb)
            opt.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            sched.step()
    return model.eval()


# ---- the cases --------------------------------------------------------------------------------

NAMES = r"predict|class names|old names|renam"  # the model learned other class names
CACHED = r"cach|decod|prepar"  # data prepared outside the timed call
FRESH = r"fresh|kept|earlier (call|run|cell)|pretrain|state_dict|weights"  # model not fresh
PEEK = r"test split.*(read|reach|off limits)|(read|reach).*test split|load_data|peek"
SCALER = r"scaler"

CASES = [
    case(wrong_global_train_set, names=NAMES, not_names=r"cach|fresh|scaler"),
    case(wrong_decoded_in_earlier_cell, names=CACHED, not_names=r"predicts|fresh|scaler"),
    case(wrong_labels_from_earlier_cell, names=NAMES, not_names=r"fresh|scaler"),
    case(wrong_cache_across_calls, names=CACHED, not_names=r"fresh|scaler"),
    case(wrong_cache_images_only, names=CACHED, not_names=r"predicts|fresh|scaler"),
    case(wrong_cache_pil_items, names=CACHED, not_names=r"predicts|fresh|scaler"),
    case(wrong_cache_checked_by_first_item, names=CACHED, not_names=r"predicts|fresh|scaler"),
    case(wrong_undo_renaming, names=NAMES, not_names=r"cach|fresh|scaler"),
    case(wrong_kept_model, names=FRESH, not_names=r"cach|scaler"),
    case(wrong_kept_model_copied, names=FRESH, not_names=r"cach|scaler"),
    case(wrong_warm_start_from_first_call, names=FRESH, not_names=r"cach|scaler"),
    case(wrong_weaker_later_calls, names=r"accura|target", not_names=r"cach|scaler"),
    case(wrong_pretrained_finetune, names=FRESH, not_names=r"cach|scaler"),
    case(wrong_test_split_in_workers, names=PEEK, not_names=r"cach|fresh|scaler"),
    case(wrong_test_split_in_spawned_workers, names=PEEK, not_names=r"cach|fresh|scaler"),
    case(wrong_test_split_in_worker_init, names=PEEK, not_names=r"cach|fresh|scaler"),
    case(wrong_test_split_persistent_workers, names=PEEK, not_names=r"cach|fresh|scaler"),
    case(wrong_fp16_without_scaler, names=SCALER, not_names=r"cach|fresh|predicts"),
    case(valid_plain, expect="passed"),
    case(valid_own_decoding, expect="passed"),
    case(valid_holdout_validation, expect="passed"),
    case(valid_best_epoch_deepcopy, expect="passed"),
    case(valid_ema_weights, expect="passed"),
    case(valid_decode_in_workers, expect="passed"),
    case(valid_fp16_head_with_scaler, expect="passed"),
]

# CI runs two cheap wrong answers whose probes the author's tests reach another way (the
# labels probe, a test-split loader started before the check); every case runs with
# COURSE_REDTEAM=all (results in README.md). The author's fast tests of the same rules are
# tests/test_lesson_11_watch.py.
CI_KEEP = {"wrong-undo_renaming", "wrong-test_split_persistent_workers"}


@pytest.fixture(scope="module", autouse=True)
def quick_mode():
    cu.setup(True)
    yield


@pytest.mark.parametrize("fn, expect, names, not_names", in_ci(CASES, CI_KEEP))
def test_check_speedrun(fn, expect, names, not_names):
    NB.clear()
    CACHE.clear()
    try:
        getattr(fn, "prepare", lambda: None)()
        result = grade(lesson.check_speedrun, fn)
    finally:
        NB.clear()  # drops a persistent loader (its workers end with it)
        CACHE.clear()
    print(f"VERDICT {fn.__name__}: {result.status}: {blame(result)}")
    assert_graded(result, expect, names, not_names)
