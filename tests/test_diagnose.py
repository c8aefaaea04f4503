"""cu.diagnose: planted loops, one inefficiency each, give that finding and no other; a tuned
loop gives none; the learner's model, optimizer, RNG and flags come back unchanged. CUDA-only
findings are tested by faking the device class and the timing probe."""

from __future__ import annotations

import contextlib
import importlib
import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_utils import data as cu_data
from course_utils import device as cu_device
from course_utils.diagnose import Diagnosis, Finding, diagnose, probes
from course_utils.diagnose.findings import LESSONS, rank
from course_utils.diagnose.run import SyncSpy
from course_utils.models import MLP, SmallCNN

# the package itself (`course_utils.diagnose` as an attribute is the function `cu.diagnose`)
DIAGNOSE = importlib.import_module("course_utils.diagnose")

STEPS = 12
AMP = cu_device.device_class("cpu") in probes.AMP_CLASSES  # the tuned loop uses bf16 here


@pytest.fixture(autouse=True)
def _steady(one_thread):
    """One torch thread: small steps time far more steadily on a shared 2-core machine."""


def images(n: int = 256, size: int = 16, batch: int = 128) -> list:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(n, 3, size, size, generator=g), torch.randint(0, 10, (n,), generator=g)
    return [(x[i : i + batch], y[i : i + batch]) for i in range(0, n, batch)]


def vectors(n: int = 512, dim: int = 16, batch: int = 256) -> list:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(n, dim, generator=g), torch.randint(0, 10, (n,), generator=g)
    return [(x[i : i + batch], y[i : i + batch]) for i in range(0, n, batch)]


def cnn(bias: bool = False):
    torch.manual_seed(0)
    model = SmallCNN(width=8, bias=bias)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)


def tuned_step(
    model, optimizer, *, read_loss=False, set_to_none=True, anomaly=False, read=None, amp=AMP
):
    """A clean loop body (bf16 autocast where the device class says it pays), with the habit
    the test plants switched on."""

    def step(batch):
        x, y = batch
        with torch.autograd.set_detect_anomaly(anomaly), torch.autocast("cpu", enabled=amp):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=set_to_none)
        if read_loss:
            print(f"loss {loss.item():.3f}", end="\r")
        if read is not None:
            read(loss.detach())

    return step


def only(d: Diagnosis, kind: str) -> Finding:
    assert d.kinds() == [kind], str(d)
    f = d[kind]
    assert f.lesson == LESSONS[kind] and f.evidence and f.fix
    return f


def test_tuned_loop_has_no_findings():
    model, opt = cnn()
    d = diagnose(model, opt, images(), tuned_step(model, opt), steps=STEPS)
    assert d.findings == [], str(d)
    assert "No findings" in str(d) and "No findings" in d._repr_html_()


def test_loader_that_decodes_in_the_main_process_is_data_bound():
    model, opt = cnn()
    data = cu_data.OfflineImages(512, stored_size=16, transform=cu_data.test_transform(16, 16))
    loader = torch.utils.data.DataLoader(data, batch_size=128, num_workers=0)
    f = only(diagnose(model, opt, loader, tuned_step(model, opt), steps=STEPS), "data-bound")
    assert f.gain >= 1.2 and f.basis == "measured"
    assert "num_workers=0" in f.evidence and "num_workers=" in f.fix


def test_reading_the_loss_every_step_counts_syncs_from_learner_code_only():
    model, opt = cnn()
    d = diagnose(model, opt, images(), tuned_step(model, opt, read_loss=True), steps=STEPS)
    f = only(d, "syncs")
    assert f.data["calls"] == {"item": f.data["calls"]["item"]}
    assert f.data["per_step"] == 1.0  # one .item() per step; torch.optim's own reads not counted
    assert "counted, not timed" in f.evidence  # honest on a CPU: no queue to drain here


@pytest.mark.parametrize(
    ("habit", "name"),
    [
        (lambda loss: print(loss, end="\r"), "repr"),
        (lambda loss: f"{loss:.3f}", "format"),
        (lambda loss: loss > 10 and None, "bool"),
        (lambda loss: loss.detach().cpu().numpy(), "numpy"),
        (lambda loss: loss.tolist(), "tolist"),
    ],
)
def test_each_kind_of_host_read_is_counted_once(habit, name):
    loss = torch.tensor(2.5)
    with SyncSpy() as spy:
        habit(loss)
    assert dict(spy.calls) == ({"cpu": 1, "numpy": 1} if name == "numpy" else {name: 1})


