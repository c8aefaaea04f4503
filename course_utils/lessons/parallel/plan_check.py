"""Exercise 2's check: for jobs the learner has not seen, is the chosen (dp, tp, pp) a plan
that runs, fits every GPU, and is no slower than the check's step model says the fastest
plan that fits is, within THRESHOLDS["slower"]? The model and the jobs are in jobs.py; the
learner's function is asked through a probe, by job name."""

from __future__ import annotations

from ...checks import Part, check, correct
from ...probes import observe
from .jobs import GB, SCENARIOS, Job, memory_bytes, micro_batches, step_parts
from .probes import chosen_plan
from .thresholds import THRESHOLDS


def _as_plan(value, job: Job) -> tuple[int, int, int]:
    if not (isinstance(value, (list, tuple)) and len(value) == 3):
        raise TypeError(
            f"choose_parallel returned {value!r} for '{job.name}': return (dp, tp, pp), three "
            "whole numbers"
        )
    if not all(float(v).is_integer() and v >= 1 for v in value):
        raise TypeError(f"choose_parallel returned {value!r} for '{job.name}': whole numbers >= 1")
    return tuple(int(v) for v in value)


def _cannot_run(job: Job, plan) -> str:
    dp, tp, pp = plan
    if dp * tp * pp != job.gpus:
        return f"dp * tp * pp = {dp * tp * pp}, but the job has {job.gpus} GPUs"
    if job.heads % tp or job.hidden % tp:
        return f"tp = {tp} does not divide the {job.heads} heads and the hidden width {job.hidden}"
    if job.layers % pp:
        return f"pp = {pp} does not divide the {job.layers} layers into equal stages"
    if job.global_batch % (dp * job.micro_batch):
        return (
            f"{job.global_batch} sequences do not split into micro-batches of "
            f"{job.micro_batch} over {dp} replicas"
        )
    return ""


def _memory_said(job: Job, plan) -> str:
    dp, tp, pp = plan
    m = micro_batches(job, dp)
    states = 16 * job.params / (tp * pp)
    held = min(pp, m)
    acts = job.activation_bytes / tp * (job.layers / pp) * held
    return (
        f"{memory_bytes(job, plan) / GB:.1f} GB on the first stage (model states "
        f"{states / GB:.1f} GB, activations of {held} micro-batch{'es' if held > 1 else ''} "
        f"{acts / GB:.1f} GB) of the {job.gpu_memory / GB:.0f} GB a GPU has"
    )


def _why_slower(job: Job, mine: dict, best: dict, plan) -> str:
    """The cost where the learner's plan loses the most against the fastest that fits."""
    costs = ("compute", "tensor parallel", "pipeline sends", "data parallel")
    worst = max(costs, key=lambda c: mine[c] - best[c])
    extra = f"{worst}: {mine[worst]:.3g} s of your step, {best[worst]:.3g} s of the fastest's"
    dp, tp, pp = plan
    if worst == "tensor parallel" and tp > job.gpus_per_node:
        extra += f" (tp = {tp} spans nodes: its collectives cross the {job.network / GB:.0f} GB/s network)"
    elif worst == "tensor parallel":
        link = job.nvlink if tp <= job.gpus_per_node else job.network
        extra += f" (collectives of every layer, on {link / GB:.0f} GB/s links)"
    elif worst == "compute" and pp > 1:
        m = mine["micro_batches"]
        extra += f" (the bubble: {pp - 1} idle slots of {m + pp - 1} with {m} micro-batches)"
    return extra


def _verdict(job: Job, plan) -> Part:
    why = _cannot_run(job, plan)
    if why:
        return correct(job.name, False, f"{plan} cannot run: {why}")
    head = f"(dp, tp, pp) = {plan}: {_memory_said(job, plan)}"
    if memory_bytes(job, plan) > job.gpu_memory:
        return correct(job.name, False, f"{head}: it does not fit")
    fitting = [p for p in job.plans() if memory_bytes(job, p) <= job.gpu_memory]
    fastest = min(fitting, key=lambda p: step_parts(job, p)["total"])
    mine, best = step_parts(job, plan), step_parts(job, fastest)
    ratio = mine["total"] / best["total"]
    limit = THRESHOLDS["slower"].value
    said = (
        f"{head}; modelled step {mine['total']:.3g} s, {ratio:.2f}x the fastest plan that "
        f"fits ({best['total']:.3g} s)"
    )
    if ratio > limit:
        return correct(
            job.name, False, f"{said}, more than the {limit:g}x allowed; {_why_slower(job, mine, best, plan)}",
            value=ratio, threshold=limit, unit="x", better="lower",
        )  # fmt: skip
    return correct(job.name, True, said, value=ratio, threshold=limit, unit="x", better="lower")


@check(
    "16-choose-parallel",
    points=2,
    hint="For each plan ask, in this order: can it run (the divisions), does it fit the "
    "fullest GPU with the activations its schedule holds (section 4), and what does each "
    "axis cost per step: TP's collectives on the link they cross (exercise 1), PP's bubble "
    "with this many micro-batches (section 4), DP's one all-reduce (section 5)?",
)
def check_choose_parallel(choose_parallel) -> list[Part]:
    parts = []
    for job in SCENARIOS:
        plan = _as_plan(observe(chosen_plan, choose_parallel, job.name), job)
        parts.append(_verdict(job, plan))
    return parts
