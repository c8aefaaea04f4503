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
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from ..checks import at_most, check, correct, retry_measure
from ..device import get_device
from ..measure import Throughput, activation_bytes, steady_cpu, throughput
from ..mode import pick
from ..models import MLP, SmallCNN

# --- 1. throughput ----------------------------------------------------------------------------


def make_step(
    batch_size: int, *, kind: str | None = None, device=None, seed: int = 0
) -> Callable[[], None]:
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
            model, x = (
                MLP(dim=256, hidden=512, depth=3),
                torch.randn(batch_size, 256, generator=gen),
            )
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


def reference_sweep(
    make_step: Callable, batch_sizes: Sequence[int], repeats: int = 10
) -> dict[int, float]:
    """Samples/s of `make_step(b)` for each b: the harness's own measurement."""
    sizes = tqdm(batch_sizes, desc="throughput sweep", leave=False)
    return {b: throughput(make_step(b), b, repeats=repeats).samples_per_s for b in sizes}


def saturation_batch(results: dict[int, float], fraction: float = 0.8) -> int:
    """The smallest batch size reaching `fraction` of the best measured throughput."""
    best = max(results.values())
    return min(b for b, v in results.items() if v >= fraction * best)


# --- 2. memory budget -------------------------------------------------------------------------


def forward_bytes(
    model: nn.Module, make_input: Callable[[int], torch.Tensor], batch_size: int
) -> int:
    """Bytes autograd saves for backward in `model(make_input(batch_size))`."""
    return activation_bytes(lambda: model(make_input(batch_size)))


def reference_largest_batch(
    model, make_input, budget_bytes: int, candidates: Sequence[int]
) -> int | None:
    best = None
    for b in candidates:
        if forward_bytes(model, make_input, b) > budget_bytes:
            break
        best = b
    return best


def memory_cases(
    device=None,
) -> list[tuple[str, nn.Module, Callable[[int], torch.Tensor], list[int]]]:
    """(name, model, make_input, candidates) for the memory-budget check."""
    device = torch.device(device) if device is not None else get_device()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        mlp = MLP(dim=64, hidden=256, depth=3).to(device)
        cnn = SmallCNN(width=8).to(device)
    return [
        ("MLP", mlp, lambda b: torch.randn(b, 64, device=device), [2**i for i in range(10)]),
        (
            "SmallCNN(width=8)",
            cnn,
            lambda b: torch.randn(b, 3, 32, 32, device=device),
            [3, 10, 24, 50, 96],
        ),
    ]


def largest_batch_cuda(
    make_step: Callable, candidates: Sequence[int], budget_bytes: int | None = None
):
    """CUDA only: try each batch size in turn; stop at the first out-of-memory error, or at the
    first whose peak memory (`max_memory_allocated`) passes `budget_bytes`.

    Returns (largest batch that ran, {batch: peak bytes}). Caching-allocator blocks are
    released between tries, so one failure does not poison the next.
    """
    import gc

    best, peaks = None, {}
    for b in tqdm(candidates, desc="batch sizes", leave=False):
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
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda t: 1 + (k - 1) * min(t, warmup_steps) / warmup_steps
    )


def lr_per_step(
    make_schedule: Callable,
    base_lr: float,
    batch_size: int,
    warmup_steps: int,
    steps: int,
    base_batch: int = 256,
) -> list[float]:
    """The LR the optimizer uses at each of `steps` steps, with the scheduler stepped per batch."""
    param = torch.zeros(1, requires_grad=True)
    optimizer = torch.optim.SGD([param], lr=base_lr)
    scheduler = make_schedule(optimizer, batch_size, warmup_steps, base_batch)
    if not isinstance(scheduler, torch.optim.lr_scheduler.LRScheduler):
        raise TypeError(
            f"expected a torch.optim.lr_scheduler scheduler (e.g. LambdaLR), got {type(scheduler).__name__}"
        )
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

    def __init__(
        self,
        dim: int = 32,
        noise_var: float = 2.0,
        delta_norm: float = 1.0,
        scales=None,
        seed: int = 0,
        delta=None,
    ):
        self.gen = torch.Generator().manual_seed(seed)
        self.scales = (
            torch.ones(dim) if scales is None else torch.as_tensor(scales, dtype=torch.float32)
        )
        self.noise_var = noise_var
        direction = torch.randn(dim, generator=self.gen)
        self.delta = (
            direction / direction.norm() * delta_norm
            if delta is None
            else torch.as_tensor(delta, dtype=torch.float32)
        )
        self.w_star = torch.randn(dim, generator=self.gen)
        self.model = nn.Linear(dim, 1, bias=False)
        with torch.no_grad():
            self.model.weight.copy_((self.w_star + self.delta)[None])

    def gradient(self, batch_size: int) -> torch.Tensor:
        """The mean gradient over a fresh batch of `batch_size` samples (flat, detached)."""
        x = torch.randn(batch_size, len(self.scales), generator=self.gen) * self.scales.sqrt()
        y = x @ self.w_star + math.sqrt(self.noise_var) * torch.randn(
            batch_size, generator=self.gen
        )
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


