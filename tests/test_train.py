"""The reference training loop: step counting, a per-step scheduler, accumulation, history."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import course_utils as cu


def tiny_loader(n: int = 64, batch: int = 16) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(
        torch.randn(n, 3, 32, 32, generator=g), torch.randint(0, 10, (n,), generator=g)
    )
    return DataLoader(data, batch_size=batch)


def test_train_runs_epochs_times_batches_steps_and_records_history():
    model = cu.SmallCNN(width=8)
    history = cu.train(
        model, tiny_loader(), torch.optim.SGD(model.parameters(), 0.1), epochs=2, progress=False
    )
    assert history.step == list(range(1, 9))
    assert len(history.loss) == len(history.lr) == len(history.seconds) == 8
    assert history.env["device_class"] in cu.device.DEVICE_CLASSES


def test_train_steps_the_scheduler_once_per_optimizer_step():
    model = cu.SmallCNN(width=8)
    opt = torch.optim.SGD(model.parameters(), 0.1)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=6)
    history = cu.train(model, tiny_loader(), opt, steps=6, scheduler=sched, progress=False)
    assert history.lr[-1] < history.lr[1]  # annealed to the end of the cycle in 6 steps


def test_train_with_accumulation_matches_full_batch_gradient():
    torch.manual_seed(0)
    full, accum = cu.MLP(dim=8, hidden=16, depth=1, out=3), cu.MLP(dim=8, hidden=16, depth=1, out=3)
    accum.load_state_dict(full.state_dict())
    x, y = torch.randn(32, 8), torch.randint(0, 3, (32,))
    big = DataLoader(TensorDataset(x, y), batch_size=32)
    small = DataLoader(TensorDataset(x, y), batch_size=8)
    cu.train(
        full, big, torch.optim.SGD(full.parameters(), 0.5), steps=1, progress=False, device="cpu"
    )
    cu.train(
        accum,
        small,
        torch.optim.SGD(accum.parameters(), 0.5),
        steps=1,
        accumulate=4,
        progress=False,
        device="cpu",
    )
    for a, b in zip(full.parameters(), accum.parameters(), strict=True):
        torch.testing.assert_close(a, b)


def test_train_evaluates_and_reports_steps_to_accuracy():
    model = cu.SmallCNN(width=8)
    loader = tiny_loader()
    history = cu.train(
        model,
        loader,
        torch.optim.SGD(model.parameters(), 0.1),
        steps=4,
        eval_loader=loader,
        eval_every=2,
        progress=False,
    )
    assert history.eval_step == [2, 4]
    assert history.steps_to(0.0) == 2 and history.steps_to(1.01) is None


def test_train_needs_steps_or_epochs():
    model = cu.SmallCNN(width=8)
    with pytest.raises(ValueError):
        cu.train(model, tiny_loader(), torch.optim.SGD(model.parameters(), 0.1), progress=False)
