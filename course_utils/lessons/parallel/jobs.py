"""Exercise 2's jobs: a model, a batch and a cluster, and how a (DP, TP, PP) plan fares on them.

A `Job` is scenario data (the learner's `choose_parallel` reads it); `memory_bytes` and
`step_seconds` are the model the check judges a plan by, built from what the notebook measured
and cited, for a GPT-style stack of `layers` transformer layers of width `hidden`:

- memory per GPU = model states / (tp * pp) + activations: mixed-precision Adam keeps 16 bytes
  per parameter (bf16 weights and gradients, fp32 master weights and two moments: Rajbhandari
  et al. 2020, ZeRO, section 3.1); one layer's activations for one micro-batch, with sequence
  parallelism and selective recomputation, are 34 * seq * micro_batch * hidden bytes / tp
  (Korthikanti et al. 2022, table 2), and under 1F1B the first stage holds min(pp, m) micro-
  batches of its layers / pp layers (section 4 counted them).
- time per step = (m + pp - 1) micro-batch slots (the bubble, section 4), each the stage's share
  of 6 FLOPs per parameter per token (forward and backward) over tp GPUs, plus its tensor-
  parallel collectives (two blocks per layer, each one collective forward and one backward:
  exercise 1) on the link they cross, plus the activation and gradient sent across a stage
  boundary; then DP's all-reduce of the bf16 gradients, which overlaps only the last micro-
  batch's backward (accumulation syncs once per step: lesson 06's no_sync).
A ring collective moves 2(n - 1)/n of its tensor per GPU for an all-reduce.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

GB = 1e9


@dataclass(frozen=True)
class Job:
    """One training job: the model, its batch, and the GPUs it runs on (bytes, seconds)."""

    name: str
    params: int  # parameters of the transformer stack (12 * layers * hidden^2)
    layers: int
    hidden: int
    heads: int
    seq_len: int  # tokens per sequence
    global_batch: int  # sequences per optimizer step
    micro_batch: int  # sequences per micro-batch (per data-parallel replica)
    nodes: int
    gpus_per_node: int
    gpu_memory: float  # bytes usable per GPU
    gpu_flops: float  # bf16 FLOP/s one GPU achieves on these layers
    nvlink: float  # bytes/s per GPU between GPUs of one node (each direction)
    network: float  # bytes/s per GPU between nodes (each direction)

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def activation_bytes(self) -> float:
        """One layer's activations for one micro-batch, kept for backward, without TP
        (Korthikanti et al. 2022: 34 * seq * micro_batch * hidden, selective recomputation)."""
        return 34 * self.seq_len * self.micro_batch * self.hidden

    @property
    def message_bytes(self) -> float:
        """One micro-batch's activation tensor (seq x micro_batch x hidden, bf16): what one
        tensor-parallel collective reduces, and what a stage sends to the next."""
        return 2 * self.seq_len * self.micro_batch * self.hidden

    def plans(self) -> list[tuple[int, int, int]]:
        """Every (dp, tp, pp) that can run: dp * tp * pp = gpus, tp divides heads and hidden,
        pp divides layers, and each replica gets a whole number of micro-batches."""
        out = []
        for tp in _divisors(self.gpus):
            if self.heads % tp or self.hidden % tp:
                continue
            for pp in _divisors(self.gpus // tp):
                dp = self.gpus // (tp * pp)
                if self.layers % pp == 0 and self.global_batch % (dp * self.micro_batch) == 0:
                    out.append((dp, tp, pp))
        return out

    def to_dict(self) -> dict:
        return asdict(self)


def _divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def gpt(name: str, layers: int, hidden: int, **rest) -> Job:
    """A Job for a GPT stack (heads of 128 channels; an H100 node's figures unless given)."""
    cluster = {
        "gpus_per_node": 8,
        "gpu_memory": 80 * GB,  # H100 SXM
        "gpu_flops": 400e12,  # ~40% of its 989 TFLOP/s dense bf16 peak (data sheet)
        "nvlink": 450 * GB,  # NVLink 4: 900 GB/s per GPU, both directions together
        "network": 50 * GB,  # one 400 Gb/s InfiniBand NIC per GPU
    }
    return Job(name, 12 * layers * hidden**2, layers, hidden, hidden // 128, **{**cluster, **rest})


CHOOSING: list[bool] = []  # set while exercise 2's check runs the learner's choose_parallel


def _refuse_while_choosing(name: str) -> None:
    if CHOOSING:
        raise RuntimeError(
            f"choose_parallel called lesson.{name}: exercise 2 asks you to weigh the plans "
            "yourself (the check's own model is what judges your choice)"
        )


def micro_batches(job: Job, dp: int) -> int:
    return job.global_batch // (dp * job.micro_batch)


def memory_bytes(job: Job, plan) -> float:
    """Bytes on the fullest GPU (the first stage) of `plan` = (dp, tp, pp)."""
    _refuse_while_choosing("memory_bytes")
    dp, tp, pp = plan
    m = micro_batches(job, dp)
    states = 16 * job.params / (tp * pp)
    activations = job.activation_bytes / tp * (job.layers / pp) * min(pp, m)
    return states + activations


def step_parts(job: Job, plan) -> dict[str, float]:
    """Seconds per step of `plan` by cost: compute (the bubble included), TP's collectives,
    PP's sends, DP's all-reduce left after overlap; and `total`, `micro_batches`."""
    _refuse_while_choosing("step_parts")
    dp, tp, pp = plan
    m = micro_batches(job, dp)
    slots = m + pp - 1  # GPipe and 1F1B alike: (pp - 1) slots of bubble
    tokens = job.seq_len * job.micro_batch
    compute = 6 * job.params / pp * tokens / (tp * job.gpu_flops)
    tp_link = job.nvlink if tp <= job.gpus_per_node else job.network
    node_link = job.nvlink if job.nodes == 1 else job.network
    ring = 2 * (tp - 1) / tp
    tensor = 4 * (job.layers / pp) * ring * job.message_bytes / tp_link
    pipe = 2 * job.message_bytes / node_link if pp > 1 else 0.0
    grads = 2 * (dp - 1) / dp * 2 * job.params / (tp * pp) / node_link
    data = max(0.0, grads - 2 / 3 * compute)  # the last micro-batch's backward hides some
    parts = {
        "compute": slots * compute,
        "tensor parallel": slots * tensor,
        "pipeline sends": slots * pipe,
        "data parallel": data,
    }
    return {**parts, "total": sum(parts.values()), "micro_batches": m}


def step_seconds(job: Job, plan) -> float:
    return step_parts(job, plan)["total"]


# --- the check's jobs (and the notebook's example) ----------------------------------------------

SCENARIOS = (
    gpt("a 1.2B model on 2 nodes", 24, 2048, seq_len=2048, global_batch=512, micro_batch=4,
        nodes=2),
    gpt("long sequences", 40, 3072, seq_len=32768, global_batch=8, micro_batch=1, nodes=2),
    gpt("a few micro-batches", 48, 4096, seq_len=4096, global_batch=16, micro_batch=2,
        nodes=2),
    gpt("bigger than a node", 96, 8192, seq_len=4096, global_batch=64, micro_batch=2,
        nodes=4),
    gpt("a PCIe server", 24, 3072, seq_len=4096, global_batch=128, micro_batch=1, nodes=1,
        gpu_memory=24 * GB, gpu_flops=150e12, nvlink=25 * GB, network=12.5 * GB),
    # added after the blind round: TP tempted past a node (TP over 16 GPUs would fit the
    # states, but its collectives then cross the network), and micro-batches of 4 sequences
    # (a model that prices one sequence per micro-batch picks a pipeline here)
    gpt("a 39B model on 4 nodes", 48, 8192, seq_len=2048, global_batch=32, micro_batch=4,
        nodes=4),
    gpt("a 1.2B model on 4 nodes", 24, 2048, seq_len=2048, global_batch=256, micro_batch=4,
        nodes=4),
)  # fmt: skip
EXAMPLE = gpt("the notebook's example", 32, 4096, seq_len=4096, global_batch=64,
              micro_batch=1, nodes=2)  # fmt: skip
