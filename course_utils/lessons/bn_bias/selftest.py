"""What `course selftest` runs for notebook 09: each check with its reference answer, and
the headline effect (conv+BN fusion, inference time) as the notebook's fusion cells do."""

from __future__ import annotations

from ...effects import effect
from . import reference as ref
from .demo import fusion_cases, inference_comparison


def answers() -> dict:
    """check id -> the arguments its locked cell passes, as the reference answers."""
    return {
        "09-remove-biases": lambda: (ref.reference_remove_redundant_biases,),
        "09-speed-verdict": lambda: (ref.reference_speed_verdict,),
        "09-fuse": lambda: (ref.reference_fuse_for_inference,),
    }


def fusion_effect():
    label, net, x = fusion_cases()[0]
    comparison = inference_comparison(net, ref.reference_fuse_for_inference(net, x), x)
    return effect(f"conv+BN fusion ({label})", comparison, metric="inference time", show=False)


def effects() -> dict:
    return {"conv+BN fusion": fusion_effect}
