"""Lesson 15's checks: a selective-checkpointing policy (exercise 1) and a float8 quantizer
(exercise 3), and the lesson's THRESHOLDS (thresholds.py).

The learner's code runs only in the probes. Exercise 1's check replays the decisions the
learner's policy gave (policies.replaying) and measures the plan itself, in the judge: bytes
held after the forward and FLOPs recomputed, against no checkpointing and full checkpointing.
Exercise 3's compares each round trip with rowwise e4m3's, computed here; a message
names a mistake only where the learner's round trip equals that mistake's replay (here, in
plain torch)."""

from __future__ import annotations

import torch

from ...checks import Part, check, correct
from ...probes import observe, specimen_rng
from .float8 import flushed, row_errors, specimen
from .levers import baseline, measure
from .model import Size
from .policies import Mismatch, replaying, summary
from .probes import float8_round_trips, policy_decisions
from .specimens import FLOAT8_CASES, SEEDS, SIZES, size_fields
from .thresholds import THRESHOLDS


@check(
    "15-selective-policy",
    points=3,
    hint="Which operators' outputs cost many FLOPs to recompute, and which are cheap to "
    "recompute but large to keep? Print the operators your policy is asked about (section 2) "
    "and what it answers for each.",
)
def check_selective_policy(policy) -> list[Part]:
    rng = specimen_rng()
    size, seed = rng.choice(SIZES[1:]), rng.choice(SEEDS)  # not the notebook's SIZES[0]
    regions = observe(policy_decisions, policy, size_fields(size), seed)
    if regions and regions[0] and regions[0][0][0].startswith("the lesson's own policy"):
        said = "this is the lesson's own policy (plans.matmuls_saved, which measure_plan uses)"
        return [correct("a policy of your own", False, said + ": write yours")]
    facts = summary(regions)
    if facts["invalid"]:
        said = (
            f"your policy returned {', '.join(facts['invalid'])} where a CheckpointPolicy is "
            "expected: torch takes anything else as PREFER_RECOMPUTE"
        )
        return [correct("returns a CheckpointPolicy", False, said)]
    try:
        got = measure(size, "selective", replaying(regions), seed)
    except (Mismatch, StopIteration) as exc:
        said = f"your policy's decisions could not be replayed on the same step ({exc})"
        return [correct("the same decisions on the same step", False, said)]
    return _parts(size, seed, got, facts)


def _parts(size: Size, seed: int, got: dict, facts: dict) -> list[Part]:
    base = baseline(size, seed)
    none, full = base["none"]["held"], base["full"]["recomputed"]
    held, recomputed = got["held"] / none, got["recomputed"] / full
    limit_held, limit_flops = THRESHOLDS["held_ratio"].value, THRESHOLDS["recompute_ratio"].value
    shape = f"GPT d_model={size.d_model}, {size.n_layer} blocks, batch {size.rows} x {size.T}"
    said = f"{held:.2f} of the bytes no checkpointing holds after the forward ({shape})"
    if held > limit_held and facts["saved"] == facts["calls"]:
        said += (
            ". Your policy saved every operator's output: the cache keeps even the outputs "
            "autograd would have freed, so nothing is gained"
        )
    parts = [
        correct("memory: below no checkpointing", held <= limit_held, said,
                value=held, threshold=limit_held, better="lower"),
    ]  # fmt: skip
    said = f"{recomputed:.2f} of the FLOPs full checkpointing recomputes in backward"
    costly = facts["matmuls recomputed"]
    if recomputed > limit_flops and costly and all("_scaled_dot" in op for op in costly):
        said += (
            f". Your policy let attention be recomputed ({', '.join(costly)}): its FLOPs grow "
            f"with the sequence length squared, {recomputed:.0%} of the step's at T={size.T}"
        )
    elif recomputed > limit_flops and costly:
        said += (
            f". Your policy let these be recomputed: {', '.join(costly)}. "
            "They hold the FLOPs; the policy receives an operator overload such as "
            "torch.ops.aten.mm.default"
        )
    parts.append(
        correct("recompute: below full checkpointing", recomputed <= limit_flops, said,
                value=recomputed, threshold=limit_flops, better="lower")
    )  # fmt: skip
    atol = THRESHOLDS["grad_atol"].value
    said = f"max |gradient - no checkpointing's| = {got['grad_diff']:.3g}"
    parts.append(
        correct("gradients as without checkpointing", got["grad_diff"] <= atol, said,
                value=got["grad_diff"], threshold=atol, better="lower")
    )  # fmt: skip
    return parts


