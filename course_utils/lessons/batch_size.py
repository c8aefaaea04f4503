"""Lesson 02, batch size: throughput sweeps, memory budgets, linear LR scaling, noise scale.

Four workloads, each small enough for a CPU in quick mode:

- `make_step(b)`: one SGD training step at batch size `b` on data already on the device
  (an MLP in quick mode, a SmallCNN in full mode), for throughput sweeps.
- `memory_cases()`: models whose activation bytes the memory-budget check measures.
- `NoisyRegression`: linear regression with Gaussian inputs, where the mean gradient G and
  the per-sample gradient covariance Sigma are known in closed form, so the gradient noise
  scale B_simple = tr(Sigma) / |G|^2 (McCandlish et al. 2018, arXiv:1812.06162) is known.
- `steps_to_target(...)`: SGD on that regression at many batch sizes, each with its best
  learning rate, to show perfect scaling, then diminishing returns past the critical batch.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn

from ..checks import at_most, check, correct, retry_measure
from ..device import get_device
from ..measure import Throughput, activation_bytes, throughput
from ..mode import pick
from ..models import MLP, SmallCNN

# --- 1. throughput ----------------------------------------------------------------------------


def make_step(batch_size: int, *, kind: str | None = None, device=None, seed: int = 0) -> Callable[[], None]:
    """One training step (forward, backward, SGD update) at `batch_size`, data on the device.

    `kind` is "mlp" (quick mode: MLP 256-512-512-512-10) or "cnn" (full mode: SmallCNN width
    32 on 3x32x32 images). Data loading is left out on purpose: this measures the step alone.
    """
    kind = kind or pick(quick="mlp", full="cnn")
    device = torch.device(device) if device is not None else get_device()
    gen = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):  # do not disturb the notebook's random stream
        torch.manual_seed(seed)
        if kind == "mlp":
            model, x = MLP(dim=256, hidden=512, depth=3), torch.randn(batch_size, 256, generator=gen)
        else:
            model, x = SmallCNN(width=32), torch.randn(batch_size, 3, 32, 32, generator=gen)
    y = torch.randint(0, 10, (batch_size,), generator=gen)
    model, x, y = model.to(device), x.to(device), y.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step() -> None:
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


@contextmanager
def steady_cpu(threads: int = 1) -> Iterator[None]:
    """On a CPU device, run the block with `threads` intra-op threads, then restore.

    On a CPU shared with other work, PyTorch's threads wait for each other at every
    operator, and one descheduled thread stalls the rest: timings of small steps then jump
    by 10x. One thread is slower at large batches but steady. Does nothing on a GPU.
    """
    if get_device().type != "cpu":
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def reference_sweep(make_step: Callable, batch_sizes: Sequence[int], repeats: int = 10) -> dict[int, float]:
    """Samples/s of `make_step(b)` for each b: the harness's own measurement."""
    return {b: throughput(make_step(b), b, repeats=repeats).samples_per_s for b in batch_sizes}


def saturation_batch(results: dict[int, float], fraction: float = 0.8) -> int:
    """The smallest batch size reaching `fraction` of the best measured throughput."""
    best = max(results.values())
    return min(b for b, v in results.items() if v >= fraction * best)


# --- 2. memory budget -------------------------------------------------------------------------


def forward_bytes(model: nn.Module, make_input: Callable[[int], torch.Tensor], batch_size: int) -> int:
    """Bytes autograd saves for backward in `model(make_input(batch_size))`."""
    return activation_bytes(lambda: model(make_input(batch_size)))


def reference_largest_batch(model, make_input, budget_bytes: int, candidates: Sequence[int]) -> int | None:
    best = None
    for b in candidates:
        if forward_bytes(model, make_input, b) > budget_bytes:
            break
        best = b
    return best