def test_reads_made_inside_torch_are_not_the_learners_syncs():
    model = MLP(dim=8, hidden=8, depth=1)
    opt = torch.optim.Adam(model.parameters(), foreach=False)  # reads its step counters
    model(torch.randn(4, 8)).sum().backward()
    with SyncSpy() as spy:
        opt.step()
        print(torch.randn(3), end="\r")  # formatting reads elements: torch's own calls
    assert dict(spy.calls) == {"repr": 1}


def test_zeroing_grads_to_tensors_is_seen():
    model, opt = cnn()
    step = tuned_step(model, opt, set_to_none=False)
    f = only(diagnose(model, opt, images(), step, steps=STEPS), "grads-zeroed")
    assert "zero" in f.data["grad_states"]


def test_bias_before_batchnorm_found_by_data_flow():
    model, opt = cnn(bias=True)
    f = only(diagnose(model, opt, images(), tuned_step(model, opt), steps=STEPS), "bias-before-bn")
    assert len(f.data["pairs"]) == 3 and "data flow" in f.evidence


class ConvReluBN(nn.Module):
    """A biased conv whose output reaches BatchNorm only through a ReLU: not redundant."""

    def __init__(self):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)

    def forward(self, x):
        return self.bn(F.relu(self.conv(x))).mean((2, 3))


class CustomForward(nn.Module):
    """Registered BN first, conv second, but the forward feeds conv -> BN: data flow decides."""

    def __init__(self):
        super().__init__()
        self.bn, self.conv = nn.BatchNorm2d(4), nn.Conv2d(3, 4, 3)

    def forward(self, x):
        return self.bn(self.conv(x)).mean((2, 3))


@pytest.mark.parametrize(("module", "found"), [(ConvReluBN, False), (CustomForward, True)])
def test_bias_before_bn_follows_the_forward_not_the_registration_order(module, found):
    from course_utils.diagnose.structure import pairs_by_data_flow

    pairs = pairs_by_data_flow(module(), (torch.randn(2, 3, 8, 8),), {})
    assert pairs == ([("conv", "bn")] if found else [])


def test_for_loop_optimizer_on_many_small_tensors():
    torch.manual_seed(0)
    model = MLP(dim=16, hidden=16, depth=64)  # 130 tensors: per-tensor overhead shows
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)
    # fp32, batch 2048: near this 16-wide MLP's knee, where the batch probe is not the subject
    # (its own tests are): a loaded CI rehearsal measured 1.30x at 4096 and 1.60x at 8192 and
    # added a small-batch finding beside this one, which other runs did not
    data = vectors(n=4096, dim=16, batch=2048)
    step = tuned_step(model, opt, amp=False)
    d = diagnose(model, opt, data, step, steps=STEPS)
    assert set(d.kinds()) - {"small-batch"} == {"optimizer-loop"}, str(d)
    f = d["optimizer-loop"]
    assert f.lesson == LESSONS["optimizer-loop"] and f.evidence and f.fix
    assert f.data["impl"] == "for-loop" and f.gain >= 1.05


def test_anomaly_detection_left_on_is_found_and_switched_back_off():
    model, opt = cnn()
    step = tuned_step(model, opt, anomaly=True)
    f = only(diagnose(model, opt, images(), step, steps=STEPS), "anomaly-on")
    assert f.gain is not None and f.gain > 1.0
    assert not torch.is_anomaly_enabled()


def test_profiler_left_on_is_found():
    model, opt = cnn()
    with torch.autograd.profiler.profile():
        d = diagnose(model, opt, images(), tuned_step(model, opt), steps=STEPS)
    assert "profiler-on" in d.kinds(), str(d)
    assert set(d.kinds()) <= {"profiler-on", "data-bound"}  # recording slows everything


