"""From what the processes did to a verdict: the judgement half of lesson 06's checks.

Kept apart from the launching so the tests can judge many measured behaviours from one
launch, and so each message names the cause a learner can act on.
"""

from __future__ import annotations

import re
from collections import defaultdict

from ...checks import Part, correct
from ...errors import CourseError, ReferenceUsed
from ...probes import LearnerRaised
from . import workload
from .launch import Launch
from .reference import replay


class RankFailed(LearnerRaised):
    """Raised in a check when the learner's code failed in one of the launched processes:
    `said` completes "your code ..." ("raised ValueError on rank 1 of ...: boom")."""

    def __init__(self, said: str):
        self.type_name, self.message, self.where = "RankFailed", said, ""
        CourseError.__init__(self, f"your code {said}")


def raise_learner_exception(exc: dict, where: str) -> None:
    """Re-raise, in the check, an exception that the learner's code raised in a worker."""
    kind, message = str(exc.get("type", "?")), str(exc.get("message", ""))
    if kind == "NotImplementedError":
        raise NotImplementedError()
    if kind == "ReferenceUsed":
        name = re.search(r"`([^`]+)`", message)
        raise ReferenceUsed(name[1] if name else "reference")
    raise RankFailed(f"raised {kind} {where}: {message}")


def _epochs(stream: list[int], per_epoch: int) -> list[list[int]]:
    return [stream[i : i + per_epoch] for i in range(0, len(stream), per_epoch)]


def judge_trace(launch: Launch, cfg: workload.Config, world: int) -> list[Part]:
    """Per-rank batch size, sharding of every epoch, reshuffling, and who saved."""
    forwards: dict[int, list[list[int]]] = defaultdict(list)
    for e in launch.of("forward"):
        forwards[e["rank"]].append(e["samples"])
    if sorted(forwards) != list(range(world)):
        return [
            correct(
                "every rank trains",
                False,
                f"training forwards were seen on ranks {sorted(forwards)} of {world}: every "
                "process must run the loop (is the model built by workload.make_model()?)",
            )
        ]
    parts = [_batch_part(forwards, cfg, world)]
    parts += _sharding_parts(forwards, workload.N_SAMPLES, cfg, world)
    parts.append(_save_part(launch, cfg))
    return parts


def _batch_part(forwards: dict, cfg: workload.Config, world: int) -> Part:
    """Every batch holds global // world samples, but for at most one smaller batch per epoch
    and rank: the rest of a shard that does not divide into whole batches (the check's does
    not). Whether the samples were the right ones is the sharding part's to say."""
    sizes = sorted({len(b) for batches in forwards.values() for b in batches})
    expected = cfg.batch_size // world
    short = [[len(b) for b in batches if len(b) < expected] for batches in forwards.values()]
    if max(sizes) == expected and all(len(s) <= cfg.epochs for s in short):
        ends = ", ".join(map(str, sorted({n for s in short for n in s})))
        last = f", and {ends} in the last batch of an epoch" if ends else ""
        return correct(
            "per-process batch",
            True,
            f"every rank ran batches of {expected}{last}: global batch {cfg.batch_size} over "
            f"{world}",
        )
    cause = (
        f"each rank used the global batch size {cfg.batch_size}, so the global batch became "
        f"{cfg.batch_size * world}; give each DataLoader batch_size // world_size"
        if max(sizes) == cfg.batch_size
        else f"expected {expected} per rank (global {cfg.batch_size} // {world} processes)"
    )
    return correct("per-process batch", False, f"ranks ran batches of sizes {sizes}: {cause}")