def memory_cases(device=None) -> list[tuple[str, nn.Module, Callable[[int], torch.Tensor], list[int]]]:
    """(name, model, make_input, candidates) for the memory-budget check."""
    device = torch.device(device) if device is not None else get_device()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        mlp = MLP(dim=64, hidden=256, depth=3).to(device)
        cnn = SmallCNN(width=8).to(device)
    return [
        ("MLP", mlp, lambda b: torch.randn(b, 64, device=device), [2**i for i in range(10)]),
        ("SmallCNN(width=8)", cnn, lambda b: torch.randn(b, 3, 32, 32, device=device), [3, 10, 24, 50, 96]),
    ]


def largest_batch_cuda(make_step: Callable, candidates: Sequence[int], budget_bytes: int | None = None):
    """CUDA only: try each batch size in turn; stop at the first out-of-memory error, or at the
    first whose peak memory (`max_memory_allocated`) passes `budget_bytes`.

    Returns (largest batch that ran, {batch: peak bytes}). Caching-allocator blocks are
    released between tries, so one failure does not poison the next.
    """
    import gc

    best, peaks = None, {}
    for b in candidates:
        step = None
        try:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            start = torch.cuda.memory_allocated()
            step = make_step(b)
            step()
            step()  # the second step also holds optimizer state (momentum buffers)
            torch.cuda.synchronize()
            peaks[b] = torch.cuda.max_memory_allocated() - start
        except torch.cuda.OutOfMemoryError:
            break
        finally:
            del step
            gc.collect()
            torch.cuda.empty_cache()
        if budget_bytes is not None and peaks[b] > budget_bytes:
            break
        best = b
    return best, peaks


# --- 3. linear LR scaling with warm-up ---------------------------------------------------------


def reference_lr_schedule(optimizer, batch_size: int, warmup_steps: int, base_batch: int = 256):
    """Goyal et al. 2017: LR x (B / base_batch), reached linearly from the base LR."""
    k = batch_size / base_batch
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda t: 1 + (k - 1) * min(t, warmup_steps) / warmup_steps)


def lr_per_step(make_schedule: Callable, base_lr: float, batch_size: int, warmup_steps: int, steps: int, base_batch: int = 256) -> list[float]:
    """The LR the optimizer uses at each of `steps` steps, with the scheduler stepped per batch."""
    param = torch.zeros(1, requires_grad=True)
    optimizer = torch.optim.SGD([param], lr=base_lr)
    scheduler = make_schedule(optimizer, batch_size, warmup_steps, base_batch)
    if not isinstance(scheduler, torch.optim.lr_scheduler.LRScheduler):
        raise TypeError(f"expected a torch.optim.lr_scheduler scheduler (e.g. LambdaLR), got {type(scheduler).__name__}")
    lrs = []
    for _ in range(steps):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return lrs


# --- 4. gradient noise scale -------------------------------------------------------------------


class NoisyRegression:
    """y = x.w* + sigma*eps with x ~ N(0, diag(scales)); the model's weight is w* + delta.

    Per-sample loss (x.w - y)^2 / 2 has gradient g = x (x.delta - sigma*eps), so (Isserlis):
    G = L delta and Sigma = (delta'L delta + sigma^2) L + L delta delta' L, with L = diag(scales).
    """

    def __init__(self, dim: int = 32, noise_var: float = 2.0, delta_norm: float = 1.0, scales=None, seed: int = 0):
        self.gen = torch.Generator().manual_seed(seed)
        self.scales = torch.ones(dim) if scales is None else torch.as_tensor(scales, dtype=torch.float32)
        self.noise_var = noise_var
        direction = torch.randn(dim, generator=self.gen)
        self.delta = direction / direction.norm() * delta_norm
        self.w_star = torch.randn(dim, generator=self.gen)
        self.model = nn.Linear(dim, 1, bias=False)
        with torch.no_grad():
            self.model.weight.copy_((self.w_star + self.delta)[None])

    def gradient(self, batch_size: int) -> torch.Tensor:
        """The mean gradient over a fresh batch of `batch_size` samples (flat, detached)."""
        x = torch.randn(batch_size, len(self.scales), generator=self.gen) * self.scales.sqrt()
        y = x @ self.w_star + math.sqrt(self.noise_var) * torch.randn(batch_size, generator=self.gen)
        loss = 0.5 * (self.model(x).squeeze(-1) - y).pow(2).mean()
        (grad,) = torch.autograd.grad(loss, self.model.weight)
        return grad.flatten()

    @property
    def grad_sq_norm(self) -> float:
        """|G|^2, the squared norm of the true (full-data) gradient."""
        return float((self.scales * self.delta).pow(2).sum())

    @property
    def trace_sigma(self) -> float:
        """tr(Sigma), the total variance of one per-sample gradient."""
        quad = float((self.delta.pow(2) * self.scales).sum())
        return (quad + self.noise_var) * float(self.scales.sum()) + self.grad_sq_norm

    @property
    def b_simple(self) -> float:
        return self.trace_sigma / self.grad_sq_norm


