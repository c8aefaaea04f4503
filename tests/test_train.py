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


def test_scheduler_does_not_advance_when_the_scaler_skips_a_step():
    """fp16 + GradScaler skips the optimizer step on inf/NaN gradients; a one-cycle schedule
    that advanced anyway would end early."""
    from course_utils.train import _step

    w = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.SGD([w], lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    scaler.scale(torch.ones(()))  # as the loss would be: sets up the scale
    w.grad = torch.tensor([1.0, float("inf"), 1.0])
    assert _step(scaler, opt) is False and torch.equal(w.detach(), torch.ones(3))
    w.grad = torch.ones(3)
    assert _step(scaler, opt) is True


def test_train_makes_no_host_device_sync_per_step():
    """The course's reference loop must not carry the sync that lesson 10 teaches to remove:
    losses stay on the device and are read once at the end."""
    from torch.overrides import TorchFunctionMode

    class CountReads(TorchFunctionMode):
        reads = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            reads = (torch.Tensor.item, torch.Tensor.__float__, torch.Tensor.tolist)
            if func in reads and args[0].is_floating_point():  # not the loader's int seed
                CountReads.reads += 1
            return func(*args, **(kwargs or {}))

    model = cu.SmallCNN(width=8)
    with CountReads():
        history = cu.train(
            model, tiny_loader(), torch.optim.SGD(model.parameters(), 0.1), steps=8, progress=False
        )
    assert len(history.loss) == 8 and all(isinstance(v, float) for v in history.loss)
    assert CountReads.reads <= 1


@pytest.fixture
def fp16_on_cpu(monkeypatch):
    """train()'s T4/V100 path (fp16 autocast + GradScaler) run on a CPU: the detection that
    picks it is faked, the scaler and autocast are real."""
    import importlib

    train_module = importlib.import_module("course_utils.train")  # cu.train is the function
    monkeypatch.setattr(cu.device, "amp_dtype", lambda device=None: torch.float16)
    monkeypatch.setattr(train_module, "needs_grad_scaler", lambda device, amp: amp)
    calls = {"step": 0, "get_scale": 0}
    real_step, real_get_scale = torch.amp.GradScaler.step, torch.amp.GradScaler.get_scale

    def step(self, *args, **kwargs):
        calls["step"] += 1
        return real_step(self, *args, **kwargs)

    def get_scale(self):
        calls["get_scale"] += 1
        return real_get_scale(self)

    monkeypatch.setattr(torch.amp.GradScaler, "step", step)
    monkeypatch.setattr(torch.amp.GradScaler, "get_scale", get_scale)
    return calls


def test_fp16_path_trains_through_the_grad_scaler_and_steps_the_schedule(fp16_on_cpu):
    model = cu.SmallCNN(width=8)
    opt = torch.optim.SGD(model.parameters(), 0.1)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=6)
    history = cu.train(
        model, tiny_loader(), opt, steps=6, scheduler=sched, amp=True, progress=False
    )
    assert fp16_on_cpu["step"] == 6
    assert all(torch.isfinite(torch.tensor(history.loss)))
    assert history.lr[-1] < history.lr[1]  # no step was taken as skipped


def test_fp16_path_reads_nothing_back_beyond_the_scalers_own_inf_check(fp16_on_cpu):
    """GradScaler.step reads its inf check to the host (one sync per step, unavoidable for
    a non-fused optimizer); telling a skipped step must not add get_scale() reads."""
    from torch.overrides import TorchFunctionMode

    class CountReads(TorchFunctionMode):
        reads = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            reads = (torch.Tensor.item, torch.Tensor.__float__, torch.Tensor.tolist)
            if func in reads and args[0].is_floating_point():
                CountReads.reads += 1
            return func(*args, **(kwargs or {}))

    model, steps = cu.SmallCNN(width=8), 4
    with CountReads():
        cu.train(
            model, tiny_loader(), torch.optim.SGD(model.parameters(), 0.1), steps=steps,
            amp=True, progress=False,
        )  # fmt: skip
    assert fp16_on_cpu["get_scale"] == 0
    assert CountReads.reads <= steps + 1  # the scaler's inf check per step, the losses once