def _sharding_parts(forwards: dict, n: int, cfg: workload.Config, world: int) -> list[Part]:
    streams = {r: [i for b in batches for i in b] for r, batches in forwards.items()}
    per_rank = {r: len(s) for r, s in streams.items()}
    epochs, shard = cfg.epochs, n // world
    if all(c == epochs * n for c in per_rank.values()):
        whole = correct(
            "sharding",
            False,
            f"each rank saw all {n} samples in every epoch: without a DistributedSampler every "
            f"process trains on the whole data set, so {world} processes repeat the same work",
        )
        return [whole, correct("reshuffling", False, "not judged: the data was not sharded")]
    kept = _full_batches_only(forwards, cfg, world)
    if kept is None and any(c != epochs * shard for c in per_rank.values()):
        return [
            correct(
                "sharding",
                False,
                f"samples seen per rank {per_rank} over {epochs} epochs; expected "
                f"{epochs * shard} each ({n} samples / {world} ranks per epoch)",
            )
        ]
    per_epoch = {r: _epochs(s, kept or shard) for r, s in streams.items()}
    for e in range(epochs):
        seen = [set(per_epoch[r][e]) for r in range(world)]
        overlap = set.intersection(*seen)
        if overlap or len(set.union(*seen)) != world * (kept or shard):
            msg = (
                f"in epoch {e} the ranks shared {len(overlap)} samples and covered "
                f"{len(set.union(*seen))} of {n}: each rank needs its own shard "
                "(DistributedSampler with num_replicas=world_size and rank=rank)"
            )
            return [correct("sharding", False, msg)]
    if kept:
        shards = correct("sharding", False, _dropped_cause(kept, shard, n, cfg, world))
    else:
        shards = correct(
            "sharding", True, f"every epoch the {world} ranks saw disjoint shards covering all {n}"
        )
    repeats = [e for e in range(1, epochs) if per_epoch[0][e] == per_epoch[0][0]]
    shuffle = correct(
        "reshuffling",
        not repeats,
        _repeat_cause(per_epoch[0][0], repeats[0])
        if repeats
        else f"a new order in each of the {epochs} epochs",
    )
    return [shards, shuffle]