def reference_noise_scale(gradient: Callable[[int], torch.Tensor], b_small: int, b_big: int, n: int) -> float:
    """McCandlish et al. 2018, appendix A: unbiased |G|^2 and tr(Sigma) from two batch sizes,
    averaged over `n` draws each, then their ratio."""
    small = torch.stack([gradient(b_small).pow(2).sum() for _ in range(n)]).mean()
    big = torch.stack([gradient(b_big).pow(2).sum() for _ in range(n)]).mean()
    g2 = (b_big * big - b_small * small) / (b_big - b_small)
    trace = (small - big) / (1 / b_small - 1 / b_big)
    return float(trace / g2)


def steps_to_target(
    batch_sizes: Sequence[int],
    *,
    dim: int = 16,
    condition: float = 30.0,
    noise_var: float = 1.0,
    start: float = 6.0,
    target: float = 0.02,
    lrs: Sequence[float] | None = None,
    seeds: int = 4,
    max_steps: int = 5000,
) -> dict[int, tuple[float, float]]:
    """SGD on a NoisyRegression (input scales from 1 down to 1/condition), for each batch size
    and each LR of a grid (all run at once, `seeds` runs each): the fewest steps, averaged over
    seeds, until the excess loss delta'L delta/2 <= target, and the LR that achieved it.

    Returns {batch: (steps, best lr)}.
    """
    gen = torch.Generator().manual_seed(0)
    scales = torch.logspace(0, -math.log10(condition), dim)
    grid = torch.tensor(lrs if lrs is not None else torch.logspace(-3, 0.5, 22).tolist())
    lr = grid.repeat_interleave(seeds)[:, None]
    out = {}
    for b in batch_sizes:
        delta = torch.full((len(lr), dim), start / math.sqrt(dim))
        reached = torch.full((len(lr),), -1)
        for s in range(1, max_steps + 1):
            x = torch.randn(len(lr), b, dim, generator=gen) * scales.sqrt()
            residual = torch.einsum("cbd,cd->cb", x, delta) - math.sqrt(noise_var) * torch.randn(len(lr), b, generator=gen)
            delta = delta - lr * torch.einsum("cbd,cb->cd", x, residual) / b
            excess = 0.5 * (delta.pow(2) * scales).sum(1)
            reached[(excess <= target) & (reached < 0)] = s
            if (reached >= 0).view(len(grid), seeds).all(1).any():
                break
        steps = reached.view(len(grid), seeds).float()
        mean = torch.where((steps > 0).all(1), steps.mean(1), torch.tensor(float("inf")))
        best = int(mean.argmin())
        out[b] = (float(mean[best]), float(grid[best]))
    return out


def fit_critical_batch(results: dict[int, tuple[float, float]]) -> tuple[float, float]:
    """Fit McCandlish's S = S_min (1 + B_crit / B) to {batch: (steps, lr)}: (S_min, B_crit).

    Least squares on the relative error, since steps span orders of magnitude.
    """
    b = torch.tensor([float(k) for k in results], dtype=torch.float64)
    s = torch.tensor([v[0] for v in results.values()], dtype=torch.float64)
    design = torch.stack([torch.ones_like(b), 1 / b], 1) / s[:, None]
    coef = torch.linalg.lstsq(design, torch.ones_like(s)[:, None]).solution.flatten()
    return float(coef[0]), float(coef[1] / coef[0])


