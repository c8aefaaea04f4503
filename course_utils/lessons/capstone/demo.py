"""The capstone's demos: airbench94 side by side, the two loops handed to `cu.diagnose`, and
what this mode costs on this device."""

from __future__ import annotations

import time

import torch
from torch import nn
from torch.utils.data import Dataset

from ...device import get_device, synchronize
from ...mode import is_quick
from .recipe import (
    baseline,
    decode_all,
    device_batches,
    make_model,
    make_optimizer,
    newcomer_loader,
    tuned_recipe,
)
from .runs import Run, train_recipe
from .splits import training_set


def mode_note(device=None) -> str:
    """Says what this mode will cost here, so a long run is never a surprise: full mode's
    time on this device by the course's estimator (docs/gpu.md says how it is made)."""
    device = torch.device(device) if device is not None else get_device()
    if is_quick():
        return "Quick mode: a small CNN on 2,500 offline images; about a minute on a 2-core CPU."
    if device.type == "cpu":
        return (
            "Full mode on a CPU: ResNet-9 on the full training set is sized for a GPU and "
            "takes hours here. Set quick = True in the parameters cell (or COURSE_QUICK=1) "
            "unless you mean it; every run below shows a progress bar with its time left."
        )
    from ...device import env_info
    from ...selftest.estimate import estimate

    est = estimate("11", env_info(device), quick=False)
    return (
        f"Full mode: ResNet-9 to 94% on CIFAR-10. Estimated for the whole notebook on this "
        f"GPU: about {est['estimate_s'] / 60:.0f} minutes, airbench94 not included (an "
        "estimate, not a measurement: see the progress bars)."
    )


def compare_airbench(device=None, ours: Run | None = None) -> str:
    """airbench94 timed here, beside our own recipe (`ours`, a tuned run already made, else
    trained now), when it can run: full mode, a CUDA device, CIFAR-10 on disk and the
    `airbench` package installed. Otherwise says why not."""
    device = torch.device(device) if device is not None else get_device()
    from ...data import cifar10_on_disk, data_dir

    missing = [
        why
        for why, ok in (
            ("full mode (quick mode is on)", not is_quick()),
            ("a CUDA GPU", device.type == "cuda"),
            ("CIFAR-10 on disk", cifar10_on_disk()),
        )
        if not ok
    ]
    try:
        import airbench
    except ImportError:
        missing.append("the airbench package (pip install 'faster-pytorch-training[airbench]')")
    if missing:
        return "airbench94 not run here: needs " + ", ".join(missing) + "."
    loader = airbench.CifarLoader(
        str(data_dir()),
        train=True,
        batch_size=1024,
        aug=airbench.lib_airbench94.hyp["aug"],
        altflip=True,
    )
    test = airbench.CifarLoader(str(data_dir()), train=False, batch_size=2000)
    airbench.warmup94(train_loader=loader, verbose=False)  # compiles kernels; not timed
    synchronize(device)
    t0 = time.perf_counter()
    model = airbench.train94(train_loader=loader, verbose=False)
    synchronize(device)
    seconds = time.perf_counter() - t0
    accuracy = airbench.evaluate(model, test, tta_level=2)
    if ours is None or ours.accuracy is None:  # a timing run has no accuracy: train one
        ours = train_recipe(tuned_recipe(device), training_set(), 0, device, label="tuned")
    return (
        f"airbench94: {seconds:.2f} s to {accuracy:.2%} (with its test-time augmentation); "
        f"this course's tuned recipe: {ours.seconds:.2f} s to {ours.accuracy:.2%}, same GPU: "
        f"{ours.seconds / seconds:.1f}x airbench94's time (the goal: within 2x)."
    )


# --- the two loops, handed to cu.diagnose --------------------------------------------------


def baseline_loop(dataset: Dataset, device=None) -> dict:
    """The baseline's model, optimizer, loader and loop body (with its `.item()` per step),
    as `cu.diagnose(**parts)` takes them."""
    device = torch.device(device) if device is not None else get_device()
    model = make_model(baseline()).to(device)
    optimizer = make_optimizer(baseline(), model.parameters(), device)
    loader = newcomer_loader(dataset, baseline().batch_size)

    def step(batch) -> None:
        x, y = batch[0].to(device), batch[1].to(device)
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=False)
        loss.backward()
        optimizer.step()
        loss.item()

    return {"model": model, "optimizer": optimizer, "loader": loader, "step": step}


def tuned_loop(dataset: Dataset, device=None) -> dict:
    """The tuned recipe's model, optimizer and batches (decoded once, on the device)."""
    device = torch.device(device) if device is not None else get_device()
    recipe = tuned_recipe(device)
    fmt = torch.channels_last if recipe.channels_last else torch.contiguous_format
    model = make_model(recipe).to(device, memory_format=fmt)
    optimizer = make_optimizer(recipe, model.parameters(), device)
    x, y = decode_all(dataset, device)
    batches = list(device_batches(x, y, recipe.batch_size, torch.Generator().manual_seed(0)))
    return {"model": model, "optimizer": optimizer, "loader": batches, "amp": recipe.amp}
