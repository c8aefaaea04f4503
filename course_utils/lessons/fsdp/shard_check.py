"""Exercise 3's check (optional): the learner's `shard_model`, in a file, applied on 2
processes to a fresh 3-block model that then trains 3 Adam steps (shard_probe.py)."""

from __future__ import annotations

from pathlib import Path

from ...checks import Part, check, correct
from .launch import describe, torchrun
from .thresholds import THRESHOLDS

WORLD = 2


def _preflight(path: Path) -> None:
    """Run the file's shard_model once here, on a pretend world of 2 (sharding.fake_world)."""
    import importlib.util

    from .shard_probe import SPEC
    from .sharding import fake_world

    spec = importlib.util.spec_from_file_location(f"learner_{path.stem}_preflight", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with fake_world(0, WORLD):
        module.shard_model(SPEC.build())


@check(
    "13-fully-shard",
    points=1,
    hint="Reread section 4: which modules get their own group, in which order are they "
    "wrapped, and which parameters belong to no block? Run the check after each change.",
)
def check_shard(path) -> list[Part]:
    path = Path(path).resolve()
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: run the %%writefile cell first")
    _preflight(path)  # not attempted, or raising: say so without launching 3 processes
    print(f"training your shard_model on {describe(WORLD)} ...")
    launch = torchrun(
        "shard",
        [path],
        nproc=WORLD,
        timeout_s=THRESHOLDS["shard_launch_timeout_s"].value,
        learner=True,
    )
    if launch.result is None:
        raise RuntimeError(launch.failure(f"shard_model in {path.name}"))
    result = launch.result["result"]
    ranks = result["ranks"]
    raised = next((r["exception"] for r in ranks if r["exception"]), None)
    if raised:
        if raised["type"] == "NotImplementedError":
            raise NotImplementedError()
        raise RuntimeError(f"{raised['type']} in shard_model: {raised['message']}")
    worst = max(ranks, key=lambda r: r["diff"])
    atol = THRESHOLDS["param_atol"].value
    held = max(r["held"] / r["full"] for r in ranks)
    gather = max(r["largest_gather"] / r["largest_block"] for r in ranks)
    return [
        correct(
            "trains like one process",
            worst["same_shapes"] and worst["diff"] <= atol,
            f"after 3 SGD-momentum steps the parameters differ from one process on the whole batches "
            f"by at most {worst['diff']:.2g} (allowed {atol:g})"
            if worst["same_shapes"]
            else "the model's parameters no longer have the shapes of the model given",
            value=worst["diff"],
            threshold=atol,
            better="lower",
        ),
        correct(
            "parameters sharded",
            held <= THRESHOLDS["held_fraction"].value,
            f"each rank holds {held:.2f} of the model's parameter bytes",
            value=held,
            threshold=THRESHOLDS["held_fraction"].value,
            better="lower",
        ),
        correct(
            "one block gathered at a time",
            0 < gather <= THRESHOLDS["gather_fraction"].value,
            f"the largest all-gather of a step moved {gather:.2f}x the largest block's bytes "
            f"({ranks[0]['gathers']} all-gathers per step)",
            value=gather,
            threshold=THRESHOLDS["gather_fraction"].value,
            better="lower",
        ),
    ]