# --- checks ----------------------------------------------------------------------------------


def _as_rate(value) -> float:
    return value.samples_per_s if isinstance(value, Throughput) else float(value)


@check(
    "02-throughput-sweep",
    points=2,
    hint="Build a fresh step with make_step(b) for EACH batch size, time it with "
    "cu.throughput(step, b) (pass the batch size, so you get samples/s, not steps/s), and "
    "return {b: result.samples_per_s}.",
)
def check_throughput_sweep(throughput_sweep):
    sizes = pick(quick=[16, 128, 1024], full=[32, 256, 2048])
    built, calls = Counter(), Counter()

    def tracked_make_step(b):
        built[int(b)] += 1
        step = make_step(int(b))

        def tracked():
            calls[int(b)] += 1
            step()

        return tracked

    def measure():
        with steady_cpu():
            mine = throughput_sweep(tracked_make_step, list(sizes))
            ref = reference_sweep(make_step, sizes)
        if not isinstance(mine, dict) or sorted(int(k) for k in mine) != sizes:
            keys = sorted(mine) if isinstance(mine, dict) else type(mine).__name__
            raise _Shape(f"expected a dict with one entry per batch size {sizes}, got {keys}")
        rates = {int(k): _as_rate(v) for k, v in mine.items()}
        ratios = {b: rates[b] / ref[b] for b in sizes}
        last.update(rates=rates, ref=ref, ratios=ratios)
        return max(max(r, 1 / r) if r > 0 and math.isfinite(r) else math.inf for r in ratios.values())

    last: dict = {}
    try:
        worst = retry_measure(measure, ok=lambda w: w <= 3.0)
    except _Shape as exc:
        return [correct("result", False, str(exc))]
    missing = [b for b in sizes if built[b] == 0 or calls[b] == 0]
    table = ", ".join(f"b={b}: yours {last['rates'][b]:,.0f} vs {last['ref'][b]:,.0f}" for b in sizes)
    return [
        correct(
            "one step per batch size",
            not missing,
            f"built and timed a step for every batch size {sizes}"
            if not missing
            else f"no step was built and timed for batch size(s) {missing}: call make_step(b) inside the loop",
        ),
        at_most("agreement", worst, 3.0, f"samples/s ({table}); largest disagreement factor", unit="x"),
    ]


class _Shape(Exception):
    """Raised inside a check when the learner's result has the wrong shape."""