def reference_noise_scale(
    gradient: Callable[[int], torch.Tensor], b_small: int, b_big: int, n: int
) -> float:
    """McCandlish et al. 2018, appendix A: unbiased |G|^2 and tr(Sigma) from two batch sizes,
    averaged over `n` draws each, then their ratio."""
    small = torch.stack([gradient(b_small).pow(2).sum() for _ in range(n)]).mean()
    big = torch.stack([gradient(b_big).pow(2).sum() for _ in range(n)]).mean()
    g2 = (b_big * big - b_small * small) / (b_big - b_small)
    trace = (small - big) / (1 / b_small - 1 / b_big)
    return float(trace / g2)


# The regression the critical-batch demo trains: 16 weights, input scales from 1 down to 1/30,
# label noise variance 1, starting at |delta| = 6, trained until the excess loss is 0.02.
DEMO = {"dim": 16, "condition": 30.0, "noise_var": 1.0, "start": 6.0, "target": 0.02}


def steps_to_target(
    batch_sizes: Sequence[int],
    *,
    dim: int = DEMO["dim"],
    condition: float = DEMO["condition"],
    noise_var: float = DEMO["noise_var"],
    start: float = DEMO["start"],
    target: float = DEMO["target"],
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
    lr = grid.repeat_interleave(seeds)[:, None]  # one row per (LR, seed) run, all stepped at once
    out = {}
    for b in batch_sizes:
        delta = torch.full((len(lr), dim), start / math.sqrt(dim))
        reached = torch.full((len(lr),), -1)
        with steady_cpu():  # many tiny ops: one thread avoids thread thrash on a busy CPU
            for s in range(1, max_steps + 1):
                x = torch.randn(len(lr), b, dim, generator=gen) * scales.sqrt()
                noise = math.sqrt(noise_var) * torch.randn(len(lr), b, generator=gen)
                residual = torch.einsum("cbd,cd->cb", x, delta) - noise
                delta = delta - lr * torch.einsum("cbd,cb->cd", x, residual) / b
                excess = 0.5 * (delta.pow(2) * scales).sum(1)
                reached[(excess <= target) & (reached < 0)] = s
                if (reached >= 0).view(len(grid), seeds).all(1).any():
                    break  # some LR has reached the target in every seed: it is the best
        steps = reached.view(len(grid), seeds).float()
        mean = torch.where((steps > 0).all(1), steps.mean(1), torch.tensor(float("inf")))
        best = int(mean.argmin())
        out[b] = (float(mean[best]), float(grid[best]))
    return out


def noise_scale_start_and_end(estimator: Callable, n: int = 200) -> dict[str, tuple[float, float]]:
    """B_simple of the demo regression where training starts and where it reaches the target
    (following full-batch gradient descent there): {where: (estimated by `estimator`, exact)}.

    The batch sizes given to the estimator are scaled to each point's noise scale.
    """
    dim, target = DEMO["dim"], DEMO["target"]
    scales = torch.logspace(0, -math.log10(DEMO["condition"]), dim)
    start = torch.full((dim,), DEMO["start"] / math.sqrt(dim))
    end = start.clone()
    while 0.5 * float((end.pow(2) * scales).sum()) > target:
        end = end - scales * end  # gradient descent with LR 1 (the Hessian is diag(scales))
    out = {}
    for where, delta, (b_small, b_big) in [("start", start, (2, 16)), ("target", end, (512, 4096))]:
        problem = NoisyRegression(dim, DEMO["noise_var"], scales=scales, seed=3, delta=delta)
        with steady_cpu():
            out[where] = (float(estimator(problem.gradient, b_small, b_big, n)), problem.b_simple)
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


def plot_critical_batch(
    results: dict[int, tuple[float, float]], s_min: float, b_crit: float, linear_from: int = 8
):
    """Left: steps to the target vs batch size, with the fit S_min (1 + B_crit / B) and perfect
    scaling. Right: the best LR vs batch size, with the linear scaling rule from `linear_from`."""
    import matplotlib.pyplot as plt

    b = list(results)
    steps, lrs = [v[0] for v in results.values()], [v[1] for v in results.values()]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    left.plot(b, steps, "o", label="measured (best LR for each batch)")
    left.plot(
        b,
        [s_min * (1 + b_crit / x) for x in b],
        "-",
        label=f"S_min(1 + B_crit/B): B_crit = {b_crit:.0f}",
    )
    left.plot(
        b,
        [steps[0] * b[0] / x for x in b],
        ":",
        color="grey",
        label="perfect scaling (steps x 1/B)",
    )
    left.axvline(b_crit, color="C3", linestyle="--", alpha=0.6)
    left.set(
        xscale="log",
        yscale="log",
        xlabel="batch size B",
        ylabel="steps to target",
        title="steps to the target loss",
    )
    base = lrs[b.index(linear_from)]
    right.plot(b, lrs, "o-", label="best LR found")
    right.plot(
        b,
        [base * x / linear_from for x in b],
        ":",
        color="grey",
        label=f"linear scaling from B={linear_from}",
    )
    right.axvline(b_crit, color="C3", linestyle="--", alpha=0.6)
    right.set(
        xscale="log",
        yscale="log",
        xlabel="batch size B",
        ylabel="learning rate",
        title="best learning rate",
        ylim=(min(lrs) / 2, max(lrs) * 4),
    )
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


# --- checks ----------------------------------------------------------------------------------


class _Shape(Exception):
    """Raised inside a check when the learner's result has the wrong shape."""


def _as_rate(value) -> float:
    return value.samples_per_s if isinstance(value, Throughput) else float(value)


@check(
    "02-throughput-sweep",
    points=2,
    hint="Build a fresh step with make_step(b) inside the loop, for EACH batch size, and pass "
    "that batch size to cu.throughput: samples/s is batch size / seconds per step, not steps/s.",
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
        return max(
            max(r, 1 / r) if r > 0 and math.isfinite(r) else math.inf for r in ratios.values()
        )

    last: dict = {}
    try:
        worst = retry_measure(measure, ok=lambda w: w <= 3.0)
    except _Shape as exc:
        return [correct("result", False, str(exc))]
    missing = [b for b in sizes if built[b] == 0 or calls[b] == 0]
    table = ", ".join(
        f"b={b}: yours {last['rates'][b]:,.0f} vs {last['ref'][b]:,.0f}" for b in sizes
    )
    return [
        correct(
            "one step per batch size",
            not missing,
            f"built and timed a step for every batch size {sizes}"
            if not missing
            else f"no step was built and timed for batch size(s) {missing}: call make_step(b) inside the loop",
        ),
        at_most(
            "agreement", worst, 3.0, f"samples/s ({table}); largest disagreement factor", unit="x"
        ),
    ]


@check(
    "02-largest-batch",
    points=2,
    hint="A batch fits when cu.activation_bytes(lambda: model(make_input(b))) <= budget (the "
    "forward pass only, with autograd on). Return the last candidate that fits, not the first "
    "that does not, and None when even the first is too big.",
)
def check_largest_batch(largest_batch):
    with steady_cpu():  # not a timing: one thread only avoids thread thrash on a busy CPU
        return _largest_batch_parts(largest_batch)


def _largest_batch_parts(largest_batch) -> list:
    parts = []
    for name, model, make_input, candidates in memory_cases():
        used = {b: forward_bytes(model, make_input, b) for b in candidates}
        k = len(candidates) // 2
        budgets = [
            (used[candidates[k]], candidates[k], "exactly the bytes of a candidate"),
            (
                (used[candidates[k - 1]] + used[candidates[k]]) // 2,
                candidates[k - 1],
                "between two candidates",
            ),
            (used[candidates[0]] - 1, None, "below the smallest candidate"),
            (2 * used[candidates[-1]], candidates[-1], "above the largest candidate"),
        ]
        wrong = []
        for budget, expected, what in budgets:
            got = largest_batch(model, make_input, budget, list(candidates))
            if got != expected:
                wrong.append(
                    f"budget {budget:,} B ({what}): expected {expected}, got {got}{_diagnose(got, expected, candidates)}"
                )
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
    for base_lr, batch, warmup, base_batch in [
        (0.1, 1024, 5, 256),
        (0.05, 8192, 10, 256),
        (0.2, 64, 4, 32),
    ]:
        steps = warmup + 5
        got = lr_per_step(make_schedule, base_lr, batch, warmup, steps, base_batch)
        want = lr_per_step(reference_lr_schedule, base_lr, batch, warmup, steps, base_batch)
        bad = next(
            (t for t in range(steps) if not math.isclose(got[t], want[t], rel_tol=1e-4)), None
        )
        what = f"B={batch}, base LR {base_lr} at {base_batch}, {warmup} warm-up steps"
        if bad is None:
            parts.append(correct(what, True, f"LR per step {_fmt(got)} as expected"))
            continue
        why = _diagnose_lr(got, want, base_lr, batch / base_batch, warmup)
        parts.append(
            correct(
                what,
                False,
                f"step {bad}: LR {got[bad]:.4g}, expected {want[bad]:.4g}{why}; yours {_fmt(got)}",
            )
        )
    return parts


def _diagnose_lr(got: list[float], want: list[float], base_lr: float, k: float, warmup: int) -> str:
    """Name the usual mistake behind a wrong schedule, for the feedback."""
    peak = want[-1]
    if math.isclose(got[-1], base_lr * math.sqrt(k), rel_tol=1e-3):
        return " (the peak looks like sqrt scaling: the linear rule multiplies by B/base_batch)"
    if math.isclose(got[0], peak, rel_tol=1e-3):
        return " (step 0 is already at the peak: no warm-up)"
    if got[0] < base_lr * (1 - 1e-3):
        return " (warm-up starts below the base LR: Goyal et al. start at the base LR)"
    if not math.isclose(got[-1], peak, rel_tol=1e-3):
        return f" (after warm-up the LR should stay at base LR x {k:g} = {peak:.4g})"
    return f" (the ramp should be linear and reach the peak exactly at step {warmup})"


def _fmt(lrs: list[float]) -> str:
    return "[" + ", ".join(f"{v:.3g}" for v in lrs) + "]"


@check(
    "02-noise-scale",
    points=2,
    hint="|G_big|^2 is not |G|^2: every |G_B|^2 is inflated by tr(Sigma)/B, which is why the "
    "estimators combine both batch sizes. Use squared norms (.pow(2).sum()), average each over "
    "the n draws before combining, and pair each average with its own batch size.",
)
def check_noise_scale(noise_scale):
    with steady_cpu():  # thousands of tiny autograd calls: one thread avoids thread thrash
        return _noise_scale_parts(noise_scale)


def _noise_scale_parts(noise_scale) -> list:
    parts = []
    # Sizes chosen so that the correct estimator lands within 30% with a margin of 4-6 standard
    # deviations (sd 4.5% and 7% over 30 seeds), while |G_big|^2 taken as |G|^2 (biased by
    # tr(Sigma)/B_big) comes out 40-60% too low.
    problems = [
        (NoisyRegression(dim=128, noise_var=1.0, seed=1), 32, 256, 400),
        (
            NoisyRegression(dim=64, noise_var=0.5, scales=torch.linspace(0.5, 2.0, 64), seed=2),
            8,
            64,
            600,
        ),
    ]
    for problem, b_small, b_big, n in problems:
        value = float(noise_scale(problem.gradient, b_small, b_big, n))
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
