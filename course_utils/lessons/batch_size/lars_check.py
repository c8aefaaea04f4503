"""Check 02-trust-ratio: the learner's LARS optimizer trains the specimen of lars_specimen for
a few steps and every layer's weights are compared with LARS's, after every step. A mistake is
named only when LARS with that mistake reproduces all of the learner's updates."""

from __future__ import annotations

import torch

from ... import checks
from ...checks import check, correct
from . import lars_specimen as spec


def _run(optimizer_class) -> list[list[torch.Tensor]]:
    """The specimen's weights after each step of `optimizer_class` (the learner's code runs
    marked as the learner's, so calling a reference answer inside it is refused)."""
    own = not optimizer_class.__dict__.get("is_reference", False)
    call = checks._as_learner if own else (lambda f: f)
    params = [torch.nn.Parameter(w.clone()) for w in spec.initial_weights()]
    optimizer = call(optimizer_class)(spec.param_groups(params), **spec.DEFAULTS)
    out = []
    for grads in spec.gradients():
        for p, g in zip(params, grads, strict=True):
            p.grad = g.clone()
        call(optimizer.step)()
        out.append([p.detach().clone() for p in params])
    return out


@check(
    "02-trust-ratio",
    points=3,
    hint="Per layer: d = g + wd w and ratio = eta |w| / (|g| + wd |w| + eps) for weights (ndim "
    "> 1), ratio 1 and d = g for 1-D parameters and for a layer whose |w| or |g| is 0; then "
    "buf = momentum * buf + ratio * d and p -= lr * buf, with every setting read from the group.",
)
def check_trust_ratio(optimizer_class) -> list:
    got = _run(optimizer_class)
    want, start = spec.simulate(), spec.initial_weights()
    parts, first_bad = [], None
    for i, layer in enumerate(spec.LAYERS):
        bad = next(
            (t for t in range(spec.STEPS) if not spec.close(got[t][i], want[t][i], start[i])), None
        )
        if bad is None:
            moved = float((want[-1][i] - start[i]).norm())
            parts.append(correct(layer.name, True, f"moved by {moved:.4g} as LARS moves it"))
            continue
        first_bad = len(parts) if first_bad is None else first_bad
        parts.append(correct(layer.name, False, _differs(i, bad, got, want)))
    if first_bad is not None:
        parts[first_bad].message += _cause(got)
    return parts


def _differs(i: int, t: int, got, want) -> str:
    start = spec.initial_weights()[i]
    before_got = start if t == 0 else got[t - 1][i]
    before_want = start if t == 0 else want[t - 1][i]
    g, w = got[t][i] - before_got, want[t][i] - before_want
    if not torch.isfinite(got[t][i]).all():
        return f"after step {t + 1} its weights are not finite (NaN or inf)"
    return (
        f"step {t + 1} moved it by |dw| = {float(g.norm()):.4g}, LARS by {float(w.norm()):.4g} "
        f"(cosine between the two moves {float(torch.nn.functional.cosine_similarity(g.flatten(), w.flatten(), 0)):.3f})"
    )


def _cause(got) -> str:
    found = spec.explain(got)
    if found is None:
        return (
            " (no single known mistake, nor any two, reproduces your updates: compare your step "
            "with the formulas of section 6, one layer kind at a time)"
        )
    return (
        " (your updates are exactly LARS's with "
        + "; and ".join(spec.MISTAKES[m] for m in sorted(found))
        + ")"
    )
