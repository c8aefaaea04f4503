"""Blind red team for notebook 13's checks: 13-predict-bytes, 13-choose-plan, 13-fully-shard.

Written from the learner notebook (hints folded first), what it shows with `cu.show_source`
(`holdings`, `storage_bytes`, `shard_blocks`, `interleaved`), the lesson's model, sharding and
options modules, the generic check API and `redteam_helpers.py`; never the lesson's checks,
probes, specimens, thresholds, references or tests. Each case is a learner answer with the
verdict the check must give and, for a wrong one, the cause its failing parts must name
(`names`) and a cause they must not name (`not_names`), both regexes.

Costs: 13-predict-bytes measures its models once per process (~5-10 s), then each case is
cheap, so three of its cases run in CI. 13-choose-plan launches two timed processes on its
first call (~30 s) and 13-fully-shard launches two processes per case (~13 s): those run
with COURSE_REDTEAM=all.

Run: COURSE_QUICK=1 COURSE_REDTEAM=all pytest -q -p no:cacheprovider
tests/redteam/test_13_blind.py
"""

from __future__ import annotations

import math
import os
import textwrap

os.environ.setdefault("COURSE_QUICK", "1")

import pytest  # noqa: E402
from redteam_helpers import assert_graded, case, grade, in_ci  # noqa: E402

from course_utils.lessons import fsdp as lesson  # noqa: E402

# =============================================================================================
# 13-predict-bytes: parameters, gradients, optimizer state on the fullest rank
# =============================================================================================

KINDS = ("parameters", "gradients", "optimizer")