@check(
    "02-largest-batch",
    points=2,
    hint="Measure cu.activation_bytes(lambda: model(make_input(b))) for each candidate in "
    "order; a batch fits when its bytes are <= the budget; return the last one that fits "
    "(not the first that does not), or None when even the first is too big.",
)
def check_largest_batch(largest_batch):
    parts = []
    for name, model, make_input, candidates in memory_cases():
        used = {b: forward_bytes(model, make_input, b) for b in candidates}
        k = len(candidates) // 2
        budgets = [
            (used[candidates[k]], candidates[k], "exactly the bytes of a candidate"),
            ((used[candidates[k - 1]] + used[candidates[k]]) // 2, candidates[k - 1], "between two candidates"),
            (used[candidates[0]] - 1, None, "below the smallest candidate"),
            (2 * used[candidates[-1]], candidates[-1], "above the largest candidate"),
        ]
        wrong = []
        for budget, expected, what in budgets:
            got = largest_batch(model, make_input, budget, list(candidates))
            if got != expected:
                wrong.append(f"budget {budget:,} B ({what}): expected {expected}, got {got}{_diagnose(got, expected, candidates)}")
        ok = not wrong
        msg = f"all 4 budgets right (activation bytes per candidate {candidates}: {[used[b] for b in candidates]})"
        parts.append(correct(name, ok, msg if ok else "; ".join(wrong)))
    return parts


def _diagnose(got, expected, candidates) -> str:
    if expected is None and got is not None:
        return " (nothing fits: return None)"
    if got in candidates and expected in candidates:
        i, j = candidates.index(got), candidates.index(expected)
        if i == j + 1:
            return " (that is the first batch that does NOT fit)"
        if i < j:
            return " (smaller than the largest that fits: a batch fits when bytes <= budget)"
    return ""


@check(
    "02-lr-scaling",
    points=2,
    hint="Peak LR = base LR x batch_size / base_batch (linear, not sqrt). With LambdaLR the "
    "lambda is a factor of the base LR: 1 at step 0, rising linearly to batch_size/base_batch "
    "at step warmup_steps, then constant. Warm-up starts at the base LR, not at 0 and not at the peak.",
)
def check_lr_schedule(make_schedule):
    parts = []
    for base_lr, batch, warmup, base_batch in [(0.1, 1024, 5, 256), (0.05, 8192, 10, 256), (0.2, 64, 4, 32)]:
        steps = warmup + 5
        got = lr_per_step(make_schedule, base_lr, batch, warmup, steps, base_batch)
        want = lr_per_step(reference_lr_schedule, base_lr, batch, warmup, steps, base_batch)
        bad = next((t for t in range(steps) if not math.isclose(got[t], want[t], rel_tol=1e-4)), None)
        what = f"B={batch}, base LR {base_lr} at {base_batch}, {warmup} warm-up steps"
        if bad is None:
            parts.append(correct(what, True, f"LR per step {_fmt(got)} as expected"))
            continue
        peak, k = want[-1], batch / base_batch
        why = ""
        if math.isclose(got[-1], base_lr * math.sqrt(k), rel_tol=1e-3):
            why = " (the peak looks like sqrt scaling: the linear rule multiplies by B/base_batch)"
        elif math.isclose(got[0], peak, rel_tol=1e-3):
            why = " (step 0 is already at the peak: no warm-up)"
        elif got[0] < 0.5 * base_lr:
            why = " (warm-up starts near 0: Goyal et al. start at the base LR)"
        elif not math.isclose(max(got), peak, rel_tol=1e-3):
            why = f" (the peak should be base LR x {k:g} = {peak:.4g})"
        parts.append(
            correct(what, False, f"step {bad}: LR {got[bad]:.4g}, expected {want[bad]:.4g}{why}; yours {_fmt(got)}")
        )
    return parts


def _fmt(lrs: list[float]) -> str:
    return "[" + ", ".join(f"{v:.3g}" for v in lrs) + "]"


@check(
    "02-noise-scale",
    points=2,
    hint="Average |G_B|^2 (the squared norm of gradient(B)) over n draws at each batch size; then "
    "|G|^2 = (B_big*|G_big|^2 - B_small*|G_small|^2)/(B_big - B_small) and "
    "tr(Sigma) = (|G_small|^2 - |G_big|^2)/(1/B_small - 1/B_big); return tr(Sigma)/|G|^2.",
)
def check_noise_scale(noise_scale):
    parts = []
    problems = [
        (NoisyRegression(dim=32, noise_var=2.0, seed=1), 8, 64),
        (NoisyRegression(dim=16, noise_var=0.5, scales=torch.linspace(0.5, 2.0, 16), seed=2), 4, 32),
    ]
    for problem, b_small, b_big in problems:
        value = float(noise_scale(problem.gradient, b_small, b_big, 400))
        truth = problem.b_simple
        error = abs(value - truth) / truth if math.isfinite(value) else math.inf
        parts.append(
            at_most(
                f"B_small={b_small}, B_big={b_big}",
                error,
                0.30,
                f"relative error of your B_simple {value:.4g} against the true {truth:.4g}",
            )
        )
    return parts
