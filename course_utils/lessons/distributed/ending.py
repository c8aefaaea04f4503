"""How a DDP script ends: the checkpoint it leaves, and the process group it shuts down.

Two things a script that trains correctly can still get wrong. A checkpoint saved from the
DDP wrapper (`model.state_dict()`) names every tensor `module.<name>`, so a plain model loads
it only after the prefix is stripped. And a `dist.destroy_process_group()` written after the
loop is skipped when training raises; the check sees it in a one-process run whose training
it makes fail (workload.FAIL_ENV), beside the real launch.
"""

from __future__ import annotations

import torch

from ...checks import Part, correct, not_applicable
from . import workload
from .launch import Launch

CHECKPOINT, SHUTDOWN = "checkpoint loads into a plain model", "shuts the process group down"


def judge_checkpoint(path) -> tuple[dict | None, Part | None]:
    """The saved state dict (prefix stripped, for the parameter comparison) and the verdict
    of loading it into `workload.make_model()` as it is; (None, None) when nothing was saved
    (the rank-0 part says so)."""
    if not path.exists():
        return None, None
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # a pickled module, or a file torch.save did not write
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
        return None, correct(
            CHECKPOINT,
            False,
            f"torch.load(..., weights_only=True) could not read it ({type(exc).__name__}: "
            f"{first}): save a state dict of tensors, model.module.state_dict(), not a module",
        )
    state = obj.get("model") if isinstance(obj, dict) and "model" in obj else obj
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        return None, correct(
            CHECKPOINT,
            False,
            f"the checkpoint holds {_kind(obj)}, not a state dict (names -> tensors) under "
            '"model": save {"model": model.module.state_dict(), "epoch": epoch}',
        )
    stripped = {k.removeprefix("module."): v for k, v in state.items()}
    plain = workload.make_model()
    if state and all(k.startswith("module.") for k in state) and _loads(plain, stripped):
        return stripped, correct(
            CHECKPOINT,
            False,
            f"its keys start with `module.` ({next(iter(state))!r}): that is the state dict of "
            "the DDP wrapper, which a plain model loads only after stripping the prefix; save "
            "model.module.state_dict(), the wrapped model's own",
        )
    error = _load_error(plain, state)
    if error:
        expected = ", ".join(list(plain.state_dict())[:3])
        return None, correct(
            CHECKPOINT,
            False,
            f"workload.make_model().load_state_dict(...) refused it ({error}); the model's "
            f"keys are {expected}, ...: save model.module.state_dict()",
        )
    return state, correct(
        CHECKPOINT, True, "load_state_dict(strict=True) into workload.make_model() accepts it"
    )


def _kind(obj) -> str:
    if isinstance(obj, dict):
        return f"a dict with keys {sorted(map(str, obj))[:4]}"
    return f"a {type(obj).__name__}"


def _loads(model: torch.nn.Module, state: dict) -> bool:
    return _load_error(model, state) is None


def _load_error(model: torch.nn.Module, state: dict) -> str | None:
    try:
        model.load_state_dict(state)
    except (RuntimeError, KeyError, TypeError) as exc:
        return " ".join(str(exc).split())[:240]
    return None


def judge_shutdown(launch: Launch, failing: Launch) -> Part:
    """Whether every process left its process group shut down: after the real launch's
    training, and in the one-process run whose every training forward raised."""
    left_up = sorted(e["rank"] for e in launch.of("exit") if e.get("process_group"))
    if left_up:
        return correct(
            SHUTDOWN,
            False,
            f"ranks {left_up} exited with their process group still initialised after training "
            "finished: dist.destroy_process_group() was never called. Call it at the end, in "
            "a `finally:` so that it also runs when training fails",
        )
    made_to_fail = (
        "a one-process run (world size 1) in which the check made every training forward raise"
    )
    if failing.timed_out:
        return correct(
            SHUTDOWN,
            False,
            f"{made_to_fail} did not finish within {failing.timeout_s:.0f} s and was killed. "
            "Last output:\n" + failing.tail(),
        )
    if not failing.of("injected"):
        exc = failing.exception()
        seen = f" ({exc['type']}: {exc['message'][:200]})" if exc else ""
        return not_applicable(
            SHUTDOWN,
            f"not judged: in {made_to_fail}, no training forward ran{seen}, so the check "
            "could not make training fail (this is the check's limit, not your script's)",
        )
    exits = failing.of("exit")
    if not exits:
        return not_applicable(
            SHUTDOWN,
            f"not judged: in {made_to_fail}, the process ended (exit code "
            f"{failing.returncode}) without Python's normal exit, where the check looks",
        )
    if exits[-1].get("process_group"):
        return correct(
            SHUTDOWN,
            False,
            f"in {made_to_fail}, the script exited with its process group still initialised: "
            "dist.destroy_process_group() ran after a normal end, but an exception jumped "
            "over it. Put the training in `try:` and the call in `finally:`",
        )
    return correct(
        SHUTDOWN,
        True,
        f"destroy_process_group() ran after training, and also in {made_to_fail}",
    )