def test_tiny_batch_is_far_below_the_throughput_knee():
    torch.manual_seed(0)
    model = MLP(dim=16, hidden=64, depth=2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    data = vectors(n=64, batch=2)
    f = only(diagnose(model, opt, data, tuned_step(model, opt), steps=STEPS), "small-batch")
    assert f.data["batch"] == 2 and f.gain >= 1.5


def fake_probe(monkeypatch, labels: tuple[str, str], speedup: float) -> None:
    """Make the timing probe for `labels` report `speedup`; other probes are really timed."""
    real = probes._time_pair

    def fake(ctx, base, cand, lab):
        if lab == labels:
            base()
            return speedup, ctx.window.compute_s
        return real(ctx, base, cand, lab)

    monkeypatch.setattr(probes, "_time_pair", fake)


def fp32_step(model, optimizer):
    def step(batch):
        F.cross_entropy(model(batch[0]), batch[1]).backward()
        optimizer.step()
        optimizer.zero_grad()

    return step


def test_fp32_on_a_device_with_fast_low_precision(monkeypatch):
    monkeypatch.setattr(DIAGNOSE, "device_class", lambda d: "cpu-bf16")
    fake_probe(monkeypatch, ("fp32", "autocast"), 2.0)
    model, opt = cnn()
    f = only(diagnose(model, opt, images(), fp32_step(model, opt), steps=STEPS), "fp32")
    assert f.gain >= 1.10 and "autocast" in f.fix


def test_fp32_on_a_plain_cpu_is_not_checked_and_says_why(monkeypatch):
    monkeypatch.setattr(DIAGNOSE, "device_class", lambda d: "cpu")
    fake_probe(monkeypatch, ("fp32", "autocast"), 2.0)
    model, opt = cnn()
    d = diagnose(model, opt, images(), fp32_step(model, opt), steps=STEPS)
    assert "fp32" not in d.kinds()
    assert any("mixed precision" in line and "cpu" in line for line in d.not_checked)


def test_conv_net_on_tensor_cores_without_channels_last_or_benchmark(monkeypatch):
    monkeypatch.setattr(DIAGNOSE, "device_class", lambda d: "cuda-tensorcore")
    fake_probe(monkeypatch, ("NCHW", "NHWC"), 1.5)
    monkeypatch.setattr(probes, "low_precision", lambda ctx: None)  # not what this test plants
    model, opt = cnn()
    probes_fake = probes._time_pair

    def both(ctx, base, cand, lab):
        if lab == ("benchmark off", "benchmark on"):
            base()
            return 1.4, ctx.window.compute_s
        return probes_fake(ctx, base, cand, lab)

    monkeypatch.setattr(probes, "_time_pair", both)
    d = diagnose(model, opt, images(), tuned_step(model, opt), steps=STEPS)
    assert d.kinds()[:2] == ["channels-last", "cudnn-benchmark-off"], str(d)
    assert set(d.kinds()) == {"channels-last", "cudnn-benchmark-off"}
    assert not torch.backends.cudnn.benchmark  # the flag the probe flips is put back


def test_benchmark_on_with_shapes_that_change_every_step(monkeypatch):
    monkeypatch.setattr(DIAGNOSE, "device_class", lambda d: "cuda")
    model, opt = cnn()
    g = torch.Generator().manual_seed(0)
    data = [
        (torch.randn(32, 3, s, s, generator=g), torch.randint(0, 10, (32,))) for s in range(8, 24)
    ]
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", True)
    d = diagnose(model, opt, data, tuned_step(model, opt), steps=STEPS)
    assert "cudnn-benchmark-changing-shapes" in d.kinds(), str(d)
    assert set(d.kinds()) <= {"cudnn-benchmark-changing-shapes", "small-batch"}


def snapshot(model, opt) -> dict:
    return {
        "model": {k: v.clone() for k, v in model.state_dict().items()},
        "grads": [None if p.grad is None else p.grad.clone() for p in model.parameters()],
        "opt": json.dumps(opt.state_dict()["param_groups"]),
        "opt_state": {
            k: {n: t.clone() for n, t in v.items()} for k, v in opt.state_dict()["state"].items()
        },
        "rng": torch.get_rng_state(),
        "training": model.training,
        "flags": (
            torch.is_anomaly_enabled(),
            torch.backends.cudnn.benchmark,
            torch.is_grad_enabled(),
        ),
    }


def same(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if torch.is_tensor(a):
        return torch.equal(a, b)
    return a == b


def test_the_learners_model_optimizer_rng_and_flags_come_back_unchanged():
    model, opt = cnn(bias=True)
    data = images()
    fp32_step(model, opt)(data[0])  # optimizer state exists
    F.cross_entropy(model(data[1][0]), data[1][1]).backward()  # and grads are pending
    model.eval()
    before = snapshot(model, opt)
    step = tuned_step(model, opt, read_loss=True, set_to_none=False, anomaly=True)
    diagnose(model, opt, data, step, steps=STEPS)
    assert same(before, snapshot(model, opt))


def test_default_form_runs_the_standard_step_and_restores():
    model, opt = cnn()
    before = snapshot(model, opt)
    d = diagnose(model, opt, images(), steps=STEPS, amp=AMP)
    # the batch probe times this CNN at 128 against 256 and 512: flat on an idle machine
    # (0.75-1.31x, THRESHOLDS batch_gain), 1.51x beside three other jobs (CI at cbfeef3); the
    # small-batch tests pin that finding, so here (as in the optimizer-loop test) it is left out
    assert [f for f in d.findings if f.kind != "small-batch"] == [], str(d)
    assert d.window["steps"] == STEPS and same(before, snapshot(model, opt))


def test_ddp_accumulation_without_no_sync(tmp_path):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        base, _ = cnn()
        model = nn.parallel.DistributedDataParallel(base)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)

        def accumulate(no_sync: bool):
            def step(batch):
                x, y = batch
                for i, (xs, ys) in enumerate(zip(x.chunk(2), y.chunk(2), strict=True)):
                    quiet = model.no_sync() if no_sync and i == 0 else contextlib.nullcontext()
                    with quiet:  # forward and backward of the micro-batch, both inside
                        with torch.autocast("cpu", enabled=AMP):
                            loss = F.cross_entropy(model(xs), ys) / 2
                        loss.backward()
                opt.step()
                opt.zero_grad()

            return step

        wasteful = diagnose(model, opt, images(), accumulate(False), steps=STEPS)
        assert "ddp-no-sync" in wasteful.kinds(), str(wasteful)
        assert wasteful["ddp-no-sync"].data["forwards_per_step"] == 2
        fixed = diagnose(model, opt, images(), accumulate(True), steps=STEPS)
        assert "ddp-no-sync" not in fixed.kinds() and any("no_sync used" in o for o in fixed.ok)
    finally:
        dist.destroy_process_group()


def test_findings_rank_by_gain_then_by_lesson_order_and_render():
    findings = [
        Finding("bias-before-bn", "b", "e", "f"),
        Finding("small-batch", "s", "e", "f", 1.6, "measured"),
        Finding("syncs", "y", "e", "f"),
        Finding("data-bound", "d", "e", "f", 2.5, "measured"),
    ]
    ranked = rank(findings)
    assert [f.kind for f in ranked] == ["data-bound", "small-batch", "syncs", "bias-before-bn"]
    window = {
        "steps": 20,
        "step_ms": 10.0,
        "compute_ms": 4.0,
        "wait_ms": 6.0,
        "device": "cpu",
        "device_class": "cpu",
        "torch": torch.__version__,
    }
    d = Diagnosis(ranked, ["gradients: none"], ["mixed precision: no fast low precision"], window)
    text = str(d)
    assert "1. d  [2.50x step (measured)] -> 03_data_loading" in text
    assert "not checked: mixed precision" in text and "10_habits" in text
    html = d._repr_html_()
    assert "<table>" in html and "09_no_bias_before_bn" in html
    payload = json.loads(json.dumps(d.to_dict()))
    assert payload["findings"][0]["lesson"] == "03_data_loading"


def test_optimizer_copies_accept_every_torch_optimizer_default():
    """AdamW's defaults carry keys its constructor does not take (decoupled_weight_decay)."""
    params = [nn.Parameter(torch.randn(3))]
    for opt in (torch.optim.AdamW(params, foreach=False), torch.optim.SGD(params, lr=0.1)):
        copy = probes._opt_copy(opt, foreach=True)
        assert type(copy) is type(opt) and copy.defaults["foreach"] is True


def test_objects_passed_as_restore_come_back():
    model, opt = cnn()
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    step = tuned_step(model, opt)

    def with_schedule(batch):
        step(batch)
        sched.step()

    diagnose(model, opt, images(), with_schedule, steps=STEPS, restore=[sched])
    assert sched.last_epoch == 0 and opt.param_groups[0]["lr"] == 1e-3


class DtypeRecorder(nn.Module):
    """A conv net that records the autocast dtype each forward runs under (None: fp32)."""

    seen: list = []

    def __init__(self):
        super().__init__()
        self.net = SmallCNN(width=8)

    def forward(self, x):
        on = torch.is_autocast_enabled("cpu")
        DtypeRecorder.seen.append(torch.get_autocast_dtype("cpu") if on else None)
        return self.net(x)


def test_layout_cudnn_and_batch_probes_run_in_the_loops_autocast_dtype(monkeypatch):
    """On an AMP loop, channels_last judged in fp32 shows no tensor-core gain (a T4): every
    probe must time forward+backward under the loop's autocast dtype (GPU class faked)."""
    monkeypatch.setattr(DIAGNOSE, "device_class", lambda d: "cuda-tensorcore")
    probed = []

    def record(ctx, base, cand, labels):
        DtypeRecorder.seen.clear()
        base(), cand()
        probed.append((labels, set(DtypeRecorder.seen)))
        return 1.0, ctx.window.compute_s

    monkeypatch.setattr(probes, "_time_pair", record)
    torch.manual_seed(0)
    model = DtypeRecorder()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)

    def bf16_step(batch):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(batch[0]), batch[1])
        loss.backward()
        opt.step()
        opt.zero_grad()

    diagnose(model, opt, images(n=64, batch=32), bf16_step, steps=6)
    by_label = dict(probed)
    for labels in [("NCHW", "NHWC"), ("benchmark off", "benchmark on"), ("batch 32", "batch 64")]:
        assert by_label[labels] == {torch.bfloat16}, (labels, by_label)