def _full_batches_only(forwards: dict, cfg: workload.Config, world: int) -> int | None:
    """Samples per rank and epoch when every rank trained on the whole batches of its shard
    and never on the smaller batch that ends each epoch (what DataLoader's drop_last=True
    does); None when the trace shows anything else."""
    size, shard = cfg.batch_size // world, workload.N_SAMPLES // world
    kept = shard - shard % size if size else shard
    batches = [b for per_rank in forwards.values() for b in per_rank]
    if kept == shard or {len(b) for b in batches} != {size}:
        return None
    if any(len(forwards[r]) != cfg.epochs * (kept // size) for r in range(world)):
        return None
    return kept


def _dropped_cause(kept: int, shard: int, n: int, cfg: workload.Config, world: int) -> str:
    size = cfg.batch_size // world
    return (
        f"each rank trained on {kept} of its {shard} samples per epoch, in {kept // size} "
        f"batches of {size}, and never on the {shard - kept} left over, so the ranks together "
        f"saw {world * kept} of the {n} samples each epoch instead of every sample once: the "
        "smaller last batch of each epoch was dropped (DataLoader's drop_last=True, or a loop "
        "that stops after the full batches); keep it, as drop_last=False (the default) does"
    )


def _repeat_cause(order: list[int], epoch: int) -> str:
    """Same order twice: an ascending order means the sampler never shuffled (shuffle=False),
    a shuffled one that set_epoch was not called; the order itself tells them apart."""
    same = f"rank 0 saw its samples in the same order in epochs 0 and {epoch}"
    if order == sorted(order):
        return (
            f"{same}, in ascending index order: the sampler does not shuffle at all "
            "(DistributedSampler's shuffle=True is its default; do not pass shuffle=False)"
        )
    return (
        f"{same}: call sampler.set_epoch(epoch) before each epoch (the order is shuffled, "
        "but the sampler seeds its shuffle with seed + epoch)"
    )


def _save_part(launch: Launch, cfg: workload.Config) -> Part:
    savers = sorted({e["rank"] for e in launch.of("save")})
    if savers and savers != [0]:
        return correct(
            "rank-0 checkpoint",
            False,
            f"torch.save was called on ranks {savers}: all ranks hold the same weights, so "
            "only rank 0 should write (several writers race on one file and multiply the I/O)",
        )
    if not cfg.checkpoint.exists():
        return correct(
            "rank-0 checkpoint",
            False,
            f"nothing was written to cfg.checkpoint ({cfg.checkpoint.name}, from --checkpoint): "
            "rank 0 must torch.save the model there",
        )
    who = "only rank 0 called torch.save" if savers else "a checkpoint, not by torch.save"
    return correct("rank-0 checkpoint", True, who)


def _max_diff(a: dict, b: dict) -> float:
    if set(a) != set(b):
        return float("inf")
    return max((a[k].float() - b[k].float()).abs().max().item() for k in a)


def judge_parameters(launch: Launch, cfg: workload.Config, state: dict, atol: float) -> Part:
    """The checkpoint against single-process training on the same global batches."""
    by_rank: dict[int, list[list[int]]] = defaultdict(list)
    for e in launch.of("forward"):
        by_rank[e["rank"]].append(e["samples"])
    ranks = sorted(by_rank)
    global_batches = [sum(group, []) for group in zip(*(by_rank[r] for r in ranks), strict=True)]
    states = replay(global_batches, cfg)
    diff = _max_diff(state, states[-1])
    name = "same parameters as one process"
    if diff <= atol:
        return correct(
            name,
            True,
            f"after {len(global_batches)} steps the checkpoint equals single-process training "
            f"on the same global batches: max |difference| {diff:.1e} <= {atol:.0e}",
            value=diff,
            threshold=atol,
            better="lower",
        )
    for scale, cause in ((len(ranks), "summed over ranks instead of averaged (DDP already "
                          "averages: no extra all_reduce, no loss * world_size)"),
                         (1 / len(ranks), "divided by the world size twice (DDP already "
                          "averages: do not divide the loss by world_size)")):  # fmt: skip
        if _max_diff(state, replay(global_batches, cfg, grad_scale=scale)[-1]) <= atol:
            return correct(name, False, f"max |difference| {diff:.2g}: gradients were {cause}")
    alone = replay(by_rank[0], cfg)[-1]
    if _max_diff(state, alone) <= atol:
        return correct(
            name,
            False,
            f"max |difference| {diff:.2g}: rank 0 trained on its own shard alone, the ranks "
            "never averaged gradients (call the DDP-wrapped model, not model.module)",
        )
    early = [s for s, p in enumerate(states[:-1]) if _max_diff(state, p) <= atol]
    if early:
        return correct(name, False, _early_cause(early[-1], len(global_batches), launch, cfg))
    return correct(
        name,
        False,
        f"max |difference| {diff:.2g} from single-process training on the same global "
        f"batches (> {atol:.0e}): check the loss (mean, not sum) and the optimizer",
        value=diff,
        threshold=atol,
        better="lower",
    )


def _forwards_before_save(launch: Launch, cfg: workload.Config) -> tuple[int, int] | None:
    """(rank, forwards): the rank that last wrote the checkpoint and how many training
    forwards it had run by then; None when no torch.save of it was traced."""
    saves = [e for e in launch.of("save") if e["path"] == str(cfg.checkpoint)]
    if not saves:
        return None
    last = max(saves, key=lambda e: e["t"])
    return last["rank"], sum(1 for e in launch.of("forward", last["rank"]) if e["t"] <= last["t"])


def _early_cause(step: int, steps: int, launch: Launch, cfg: workload.Config) -> str:
    """The checkpoint equals the parameters after `step` of `steps`; the trace says when it
    was written. After `step` or `step + 1` forwards (before that step's update): a save made
    too early. After more: the weights stopped moving while training went on."""
    holds = f"the checkpoint holds the parameters after step {step} of {steps}"
    saved = _forwards_before_save(launch, cfg)
    if saved is None or saved[1] <= step + 1:
        return f"{holds}: save after the last step of the epoch"
    written = f"written by rank {saved[0]} after its {saved[1]} training forwards"
    if step == 0:
        return (
            f"the checkpoint, {written}, holds the initial parameters: the weights did not "
            "change during training, so the optimizer does not update the model that trains "
            "(build it over the DDP model's parameters, model.parameters(), and call "
            "optimizer.step() after each backward)"
        )
    return (
        f"{holds}, though it was {written}: the weights stopped changing after step {step}; "
        "check that every step's optimizer.step() updates the model that trains"
    )


def judge_accumulation(ranks: list[dict], rtol: float) -> list[Part]:
    """All-reduces per optimizer step (DDP's and the learner's own collectives), and the
    accumulated gradient on every rank against the full-batch mean and each known mistake."""
    for r in ranks:
        if r["exception"]:
            raise_learner_exception(r["exception"], f"on rank {ranks.index(r)}")
    return [_count_part(ranks[0]), _gradient_part(ranks, rtol)]


def _count_part(first: dict) -> Part:
    k, per_sync, ddp = first["micro_batches"], first["per_sync"], first["allreduces"]
    own = first.get("own_collectives") or {}
    total = ddp + sum(own.values())
    ddp_cause = {
        per_sync: None,
        k * per_sync: "every micro-batch was all-reduced: the forward AND backward of all "
        "but the last micro-batch must run inside model.no_sync() (DDP decides at forward time)",
        0: "nothing was all-reduced: the last micro-batch must run outside no_sync(), or "
        "the ranks never average their gradients",
    }.get(ddp, f"expected {per_sync} (one synchronised backward)")
    if not own:
        return correct(
            "all-reduces",
            ddp_cause is None,
            f"{ddp} all-reduce(s) for {k} micro-batches: " + (ddp_cause or "one synchronisation"),
            value=ddp,
            threshold=per_sync,
        )
    calls = ", ".join(f"{n} dist.{name}" for name, n in sorted(own.items()))
    if own == {"all_reduce": first.get("parameters")}:
        calls += " (one per parameter)"
    if ddp == per_sync:
        cause = (
            "DDP's synchronised backward had already averaged the gradients over the ranks, "
            "so the all-reduces you added send every gradient a second time"
        )
    elif ddp == 0:
        cause = (
            "the gradients were all-reduced by hand; leave the last micro-batch outside no_sync() and DDP does "
            f"it in {per_sync} bucketed all-reduce(s), overlapped with that backward"
        )
    else:
        cause = f"DDP's count: {ddp_cause}"
    return correct(
        "all-reduces",
        False,
        f"{ddp} all-reduce(s) by DDP plus {calls} of your own for {k} micro-batches, {total} "
        f"collectives in all; expected {per_sync}, DDP's alone: {cause}",
        value=total,
        threshold=per_sync,
    )


def _gradient_part(ranks: list[dict], rtol: float) -> Part:
    first = ranks[0]
    k, world = first["micro_batches"], len(ranks)
    worst = max(r["diff_full"] / r["scale"] for r in ranks)
    if worst <= rtol:
        return correct(
            "gradient",
            True,
            f"every rank holds the full-batch mean gradient (rel. error {worst:.1e})",
        )
    # a mistake is named only when every rank's gradient equals what it leaves (probe.py)
    known = [n for n in first.get("known", {}) if all(r["known"][n] <= rtol for r in ranks)]
    own = "all_reduce" in (first.get("own_collectives") or {})
    half = " (half)" if world == 2 else ""
    causes = {
        "unscaled": f"{k}x the mean: divide each micro-batch's loss by {k}",
        "world_up": f"{world}x the mean, the sum over the {world} ranks: "
        + (
            "dist.all_reduce sums (ReduceOp.SUM is its default), so divide what it returns "
            "by the world size"
            if own
            else "DDP already averages over the ranks, so do not scale by the world size"
        ),
        "world_down": f"1/{world} of the mean{half}: divided by the world size ({world}) on "
        "top of DDP's averaging; DDP's all-reduce already averages over the ranks, so do "
        "not divide the loss by world_size",
        "local": "each rank kept the gradient of its own micro-batches: they were never averaged",
        "last_only": "only the last micro-batch's gradient is left (averaged over the ranks, "
        f"1/{k} of it): the gradients were cleared between micro-batches; zero_grad belongs "
        "before the loop (once per optimizer step), not inside it",
        "last_only_unscaled": "only the last micro-batch's gradient is left: the gradients "
        "were cleared between micro-batches; zero_grad belongs before the loop (once per "
        "optimizer step), not inside it",
    }
    differ = max(r.get("rank_diff", 0.0) for r in ranks)
    for j in range(k - 1):
        which = "the first" if j == 0 else f"micro-batch {j + 1} of {k}"
        causes[f"sync_at_{j}"] = (
            f"the ranks hold different gradients (rel. {differ:.2g} apart), each exactly "
            f"what synchronising {which} "
            "instead of the last leaves: DDP all-reduces what has accumulated up to its "
            "synchronised backward, and the micro-batches after it stay on their own rank; "
            "the last micro-batch must be the one outside no_sync()"
        )
    cause = next((causes[n] for n in known if n in causes), None)
    if cause is None:
        cause = "neither the full-batch mean nor a known mistake" + (
            f"; the ranks' gradients differ from each other (rel. {differ:.2g}): not all of "
            "it was averaged over the ranks"
            if differ > rtol
            else ""
        )
    msg = f"rel. error {worst:.2g} from the full-batch mean gradient (> {rtol:.0e}): {cause}"
    return correct("gradient", False, msg, value=worst, threshold=rtol)