# --- exercise 3's replays: the right quantizer (rowwise e4m3) and the mistakes a message may
# name, private to the checks (the kernel's harness strips them; no public answer to call) ---
MISTAKES = {  # cause -> the replay's options
    "one scale for the whole tensor (tensorwise): the outlier rows set it, and the small rows "
    "fall below e4m3's smallest numbers": {"rowwise": False},
    "the scale leaves out the format's max (x / amax puts each row in [-1, 1], where e4m3 "
    "keeps about 3 of its 8 powers of two above its smallest normal)": {"fmax": False},
    "e5m2 for activations: 2 mantissa bits, twice e4m3's rounding error": {"dtype": "e5m2"},
    "the scale is the row's max, not its largest magnitude (abs): rows of negative numbers get "
    "a negative or tiny scale": {"absolute": False},
    "one scale for the whole tensor, in e5m2: the colleague's quantizer as it stands": {
        "rowwise": False,
        "dtype": "e5m2",
    },
    "a zero row gives a scale of 0 and 0 / 0 = NaN: clamp the scale away from 0": {"clamp": False},
    "one scale per column (amax over dim 0): an outlier row sets every column's scale, so the "
    "small rows fall below e4m3's smallest numbers; scale per row, amax over dim 1": {
        "per_column": True
    },
    "no scale: values above 448 saturate and the small ones flush to 0": {"unscaled": True},
    "you returned the multiplier 448 / amax, not the scale amax / 448: x_fp8.float() * scale "
    "must give x back": {"inverted": True},
    "the scale rounded DOWN to a power of two: each row's largest values land above 448 and "
    "saturate; round the exponent up (torchao's rowwise recipe floors its multiplier 448 / "
    "amax, which is this scale rounded up)": {"pow2_down": True},
}


def _quantize(x, *, rowwise=True, fmax=True, dtype="e4m3", absolute=True, clamp=True,
              per_column=False, unscaled=False, inverted=False, pow2_down=False):  # fmt: skip
    """(x_fp8, scale) with x ~ x_fp8.float() * scale: scale = amax / format max per row
    (or for the whole tensor), amax clamped above 0; each flag replays one mistake."""
    fp8 = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}[dtype]
    x = x.float()
    if unscaled:
        return x.to(fp8), torch.ones(len(x), 1)
    peak = x.abs() if absolute else x
    if per_column:
        amax = peak.amax(dim=0, keepdim=True)
    else:
        amax = peak.amax(dim=1, keepdim=True) if rowwise else peak.max().reshape(1, 1)
    scale = amax / (torch.finfo(fp8).max if fmax else 1.0)
    if clamp:
        scale = scale.clamp(min=torch.finfo(torch.float32).tiny)
    if pow2_down:
        scale = torch.exp2(torch.floor(torch.log2(scale)))
    if inverted:
        return (x / scale).to(fp8), 1 / scale
    return (x / scale).to(fp8), scale


def _round_trip(x, **flags) -> torch.Tensor:
    q, scale = _quantize(x, **flags)
    return q.float() * scale


def _same(got: torch.Tensor, replayed: torch.Tensor) -> bool:
    both_nan = torch.isnan(got) & torch.isnan(replayed)
    return bool((both_nan | torch.isclose(got, replayed, rtol=1e-6, atol=0.0)).all())


def _float8_part(name: str, x: torch.Tensor, seen: dict) -> Part:
    if "returned" in seen:
        said = f"to_float8 returned {seen['returned']}: return (x_fp8, scale), two tensors"
        return correct(name, False, said)
    if "round_trip_raised" in seen:
        said = (
            f"x_fp8.float() * scale raised ({seen['round_trip_raised']}): your scale has shape "
            f"{tuple(seen['scale_shape'])} and x {tuple(x.shape)}; a scale per row is "
            f"({len(x)}, 1), which broadcasts over each row"
        )
        return correct(name, False, said)
    got = seen["round_trip"]
    if tuple(got.shape) != tuple(x.shape):
        said = f"x_fp8.float() * scale has shape {tuple(got.shape)}, x {tuple(x.shape)}"
        return correct(name, False, said)
    if not seen["dtype"].startswith("torch.float8"):
        return correct(name, False, f"x_fp8 is {seen['dtype']}, not a float8 dtype")
    right = _round_trip(x)
    error = sum(row_errors(x, got)) / len(x)
    limit = max(
        THRESHOLDS["fp8_error_ratio"].value * sum(row_errors(x, right)) / len(x),
        THRESHOLDS["fp8_error_floor"].value,
    )
    lost = flushed(x, got) - flushed(x, right)
    ok = error <= limit and lost <= THRESHOLDS["fp8_flushed"].value
    said = (
        f"mean row error {error:.3g} (limit {limit:.3g}), {lost:+.1%} of the entries flushed "
        f"to 0 beyond rowwise e4m3's, in {seen['dtype'].removeprefix('torch.')}"
    )
    if not ok:
        causes = [c for c, flags in MISTAKES.items() if _same(got, _round_trip(x, **flags))]
        if len(causes) == 1:
            said += f". Your round trip is exactly this mistake's: {causes[0]}"
        else:
            said += ". Reread section 5: what each format keeps, and what sets each scale"
    return correct(name, ok, said, value=error, threshold=limit, better="lower")


@check(
    "15-fp8-scale",
    points=2,
    hint="After scaling, where do a small row's numbers land among the format's representable "
    "values? Compare your round trip with x row by row, on tensors with outlier rows, rows of "
    "negative numbers and a row of zeros.",
)
def check_fp8_scale(to_float8) -> list[Part]:
    seed = specimen_rng().choice(SEEDS)
    seen = observe(float8_round_trips, to_float8, FLOAT8_CASES, seed)
    return [
        _float8_part(name, specimen(case, seed), seen[name]) for name, case in FLOAT8_CASES.items()
    ]