def _rows0(p, n):
    """Rank 0's share of `p` under torch.chunk(dim=0): ceil(rows / n) rows (the most)."""
    if p.dim() == 0:
        return p.numel()
    return math.ceil(p.shape[0] / n) * (p.numel() // max(p.shape[0], 1))


def _state(optimizer, p, elems, *, step=True, state_bytes=None, momentum_state=True):
    es = state_bytes or p.element_size()
    if optimizer == "adam":
        return 2 * elems * es + (4 if step else 0)
    if optimizer == "momentum" and momentum_state:
        return elems * es
    return 0


def _predict(
    model,
    strategy,
    world_size,
    optimizer,
    *,
    shard=_rows0,  # FSDP's share of one tensor on the fullest rank
    grads_sharded=True,  # FSDP's gradients follow the shards
    state_sharded=True,  # FSDP's optimizer state follows the shards
    frozen_sharded=True,  # FSDP shards frozen parameters too
    respect_frozen=True,  # frozen parameters: no gradient, no state
    ddp_grad_factor=1,  # 2: gradients plus DDP's buckets
    zero1="greedy",  # greedy | even | round_robin | unsorted
    zero1_rank=None,  # None: the fullest rank; an int: that rank
    zero1_partition_all=False,  # partition frozen parameters too
    zero1_grads_sharded=False,  # ZeRO-2's gradients
    step=True,  # Adam's 4-byte step counter
    state_bytes=None,  # bytes per state element (None: the parameter's)
    elem_bytes=None,  # bytes per parameter element (None: the parameter's)
    momentum_state=True,
):
    params = list(model.parameters())
    train = [p for p in params if p.requires_grad or not respect_frozen]

    def es(p):
        return elem_bytes or p.element_size()

    def st(p, elems):
        return _state(
            optimizer, p, elems, step=step, state_bytes=state_bytes, momentum_state=momentum_state
        )

    if strategy == "fsdp":

        def share(p, sharded=True):
            return shard(p, world_size) if sharded else p.numel()

        return {
            "parameters": sum(share(p, frozen_sharded or p.requires_grad) * es(p) for p in params),
            "gradients": sum(share(p, grads_sharded) * es(p) for p in train),
            "optimizer": sum(st(p, share(p, state_sharded)) for p in train),
        }
    whole = {
        "parameters": sum(p.numel() * es(p) for p in params),
        "gradients": ddp_grad_factor * sum(p.numel() * es(p) for p in train),
    }
    if strategy == "ddp":
        return {**whole, "optimizer": sum(st(p, p.numel()) for p in train)}
    if zero1_grads_sharded:
        whole["gradients"] = math.ceil(whole["gradients"] / world_size)
    if zero1 == "even":
        return {**whole, "optimizer": math.ceil(sum(st(p, p.numel()) for p in train) / world_size)}
    pool = params if zero1_partition_all else train
    order = pool if zero1 == "unsorted" else sorted(pool, key=lambda t: t.numel(), reverse=True)
    sizes, held = [0] * world_size, [0] * world_size
    for i, p in enumerate(order):
        r = i % world_size if zero1 == "round_robin" else sizes.index(min(sizes))
        sizes[r] += p.numel()
        if p.requires_grad:
            held[r] += st(p, p.numel())
    return {**whole, "optimizer": held[zero1_rank] if zero1_rank is not None else max(held)}


# --- valid alternatives ------------------------------------------------------------------


def valid_ceil_and_greedy(model, strategy, world_size, optimizer):
    """The reading of section 2: chunk rows rounded up, ZeRO's sorted-greedy, max over ranks."""
    return _predict(model, strategy, world_size, optimizer)


def valid_every_rank_then_max(model, strategy, world_size, optimizer):
    """Every rank's figures worked out (meta tensors chunked as FSDP2 does, ZeRO's partition
    replayed with a heap), then the largest of each kind; itemsize from the dtype."""
    import heapq

    import torch

    def nbytes(shape, dtype):
        return math.prod(shape) * dtype.itemsize

    per_rank = [dict.fromkeys(KINDS, 0) for _ in range(world_size)]
    copies = {"sgd": 0, "momentum": 1, "adam": 2}[optimizer]
    trainable = [p for p in model.parameters() if p.requires_grad]
    if strategy == "fsdp":
        for p in model.parameters():
            pieces = torch.empty(p.shape, dtype=p.dtype, device="meta").chunk(world_size, 0)
            for rank in range(world_size):
                shape = tuple(pieces[rank].shape) if rank < len(pieces) else (0,)
                b = nbytes(shape, p.dtype)
                per_rank[rank]["parameters"] += b
                if p.requires_grad:
                    per_rank[rank]["gradients"] += b
                    per_rank[rank]["optimizer"] += copies * b + (4 if optimizer == "adam" else 0)
    else:
        for rank in range(world_size):
            per_rank[rank]["parameters"] = sum(nbytes(p.shape, p.dtype) for p in model.parameters())
            per_rank[rank]["gradients"] = sum(nbytes(p.shape, p.dtype) for p in trainable)
        if strategy == "ddp":
            for rank in range(world_size):
                per_rank[rank]["optimizer"] = sum(
                    copies * nbytes(p.shape, p.dtype) + (4 if optimizer == "adam" else 0)
                    for p in trainable
                )
        else:
            heap = [(0, rank) for rank in range(world_size)]  # (numel so far, rank): ties -> low
            for p in sorted(trainable, key=lambda t: t.numel(), reverse=True):
                numel, rank = heapq.heappop(heap)
                heapq.heappush(heap, (numel + p.numel(), rank))
                per_rank[rank]["optimizer"] += copies * nbytes(p.shape, p.dtype) + (
                    4 if optimizer == "adam" else 0
                )
    return {k: max(r[k] for r in per_rank) for k in KINDS}


def valid_negative_floor_division(model, strategy, world_size, optimizer):
    """-(-rows // n) for the ceiling; untyped_storage().nbytes() for a tensor's bytes; the ZeRO
    partition kept as lists of parameters."""
    params = list(model.parameters())
    trainable = [p for p in params if p.requires_grad]
    per_element_state = {"sgd": 0, "momentum": 1, "adam": 2}[optimizer]
    counter = 4 if optimizer == "adam" else 0

    def held(p, rows=None):
        full = p.untyped_storage().nbytes()
        if rows is None:
            return full
        return full // p.shape[0] * rows

    if strategy == "fsdp":
        rows = {id(p): -(-p.shape[0] // world_size) for p in params}
        return {
            "parameters": sum(held(p, rows[id(p)]) for p in params),
            "gradients": sum(held(p, rows[id(p)]) for p in trainable),
            "optimizer": sum(per_element_state * held(p, rows[id(p)]) + counter for p in trainable),
        }
    out = {"parameters": sum(map(held, params)), "gradients": sum(map(held, trainable))}
    if strategy == "ddp":
        out["optimizer"] = sum(per_element_state * held(p) + counter for p in trainable)
        return out
    buckets = [[] for _ in range(world_size)]
    for p in sorted(trainable, key=lambda t: t.numel(), reverse=True):
        min(buckets, key=lambda b: sum(q.numel() for q in b)).append(p)
    out["optimizer"] = max(sum(per_element_state * held(p) + counter for p in b) for b in buckets)
    return out


# --- wrong answers -----------------------------------------------------------------------


def wrong_fsdp_floor_rows(model, strategy, world_size, optimizer):
    """rows // n: the last rank's share (or an even split that assumes n divides rows)."""
    return _predict(
        model,
        strategy,
        world_size,
        optimizer,
        shard=lambda p, n: (p.shape[0] // n) * (p.numel() // p.shape[0]),
    )


def wrong_fsdp_numel_over_n(model, strategy, world_size, optimizer):
    """Each tensor flattened and split into n equal pieces: ceil(numel / n), not whole rows."""
    return _predict(
        model, strategy, world_size, optimizer, shard=lambda p, n: math.ceil(p.numel() / n)
    )


def wrong_fsdp_average_rank(model, strategy, world_size, optimizer):
    """FSDP = 1/N of everything: the whole model's bytes divided by N (the average rank)."""
    if strategy != "fsdp":
        return _predict(model, strategy, world_size, optimizer)
    whole = _predict(model, "ddp", world_size, optimizer)
    return {k: v / world_size for k, v in whole.items()}


def wrong_fsdp_grads_whole(model, strategy, world_size, optimizer):
    """Gradients left whole under FSDP2 (only parameters and state sharded)."""
    return _predict(model, strategy, world_size, optimizer, grads_sharded=False)


def wrong_fsdp_state_whole(model, strategy, world_size, optimizer):
    """Optimizer state left whole under FSDP2 (the optimizer "sees the full parameter")."""
    return _predict(model, strategy, world_size, optimizer, state_sharded=False)


def wrong_fsdp_frozen_kept_whole(model, strategy, world_size, optimizer):
    """Frozen parameters taken to stay whole under FSDP2: "only what trains is sharded"."""
    return _predict(model, strategy, world_size, optimizer, frozen_sharded=False)


def wrong_frozen_get_grads_and_state(model, strategy, world_size, optimizer):
    """requires_grad ignored: every parameter counted with a gradient and optimizer state."""
    return _predict(model, strategy, world_size, optimizer, respect_frozen=False)


def wrong_ddp_buckets_on_top(model, strategy, world_size, optimizer):
    """DDP's and ZeRO's gradient buckets counted besides the gradients (they are the same
    storage here: gradient_as_bucket_view=True)."""
    return _predict(model, strategy, world_size, optimizer, ddp_grad_factor=2)


def wrong_zero1_even_split(model, strategy, world_size, optimizer):
    """ZeRO-1 state taken as 1/N of the whole state (not balanced by whole parameters)."""
    return _predict(model, strategy, world_size, optimizer, zero1="even")


def wrong_zero1_rank0_only(model, strategy, world_size, optimizer):
    """ZeRO's greedy replayed, but rank 0's state returned, not the fullest rank's."""
    return _predict(model, strategy, world_size, optimizer, zero1_rank=0)


def wrong_zero1_unsorted_greedy(model, strategy, world_size, optimizer):
    """Greedy to the emptiest rank, but in model order: the "sorted" of sorted-greedy missed."""
    return _predict(model, strategy, world_size, optimizer, zero1="unsorted")


def wrong_zero1_round_robin(model, strategy, world_size, optimizer):
    """Parameter i to rank i % N."""
    return _predict(model, strategy, world_size, optimizer, zero1="round_robin")


def wrong_zero1_partitions_frozen(model, strategy, world_size, optimizer):
    """ZeRO's partition replayed over model.parameters(), frozen ones included (they take a
    rank's turn although they have no state)."""
    return _predict(model, strategy, world_size, optimizer, zero1_partition_all=True)


def wrong_zero1_grads_sharded(model, strategy, world_size, optimizer):
    """ZeRO-1 taken for ZeRO-2: gradients split over the ranks too."""
    return _predict(model, strategy, world_size, optimizer, zero1_grads_sharded=True)


def wrong_adam_no_step_counter(model, strategy, world_size, optimizer):
    """Adam's two moments, without the 4-byte step counter per parameter."""
    return _predict(model, strategy, world_size, optimizer, step=False)


def wrong_state_always_float32(model, strategy, world_size, optimizer):
    """Optimizer state taken to be float32 whatever the parameter's dtype (as if the
    optimizer kept master copies): right for float32 models only."""
    return _predict(model, strategy, world_size, optimizer, state_bytes=4)


def wrong_four_bytes_per_element(model, strategy, world_size, optimizer):
    """numel * 4 everywhere: right for float32 models only."""
    return _predict(model, strategy, world_size, optimizer, elem_bytes=4, state_bytes=4)


def wrong_momentum_keeps_nothing(model, strategy, world_size, optimizer):
    """SGD with momentum taken as stateless, like plain SGD."""
    return _predict(model, strategy, world_size, optimizer, momentum_state=False)


FSDP_ = r"fsdp"
ZERO = r"zero"
PREDICT = [
    case(valid_ceil_and_greedy, "passed"),
    case(valid_every_rank_then_max, "passed"),
    case(valid_negative_floor_division, "passed"),
    case(wrong_fsdp_floor_rows, names=FSDP_, not_names=r"ddp|zero"),
    case(wrong_fsdp_numel_over_n, names=FSDP_, not_names=r"ddp|zero"),
    case(wrong_fsdp_average_rank, names=FSDP_, not_names=r"ddp|zero"),
    case(wrong_fsdp_grads_whole, names=r"fsdp.*gradient|gradient.*fsdp", not_names=r"ddp|zero"),
    case(wrong_fsdp_state_whole, names=r"fsdp.*optimizer|optimizer.*fsdp", not_names=r"ddp|zero"),
    case(wrong_fsdp_frozen_kept_whole, names=r"fsdp.*param|param.*fsdp", not_names=r"ddp|zero"),
    case(wrong_frozen_get_grads_and_state, names=r"gradient|frozen|optimizer"),
    case(wrong_ddp_buckets_on_top, names=r"gradient", not_names=r"fsdp|optimizer"),
    case(wrong_zero1_even_split, names=ZERO, not_names=r"fsdp|ddp"),
    case(wrong_zero1_rank0_only, names=ZERO, not_names=r"fsdp|ddp"),
    case(wrong_zero1_unsorted_greedy, names=ZERO, not_names=r"fsdp|ddp"),
    case(wrong_zero1_round_robin, names=ZERO, not_names=r"fsdp|ddp"),
    case(wrong_zero1_partitions_frozen, names=ZERO, not_names=r"fsdp|ddp"),
    case(wrong_zero1_grads_sharded, names=r"zero.*gradient|gradient.*zero", not_names=r"fsdp"),
    case(wrong_adam_no_step_counter, names=r"optimizer|adam|step"),
    case(wrong_state_always_float32, names=r"optimizer|dtype|bfloat16|bf16"),
    case(wrong_four_bytes_per_element, names=r"bfloat16|bf16|dtype|element"),
    case(wrong_momentum_keeps_nothing, names=r"optimizer|momentum"),
]
PREDICT = in_ci(
    PREDICT, {"valid-ceil_and_greedy", "wrong-fsdp_floor_rows", "wrong-zero1_even_split"}
)


@pytest.mark.parametrize(("fn", "expect", "names", "not_names"), PREDICT)
def test_predict(fn, expect, names, not_names):
    assert_graded(grade(lesson.check_predict, fn), expect, names, not_names)


# =============================================================================================
# 13-choose-plan: the fastest plan that fits every device
# =============================================================================================

ORDER = list(lesson.PLANS.values())  # DDP, ZeRO-1, FSDP2 keep, FSDP2 reshard


def _need(s, strategy, reshard, ranks=None, batch=None):
    """A plan's peak, on the fullest of `ranks` (every rank unless told), as fake_peak measures."""
    ranks = range(s.world_size) if ranks is None else ranks
    return max(
        lesson.fake_peak(
            s.model, strategy, s.optimizer, batch or s.batch, s.world_size, reshard=reshard, rank=r
        )
        for r in ranks
    )


def _first_that_fits(s, order=ORDER, **need):
    for strategy, reshard in order:
        if _need(s, strategy, reshard, **need) <= s.device_bytes:
            return strategy, reshard
    return order[-1]


# --- valid alternatives ------------------------------------------------------------------


def valid_first_that_fits(scenario):
    """Section 4's order, the first plan whose fullest rank's peak fits."""
    return _first_that_fits(scenario)


def valid_table_then_rank(scenario):
    """Every plan's need on every rank in a table, the fitting ones ranked by how much each
    communicates; the flag returned as True for DDP and ZeRO-1 (it only matters for fsdp)."""
    cost = {("ddp", False): 0, ("zero1", False): 1, ("fsdp", False): 2, ("fsdp", True): 3}
    needs = {
        plan: [
            lesson.fake_peak(
                scenario.model,
                plan[0],
                scenario.optimizer,
                scenario.batch,
                scenario.world_size,
                reshard=plan[1],
                rank=r,
            )
            for r in range(scenario.world_size)
        ]
        for plan in cost
    }
    fitting = [
        plan for plan, need in needs.items() if all(n <= scenario.device_bytes for n in need)
    ]
    strategy, reshard = min(fitting or [("fsdp", True)], key=cost.get)
    return strategy, True if strategy != "fsdp" else reshard


def valid_fsdp_flag_from_keep_fit(scenario):
    """DDP, else ZeRO-1, else FSDP2 with reshard = "keeping does not fit"; needs from the
    plans' names in lesson.PLANS."""
    s = scenario
    for name in ("DDP", "ZeRO-1"):
        strategy, reshard = lesson.PLANS[name]
        if _need(s, strategy, reshard) <= s.device_bytes:
            return strategy, reshard
    keeps = _need(s, *lesson.PLANS["FSDP2, keep"]) <= s.device_bytes
    return "fsdp", not keeps


# --- wrong answers -----------------------------------------------------------------------


def wrong_held_not_peak(scenario):
    """Fit judged on what a rank holds after a step (exercise 1's prediction), not its peak:
    activations, scratch and gathered parameters left out."""
    s = scenario
    for strategy, reshard in ORDER:
        held = sum(_predict(s.model, strategy, s.world_size, s.optimizer).values())
        if held <= s.device_bytes:
            return strategy, reshard
    return ORDER[-1]


def wrong_rank0_only(scenario):
    """Each plan's need measured on rank 0 only (FSDP2's fullest, not always ZeRO-1's)."""
    return _first_that_fits(scenario, ranks=[0])


def wrong_last_rank_only(scenario):
    """Each plan's need measured on the last rank only."""
    return _first_that_fits(scenario, ranks=[scenario.world_size - 1])


def wrong_one_row_batch(scenario):
    """Peaks measured on a one-sample batch "to be quick": activations underestimated."""
    x, y = scenario.batch
    return _first_that_fits(scenario, batch=(x[:1], y[:1]))


def wrong_always_reshard(scenario):
    """The plan that saves the most memory, whatever fits."""
    return "fsdp", True


def wrong_always_ddp(scenario):
    """DDP whatever the device holds."""
    return "ddp", False


def wrong_fsdp_always_reshards(scenario):
    """DDP, ZeRO-1, else FSDP2 resharding: keeping the gathered parameters never considered."""
    return _first_that_fits(scenario, order=[("ddp", False), ("zero1", False), ("fsdp", True)])


def wrong_keeps_when_reshard_fits(scenario):
    """FSDP2's fit judged with resharding, then launched keeping the parameters."""
    choice = _first_that_fits(scenario, order=[("ddp", False), ("zero1", False), ("fsdp", True)])
    return ("fsdp", False) if choice[0] == "fsdp" else choice


def wrong_skips_zero1(scenario):
    """DDP, else FSDP2 (keep, then reshard): ZeRO-1 never tried."""
    return _first_that_fits(scenario, order=[("ddp", False), ("fsdp", False), ("fsdp", True)])


def wrong_returns_plan_name(scenario):
    """The right plan, returned as its name in lesson.PLANS, not (strategy, flag)."""
    choice = _first_that_fits(scenario)
    return {v: k for k, v in lesson.PLANS.items()}[choice]


FIT = r"fit|need|peak|exceed|more than"
PLAN = [
    case(valid_first_that_fits, "passed"),
    case(valid_table_then_rank, "passed"),
    case(valid_fsdp_flag_from_keep_fit, "passed"),
    case(wrong_held_not_peak, names=FIT, not_names=r"faster|all-gathers"),
    case(wrong_rank0_only, names=FIT, not_names=r"faster|all-gathers"),
    case(wrong_last_rank_only, names=FIT, not_names=r"faster|all-gathers"),
    case(wrong_one_row_batch, names=FIT, not_names=r"faster|all-gathers"),
    case(wrong_always_reshard, names=r"faster|all-gather", not_names=r"it does not fit"),
    case(wrong_always_ddp, names=FIT, not_names=r"faster|all-gathers"),
    case(wrong_fsdp_always_reshards, names=r"all-gather|keep", not_names=r"it does not fit"),
    case(wrong_keeps_when_reshard_fits, names=FIT, not_names=r"faster|all-gathers"),
    case(wrong_skips_zero1, names=r"faster|zero", not_names=r"it does not fit"),
    case(wrong_returns_plan_name, names=r"tuple|strategy|return|STRATEGIES"),
]
PLAN = in_ci(PLAN, set())


@pytest.mark.parametrize(("fn", "expect", "names", "not_names"), PLAN)
def test_plan(fn, expect, names, not_names):
    assert_graded(grade(lesson.check_plan, fn), expect, names, not_names)


# =============================================================================================
# 13-fully-shard: shard_model(model) in a file the check's workers import
# =============================================================================================

HEAD = '"""FSDP2 on the lesson\'s model (imported by the check\'s worker processes)."""\n'
IMPORT = "from torch.distributed.fsdp import fully_shard\n"


def _script(body: str, extra_imports: str = "") -> str:
    return HEAD + IMPORT + extra_imports + "\n\n" + textwrap.dedent(body).lstrip()


# --- valid alternatives ------------------------------------------------------------------

VALID_PER_LINEAR = """
def shard_model(model):
    # finer groups than the blocks: each Linear of each block, then the root (the head)
    for block in model.blocks:
        fully_shard(block.up)
        fully_shard(block.down)
    fully_shard(model)
"""

VALID_MESH_KEEP_REVERSED = """
def shard_model(model):
    # an explicit 1-D mesh over every rank, blocks found by type from the last one, and the
    # gathered parameters kept until backward
    device = "cuda" if torch.cuda.is_available() else "cpu"
    mesh = init_device_mesh(device, (dist.get_world_size(),))
    blocks = [m for m in model.modules() if isinstance(m, Block)]
    for block in reversed(blocks):
        fully_shard(block, mesh=mesh, reshard_after_forward=False)
    fully_shard(model, mesh=mesh, reshard_after_forward=False)
    return model
"""
VALID_MESH_IMPORTS = (
    "import torch\nimport torch.distributed as dist\n"
    "from torch.distributed.device_mesh import init_device_mesh\n\n"
    "from course_utils.lessons.fsdp import Block\n"
)

VALID_LIST_PER_BLOCK = """
def shard_model(model):
    # fully_shard given a list of modules: one group of each block's two layers, then the root
    for block in model.blocks:
        fully_shard([block.up, block.down])
    fully_shard(model)
"""

# --- wrong answers -----------------------------------------------------------------------

WRONG_BLOCKS_ONLY = """
def shard_model(model):
    for block in model.blocks:
        fully_shard(block)
"""

WRONG_ROOT_ONLY = """
def shard_model(model):
    fully_shard(model)
"""

WRONG_ROOT_FIRST = """
def shard_model(model):
    fully_shard(model)
    for block in model.blocks:
        fully_shard(block)
"""

WRONG_LAST_BLOCK_IN_ROOT = """
def shard_model(model):
    for i in range(len(model.blocks) - 1):
        fully_shard(model.blocks[i])
    fully_shard(model)
"""

WRONG_RETURN_IN_LOOP = """
def shard_model(model):
    for block in model.blocks:
        fully_shard(block)
        return fully_shard(model)
"""

WRONG_MODULELIST = """
def shard_model(model):
    fully_shard(model.blocks)
    fully_shard(model)
"""

WRONG_BF16_POLICY = """
def shard_model(model):
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in model.blocks:
        fully_shard(block, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
"""

WRONG_BLOCK_LAYERS_NO_ROOT = """
def shard_model(model):
    # every Linear inside the blocks: the head belongs to no group
    for block in model.blocks:
        for layer in block.children():
            fully_shard(layer)
"""

WRONG_SHARDS_A_COPY = """
def shard_model(model):
    # "don't touch the caller's model": sharded a copy and returned it
    model = copy.deepcopy(model)
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    return model
"""


def _shard_case(name, body, expect="failed", names=None, not_names=None, imports=""):
    return pytest.param(_script(body, imports), expect, names, not_names, id=name)


# "parameters differ from one process" names no cause but says what was measured: counted right
NOT_ROOT = r"head|root|group|plain|not sharded|drift|differ from one process"
GATHER = r"all-gather|gather|block|group"
SHARD = [
    _shard_case("valid-per_linear_then_root", VALID_PER_LINEAR, "passed"),
    _shard_case(
        "valid-mesh_keep_reversed", VALID_MESH_KEEP_REVERSED, "passed", imports=VALID_MESH_IMPORTS
    ),
    _shard_case("valid-list_per_block", VALID_LIST_PER_BLOCK, "passed"),
    _shard_case("wrong-blocks_only", WRONG_BLOCKS_ONLY, names=NOT_ROOT, not_names=r"order"),
    _shard_case("wrong-root_only", WRONG_ROOT_ONLY, names=GATHER, not_names=r"differ|drift|order"),
    _shard_case(
        "wrong-root_first",
        WRONG_ROOT_FIRST,
        names=r"order|bottom.up|before the root|after the root|root first|blocks first",
        not_names=r"differ|drift",
    ),
    _shard_case(
        "wrong-last_block_in_root",
        WRONG_LAST_BLOCK_IN_ROOT,
        names=GATHER,
        not_names=r"differ|drift|order",
    ),
    _shard_case(
        "wrong-return_in_loop", WRONG_RETURN_IN_LOOP, names=GATHER, not_names=r"differ|drift|order"
    ),
    _shard_case(
        "wrong-modulelist_as_one",
        WRONG_MODULELIST,
        names=r"ModuleList|container|forward|raise|error",
    ),
    _shard_case(
        "wrong-bf16_policy",
        WRONG_BF16_POLICY,
        names=r"differ|precision|bf16|bfloat16|dtype",
        not_names=r"order|gather",
        imports="import torch\nfrom torch.distributed.fsdp import MixedPrecisionPolicy\n",
    ),
    _shard_case(
        "wrong-block_layers_no_root",
        WRONG_BLOCK_LAYERS_NO_ROOT,
        names=NOT_ROOT,
        not_names=r"order",
    ),
    _shard_case(
        "wrong-shards_a_copy",
        WRONG_SHARDS_A_COPY,
        names=r"in place|not sharded|holds|sharded|copy",
        not_names=r"order",
        imports="import copy\n",
    ),
]
SHARD = in_ci(SHARD, set())


@pytest.mark.parametrize(("source", "expect", "names", "not_names"), SHARD)
def test_shard(source, expect, names, not_names, tmp_path):
    path = tmp_path / "shard.py"
    path.write_text(source, encoding="utf-8")
    assert_graded(grade(lesson.check_shard, path), expect, names, not_names)
