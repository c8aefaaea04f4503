"""Mistakes a prediction of per-rank bytes can make, each computed from what was measured (so
no formula of the answer ships with the check), so that a check names a cause only when the
learner's number is what that mistake gives, and not the truth."""

from __future__ import annotations

STATES = {"sgd": 0, "momentum": 1, "adam": 2}  # tensors of a parameter's shape per parameter
STEP_BYTES = {"adam": 4}  # Adam's step counter: one float32 scalar per trained tensor


def variants(measured: dict, case, strategy: str) -> dict[str, dict]:
    """cause -> the figures that mistake predicts (only the kinds it changes), for one case.
    `measured`: (case name, strategy) -> kind -> bytes on the fullest rank."""
    ddp, mine = measured[case.name, "ddp"], measured[case.name, strategy]
    world, states = case.world, STATES[case.optimizer]
    params = list(case.spec.build().parameters())
    step = STEP_BYTES.get(case.optimizer, 0)
    counters = step * sum(p.requires_grad for p in params)  # on a rank that holds every state
    out: dict[str, dict] = {}
    if strategy == "fsdp":
        out["every rank gets exactly 1/world of each tensor"] = {
            k: v / world for k, v in ddp.items()
        }
        out["frozen parameters counted as trained"] = {
            "gradients": mine["parameters"],
            "optimizer": states * mine["parameters"] + step * len(params),
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
        moments = mine["optimizer"] - counters
        out["Adam taken to keep one state per parameter"] = {"optimizer": moments / 2 + counters}
        out["Adam's step counters left out (4 B per trained tensor)"] = {"optimizer": moments}
    if case.spec.dtype == "bfloat16":
        out["4 bytes per element assumed"] = {"parameters": 2 * mine["parameters"]}
        if strategy != "zero1":  # the state takes the parameter's dtype; the counters float32
            out["optimizer state taken as float32"] = {
                "optimizer": 2 * (mine["optimizer"] - counters) + counters
            }
    return out


def named_cause(kind: str, predicted: float, measured: float, causes: dict, close) -> str:
    """The mistake whose prediction for `kind` is the learner's number, or ''."""
    for cause, values in causes.items():
        if kind in values and close(predicted, values[kind]) and not close(values[kind], measured):
            return cause
    return ""
