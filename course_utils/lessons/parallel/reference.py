"""Reference answers of lesson 16 (each verified by its check in tests/test_lesson_16.py; the
counts also against 2 gloo processes there, torch 2.14, cpu-bf16 class)."""

from __future__ import annotations

from ...checks import reference


@reference
def reference_predict_comms(layout) -> dict:
    """The collectives of one training step of `layout`, by Megatron's rules: every forward
    collective has its conjugate in backward, and a backward collective that carries an input's
    gradient happens only where that input needs one (the data does not)."""
    element = 2 if layout.dtype == "bfloat16" else 4
    tokens = layout.batch * layout.seq
    out, hidden = tokens * layout.width * element, tokens * layout.hidden * element
    n = layout.blocks
    first_needs_grad = layout.norm  # a norm's weights make its output need a gradient
    input_grads = n if first_needs_grad else n - 1  # the column layers' inputs that need one
    if layout.style == "megatron":  # g forward (row output), f backward (column input)
        return {"forward": {"all_reduce": (n, n * out)},
                "backward": {"all_reduce": (input_grads, input_grads * out)}}  # fmt: skip
    if layout.style == "sequence":  # g -> reduce-scatter, f -> all-gather, and their conjugates
        both = {"all_gather": (n, n * out), "reduce_scatter": (n, n * out)}
        return {"forward": dict(both), "backward": dict(both)}
    if layout.style == "gathered":  # the hidden gathered; its gradient sliced (no collective)
        return {"forward": {"all_gather": (n, n * hidden)},
                "backward": {"all_reduce": (input_grads, input_grads * out)}}  # fmt: skip
    # "split": the input split locally (no collective), the output all-reduced; backward
    # gathers the hidden gradient, which `up`'s weights always need
    return {"forward": {"all_reduce": (n, n * out)}, "backward": {"all_gather": (n, n * hidden)}}


@reference
def reference_choose_parallel(job) -> tuple[int, int, int]:
    """The plan that fits and whose estimated step is the shortest: the memory of the first
    stage under 1F1B, and a step of (m + pp - 1) micro-batch slots of compute, TP collectives
    on the link they cross and PP sends, then DP's all-reduce beyond the last backward."""

    def memory(dp, tp, pp):
        m = job.global_batch // (dp * job.micro_batch)
        acts = job.activation_bytes / tp * (job.layers / pp) * min(pp, m)
        return 16 * job.params / (tp * pp) + acts

    def seconds(dp, tp, pp):
        m = job.global_batch // (dp * job.micro_batch)
        compute = 6 * job.params / pp * job.seq_len * job.micro_batch / (tp * job.gpu_flops)
        tp_link = job.nvlink if tp <= job.gpus_per_node else job.network
        link = job.nvlink if job.nodes == 1 else job.network
        tensor = 4 * job.layers / pp * 2 * (tp - 1) / tp * job.message_bytes / tp_link
        sends = 2 * job.message_bytes / link if pp > 1 else 0
        grads = 2 * (dp - 1) / dp * 2 * job.params / (tp * pp) / link
        return (m + pp - 1) * (compute + tensor + sends) + max(0, grads - 2 / 3 * compute)

    fitting = [p for p in job.plans() if memory(*p) <= job.gpu_memory]
    return min(fitting or job.plans(), key=lambda p: seconds(*p))
