"""Exercise 1's measurements: what each process of a DDP script did, in figures.

`observe_script` launches a script on 2 processes with the course's trace (workload.py) and
reports, per rank, what the check also reads: the samples of every training forward, who
called `torch.save`, whether the process group was up at exit; then whether a plain model
loads the checkpoint, and how far its parameters are from one process trained on the same
global batches. Figures only: finding their cause is the exercise.
"""

from __future__ import annotations

import tempfile
from collections import defaultdict
from pathlib import Path

from . import workload
from .colleague import colleague_scripts
from .ending import _load_error
from .launch import describe_failure, torchrun
from .learner_runs import finished_cleanly
from .reference import replay

WORLD = 2


def _row(name: str, values: list) -> str:
    return f"| {name} | " + " | ".join(str(v) for v in values) + " |"


def _sizes(batches: list[list[int]]) -> str:
    return ", ".join(str(n) for n in sorted({len(b) for b in batches}))


def _first(samples: list[int], n: int = 6) -> str:
    return ", ".join(map(str, samples[:n])) + ", ..."


def observe_script(script, epochs: int = 2, batch_size: int = 32) -> str:
    """Run `script` on 2 processes (global batch `batch_size`) and return, as Markdown, what
    every process did. Raises RuntimeError, with the failing rank's own error, if the launch
    fails."""
    script = Path(script)
    with tempfile.TemporaryDirectory(prefix="course06-") as out:
        cfg = workload.Config(epochs=epochs, batch_size=batch_size, lr=0.1, seed=0)
        cfg.checkpoint = Path(out) / "checkpoint.pt"
        args = ["--epochs", epochs, "--batch-size", batch_size, "--lr", cfg.lr,
                "--seed", cfg.seed, "--checkpoint", cfg.checkpoint]  # fmt: skip
        print(f"launching {script.name} on {WORLD} processes under torchrun ...")
        launch = torchrun(script, args, nproc=WORLD, learner=False)
        teardown = launch.returncode != 0 and finished_cleanly(launch, WORLD)
        if (launch.returncode != 0 and not teardown) or not launch.of("forward"):
            raise RuntimeError(describe_failure(launch, script.name))
        if teardown:  # the check reads such a launch the same way
            print(_teardown_note(launch))
        table = _per_rank(launch, epochs)
        return table + "\n\n" + _checkpoint(launch, cfg)


def _teardown_note(launch) -> str:
    """One line for a process that aborted after every rank's Python had finished (seen beside
    another torchrun on a loaded machine): what it measured is complete."""
    failed = launch.finished.root_failure() if launch.finished else None
    who = (
        f"rank {failed.rank} was killed by {failed.signal_name}"
        if failed and failed.signal_name
        else "a process failed"
    )
    return (
        f"(exit code {launch.returncode}: {who} in torch's C++ teardown, after every rank's "
        "Python had finished: a known gloo race, not the script; every figure below was "
        "recorded before it)"
    )


def _per_rank(launch, epochs: int) -> str:
    batches: dict[int, list[list[int]]] = defaultdict(list)
    for e in launch.of("forward"):
        batches[e["rank"]].append(e["samples"])
    ranks = range(WORLD)
    per_epoch = workload.N_SAMPLES // WORLD  # a DistributedSampler's shard, for splitting
    streams = {r: [i for b in batches[r] for i in b] for r in ranks}
    epoch = {
        r: [streams[r][e * per_epoch : (e + 1) * per_epoch] for e in range(epochs)] for r in ranks
    }
    saves = {r: len(launch.of("save", r)) for r in ranks}
    up = {r: any(e.get("process_group") for e in launch.of("exit", r)) for r in ranks}
    other = {r: set(epoch[1 - r][0]) for r in ranks}
    rows = [
        _row("measured", [f"rank {r}" for r in ranks]),
        "|---|" + "---|" * WORLD,
        _row("samples per training forward", [_sizes(batches[r]) for r in ranks]),
        _row("training forwards, all epochs", [len(batches[r]) for r in ranks]),
        _row("samples seen, all epochs", [len(streams[r]) for r in ranks]),
        _row(
            "epoch 0: samples the other rank also saw",
            [len(set(epoch[r][0]) & other[r]) for r in ranks],
        ),
    ]
    rows += [
        _row(f"epoch {e}: first samples", [_first(epoch[r][e]) for r in ranks])
        for e in range(epochs)
    ]
    rows += [
        _row("calls to torch.save", [saves[r] for r in ranks]),
        _row("process group still up at exit", ["yes" if up[r] else "no" for r in ranks]),
    ]
    return "\n".join(rows)


def _checkpoint(launch, cfg: workload.Config) -> str:
    if not cfg.checkpoint.exists():
        return "No checkpoint was written to `--checkpoint`."
    import torch

    obj = torch.load(cfg.checkpoint, map_location="cpu", weights_only=True)
    state = obj.get("model", obj) if isinstance(obj, dict) else obj
    keys = ", ".join(f"`{k}`" for k in list(state)[:3])
    error = _load_error(workload.make_model(), state)
    loads = "accepted it" if error is None else f"refused it: *{error[:160]}...*"
    by_rank: dict[int, list[list[int]]] = defaultdict(list)
    for e in launch.of("forward"):
        by_rank[e["rank"]].append(e["samples"])
    steps = [sum(group, []) for group in zip(*(by_rank[r] for r in range(WORLD)), strict=False)]
    alone = replay(steps, cfg)[-1]
    plain = {k.removeprefix("module."): v for k, v in state.items()}
    if set(plain) != set(alone):
        return f"- the checkpoint's first keys: {keys}; `workload.make_model().load_state_dict(...)` {loads}"
    diff = max((plain[k].float() - v.float()).abs().max().item() for k, v in alone.items())
    return (
        f"- the checkpoint's first keys: {keys}; `workload.make_model().load_state_dict(...)` "
        f"{loads}\n- its parameters against one process trained on the same {len(steps)} global "
        f"batches of {len(steps[0])} samples (what both ranks saw at each step): max |difference| "
        f"{diff:.1e}"
    )


def observe_colleague(workdir) -> str:
    """Write the colleague's script into `workdir`/colleague and observe it."""
    folder = Path(workdir) / "colleague"
    folder.mkdir(exist_ok=True)
    for name, text in colleague_scripts().items():
        (folder / name).write_text(text, encoding="utf-8")
    return observe_script(folder / "ddp_train.py")
