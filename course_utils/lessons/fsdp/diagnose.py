"""Mistakes a prediction of per-rank bytes can make, each computed from what was measured (so
no formula of the answer ships with the check), so that a check names a cause only when the
learner's number is what that mistake gives, and not the truth."""

from __future__ import annotations

STATES = {"sgd": 0, "momentum": 1, "adam": 2}  # tensors of a parameter's shape per parameter


def variants(measured: dict, case, strategy: str) -> dict[str, dict]:
    """cause -> the figures that mistake predicts (only the kinds it changes), for one case.
    `measured`: (case name, strategy) -> kind -> bytes on the fullest rank."""
    ddp, mine = measured[case.name, "ddp"], measured[case.name, strategy]
    world, states = case.world, STATES[case.optimizer]
    out: dict[str, dict] = {}
    if strategy == "fsdp":
        out["every rank gets exactly 1/world of each tensor"] = {
            k: v / world for k, v in ddp.items()
        }
        out["frozen parameters counted as trained"] = {
            "gradients": mine["parameters"],
            "optimizer": states * mine["parameters"],
        }
    else:
        out["frozen parameters counted as trained"] = {"gradients": ddp["parameters"]}
    if strategy == "zero1":
        out["ZeRO-1 taken to split the state evenly"] = {"optimizer": ddp["optimizer"] / world}
        out["ZeRO-1 taken to shard parameters or gradients too"] = {
            "parameters": ddp["parameters"] / world,
            "gradients": ddp["gradients"] / world,
        }
    elif case.optimizer == "adam":
        out["Adam taken to keep one state per parameter"] = {"optimizer": mine["optimizer"] / 2}
    if case.spec.dtype == "bfloat16":
        out["4 bytes per element assumed"] = {"parameters": 2 * mine["parameters"]}
    return out


def named_cause(kind: str, predicted: float, measured: float, causes: dict, close) -> str:
    """The mistake whose prediction for `kind` is the learner's number, or ''."""
    for cause, values in causes.items():
        if kind in values and close(predicted, values[kind]) and not close(values[kind], measured):
            return cause
    return ""
