"""Red team v4 (blind) for 06-ddp-script, written from notebook 06 alone.

Exercise 1: fix a colleague's two-file torchrun script (`ddp_setup.py`, `ddp_train.py`) so
that it trains exactly as one process on the same global batches of `cfg.batch_size`, lets
the ranks together see every sample once per epoch in a new order each epoch, leaves a
checkpoint `{"model", "epoch"}` from rank 0 alone that a plain `workload.make_model()`
loads, and shuts its process group down even when training raises. Each case edits the
colleague's files (`colleague.colleague_scripts()`, the notebook's starting cells) the way a
learner would, by text replacement or by a redefinition under "Your fixes", and gives the
verdict it deserves and, for a wrong answer, the cause the failing parts must name and the
causes they must not name. Every case launches torchrun twice (the run and the failing
run): slow (`SLOW`, COURSE_REDTEAM_SLOW=1).
"""

from __future__ import annotations

import pytest
from redteam_helpers import SLOW, assert_verdict, run_check

from course_utils.lessons import distributed as lesson
from course_utils.lessons.distributed.colleague import colleague_scripts

pytestmark = SLOW

# --- the colleague's files and a learner's edits ------------------------------------------

BATCH = (
    "loader = DataLoader(data, batch_size=cfg.batch_size, sampler=sampler)",
    "loader = DataLoader(data, batch_size=cfg.batch_size // world, sampler=sampler)",
)
EPOCH = (
    "            loss = train_epoch(model, loader, optimizer, device)",
    "            sampler.set_epoch(epoch)\n"
    "            loss = train_epoch(model, loader, optimizer, device)",
)
KEYS = (
    'torch.save({"model": model.state_dict(), "epoch": epoch}, cfg.checkpoint)',
    'torch.save({"model": model.module.state_dict(), "epoch": epoch}, cfg.checkpoint)',
)
FIXES = (BATCH, EPOCH, KEYS)


def _edit(text: str, edits) -> str:
    for old, new in edits:
        assert old in text, f"the case's edit does not apply: {old!r}"
        text = text.replace(old, new, 1)
    return text


def script(tmp_path, edits=FIXES, setup_tail: str = "", train_tail: str = ""):
    """Write the colleague's files with `edits` applied (each to the file it matches) and a
    learner's redefinitions appended under 'Your fixes'; return ddp_train.py's path."""
    files = colleague_scripts()
    setup, train = files["ddp_setup.py"], files["ddp_train.py"]
    for old, new in edits:
        if old in setup:
            setup = _edit(setup, [(old, new)])
        else:
            train = _edit(train, [(old, new)])
    guard = '\n\nif __name__ == "__main__":'
    head, _, main_guard = train.partition(guard)
    train = head + "\n\n# Your fixes\n" + train_tail + guard + main_guard
    setup = setup + "\n\n# Your fixes\n" + setup_tail
    (tmp_path / "ddp_setup.py").write_text(setup, encoding="utf-8")
    (tmp_path / "ddp_train.py").write_text(train, encoding="utf-8")
    return tmp_path / "ddp_train.py"


# --- valid alternatives -------------------------------------------------------------------

SETUP_RAW_FIRST = '''
def setup(cfg: workload.Config):
    """The optimizer is built on the plain model's parameters, before DDP wraps it (DDP
    registers the same Parameter objects, so nothing changes)."""
    backend, device, device_ids = device_for(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group(backend, timeout=timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    raw = workload.make_model().to(device)
    optimizer = workload.make_optimizer(raw.parameters(), cfg.lr)
    model = DDP(raw, device_ids=device_ids)
    data = workload.make_dataset()
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, seed=cfg.seed, shuffle=True)
    loader = DataLoader(data, batch_size=cfg.batch_size // world, sampler=sampler)
    return rank, device, model, loader, sampler, optimizer
'''

TRAIN_RAW_FIRST = """
def main(cfg: workload.Config) -> None:
    rank, device, model, loader, sampler, optimizer = setup(cfg)
    try:
        for epoch in range(cfg.epochs):
            sampler.set_epoch(epoch)
            loss = train_epoch(model, loader, optimizer, device)
            if rank == 0:
                torch.save({"model": model.module.state_dict(), "epoch": epoch}, cfg.checkpoint)
    finally:
        dist.destroy_process_group()
"""

TRAIN_STRIP_SAVE_AT_END = '''
def main(cfg: workload.Config) -> None:
    """Strips DDP's `module.` prefix by hand and saves once, after the last epoch."""
    rank, device, model, loader, sampler = setup(cfg)
    optimizer = workload.make_optimizer(model.parameters(), cfg.lr)
    try:
        epoch = -1
        for epoch in range(cfg.epochs):
            sampler.set_epoch(epoch)
            train_epoch(model, loader, optimizer, device)
        dist.barrier()
        if rank == 0:
            state = {k.removeprefix("module."): v for k, v in model.state_dict().items()}
            torch.save({"model": state, "epoch": epoch}, cfg.checkpoint)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
'''

# --- wrong answers ------------------------------------------------------------------------

TRAIN_DESTROY_AFTER_LOOP = """
def main(cfg: workload.Config) -> None:
    rank, device, model, loader, sampler = setup(cfg)
    optimizer = workload.make_optimizer(model.parameters(), cfg.lr)
    for epoch in range(cfg.epochs):
        sampler.set_epoch(epoch)
        loss = train_epoch(model, loader, optimizer, device)
        if rank == 0:
            torch.save({"model": model.module.state_dict(), "epoch": epoch}, cfg.checkpoint)
    dist.destroy_process_group()
"""

TRAIN_LOSS_TIMES_WORLD = '''
def train_epoch(model, loader, optimizer, device) -> torch.Tensor:
    """'DDP averages, so multiply by the world size to get the sum of the global batch.'"""
    for x, y in loader:
        loss = F.cross_entropy(model(x.to(device)), y.to(device)) * dist.get_world_size()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return loss
'''

TRAIN_SUM_OVER_GLOBAL = '''
def train_epoch(model, loader, optimizer, device) -> torch.Tensor:
    """'cfg.batch_size is the global batch: sum the local losses, divide by it.' (DDP then
    averages over ranks too: half the gradient.)"""
    for x, y in loader:
        out = model(x.to(device))
        n = len(x) * dist.get_world_size()  # the global batch
        loss = F.cross_entropy(out, y.to(device), reduction="sum") / n
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return loss
'''

TRAIN_OPTIMIZER_ON_A_FRESH_MODEL = '''
def main(cfg: workload.Config) -> None:
    """'Build the optimizer on the plain model, not on the DDP wrapper': on a new one."""
    rank, device, model, loader, sampler = setup(cfg)
    optimizer = workload.make_optimizer(workload.make_model().to(device).parameters(), cfg.lr)
    try:
        for epoch in range(cfg.epochs):
            sampler.set_epoch(epoch)
            loss = train_epoch(model, loader, optimizer, device)
            if rank == 0:
                torch.save({"model": model.module.state_dict(), "epoch": epoch}, cfg.checkpoint)
    finally:
        dist.destroy_process_group()
'''

EPOCH_CONSTANT = (EPOCH[0], "            sampler.set_epoch(cfg.seed)\n" + EPOCH[0])
EPOCH_AFTER = (EPOCH[0], EPOCH[0] + "\n            sampler.set_epoch(epoch)")
EPOCH_SHIFTED = (EPOCH[0], "            sampler.set_epoch(epoch + 1)\n" + EPOCH[0])
SAMPLER = "sampler = DistributedSampler(data, num_replicas=world, rank=rank, seed=cfg.seed)"
NO_SHUFFLE = (SAMPLER, SAMPLER[:-1] + ", shuffle=False)")
SEED_PER_RANK = (SAMPLER, SAMPLER.replace("seed=cfg.seed", "seed=cfg.seed + rank"))
NO_SAMPLER = (
    "    loader = DataLoader(data, batch_size=cfg.batch_size, sampler=sampler)",
    "    loader = DataLoader(data, batch_size=cfg.batch_size // world, shuffle=True)\n"
    "    sampler = None",
)
DROP_LAST = (BATCH[0], BATCH[1][:-1] + ", drop_last=True)")
SAVE_EVERY_RANK = (
    "            if rank == 0:  # every rank holds the same weights: one of them writes\n"
    '                print(f"epoch {epoch}: loss {loss.item():.4f}", flush=True)\n'
    "                torch.save(",
    '            print(f"epoch {epoch}: loss {loss.item():.4f}", flush=True)\n'
    "            torch.save(",
)
DESTROY_RANK0 = (
    "        dist.destroy_process_group()",
    "        if rank == 0:\n            dist.destroy_process_group()",
)

# causes, as regexes over the failing parts. Corrected after the first run (the regexes were
# wrong, not the check): ORDER's "same .*epoch" matched "same parameters as one process: ...
# of the epoch", SAVE_CAUSE's "rank 0" matched "rank 0 saw its samples in the same order",
# KEYS_CAUSE's "load" would match "DataLoader", and BATCH_CAUSE missed the right cause, "each
# rank used the global batch size 32, so the global batch became 64; give each DataLoader
# batch_size // world_size".
ORDER = r"set_epoch|same order|shuffl"
KEYS_CAUSE = r"module\.|prefix|plain model"
BATCH_CAUSE = r"doubl|global batch (size|became)|batch_size // world|per rank.*batch"
SAVE_CAUSE = r"torch\.save|writer"
SHUTDOWN = r"destroy|shut|finally|process group"
PARAMS = r"param|differ|one process"
SCALE = r"sum|averag|scale|factor|half|x ?2|2 ?x|×"

# name -> (edits, setup_tail, train_tail, expected, cause, not causes)
CASES = {
    "valid-fixed_in_place": (FIXES, "", "", "passed", None, ()),
    "valid-optimizer_before_wrapping": ((), SETUP_RAW_FIRST, TRAIN_RAW_FIRST, "passed", None, ()),
    "valid-strip_prefix_save_at_end": ((BATCH,), "", TRAIN_STRIP_SAVE_AT_END, "passed", None, ()),
    "valid-set_epoch_shifted": ((BATCH, EPOCH_SHIFTED, KEYS), "", "", "passed", None, ()),
    "wrong-batch_only": (
        (BATCH,),
        "",
        "",
        "failed",
        rf"(?s)(?=.*({ORDER}))(?=.*({KEYS_CAUSE}))",
        (BATCH_CAUSE, SAVE_CAUSE),
    ),
    "wrong-keys_left": ((BATCH, EPOCH), "", "", "failed", KEYS_CAUSE, (BATCH_CAUSE, ORDER)),
    "wrong-batch_left": ((EPOCH, KEYS), "", "", "failed", BATCH_CAUSE, (KEYS_CAUSE, ORDER)),
    "wrong-set_epoch_constant": (
        (BATCH, EPOCH_CONSTANT, KEYS),
        "",
        "",
        "failed",
        ORDER,
        (BATCH_CAUSE, KEYS_CAUSE, SAVE_CAUSE),
    ),
    "wrong-set_epoch_after_the_epoch": (
        (BATCH, EPOCH_AFTER, KEYS),
        "",
        "",
        "failed",
        ORDER,
        (BATCH_CAUSE, KEYS_CAUSE, SAVE_CAUSE),
    ),
    "wrong-no_shuffle": (
        (BATCH, EPOCH, KEYS, NO_SHUFFLE),
        "",
        "",
        "failed",
        ORDER,
        (BATCH_CAUSE, KEYS_CAUSE),
    ),
    "wrong-seed_per_rank": (
        (BATCH, EPOCH, KEYS, SEED_PER_RANK),
        "",
        "",
        "failed",
        r"seed|other rank|both ranks|overlap|every sample|once|share",
        (BATCH_CAUSE, KEYS_CAUSE, SAVE_CAUSE),
    ),
    "wrong-no_distributed_sampler": (
        (NO_SAMPLER, KEYS),
        "",
        "",
        "failed",
        r"DistributedSampler|all the data|every sample|samples per rank|share|once",
        (KEYS_CAUSE, SAVE_CAUSE),
    ),
    "wrong-loader_drop_last": (
        (DROP_LAST, EPOCH, KEYS),
        "",
        "",
        "failed",
        r"drop_last|every sample",
        (KEYS_CAUSE,),
    ),
    "wrong-saves_from_every_rank": (
        (*FIXES, SAVE_EVERY_RANK),
        "",
        "",
        "failed",
        SAVE_CAUSE,
        (BATCH_CAUSE, KEYS_CAUSE, ORDER, SHUTDOWN),
    ),
    "wrong-destroy_after_loop": (
        FIXES,
        "",
        TRAIN_DESTROY_AFTER_LOOP,
        "failed",
        SHUTDOWN,
        (BATCH_CAUSE, KEYS_CAUSE, ORDER, SAVE_CAUSE),
    ),
    "wrong-destroy_on_rank0_only": (
        (*FIXES, DESTROY_RANK0),
        "",
        "",
        "failed",
        SHUTDOWN,
        (BATCH_CAUSE, KEYS_CAUSE, ORDER),
    ),
    "wrong-loss_times_world": (
        FIXES,
        "",
        TRAIN_LOSS_TIMES_WORLD,
        "failed",
        SCALE,
        (BATCH_CAUSE, KEYS_CAUSE, ORDER, SHUTDOWN),
    ),
    "wrong-sum_over_global_batch": (
        FIXES,
        "",
        TRAIN_SUM_OVER_GLOBAL,
        "failed",
        rf"{SCALE}|{PARAMS}",
        (BATCH_CAUSE, KEYS_CAUSE, ORDER, SHUTDOWN),
    ),
    # "save after" added after the first run (tightened, as 05 compile_if_faster was): the
    # script saves after the epoch's last step; its weights never move because the optimizer
    # steps another model, so a save-timing fix is a cause it does not have
    "wrong-optimizer_on_a_fresh_model": (
        FIXES,
        "",
        TRAIN_OPTIMIZER_ON_A_FRESH_MODEL,
        "failed",
        PARAMS,
        (BATCH_CAUSE, KEYS_CAUSE, ORDER, SHUTDOWN, r"save after"),
    ),
}


# Found by this round and fixed (issue 26 follow-up): "wrong-loader_drop_last" (the check's
# global batch is now 24, so each rank's 64 samples end every epoch with a smaller batch that
# drop_last loses) and "wrong-optimizer_on_a_fresh_model" (a checkpoint written after the
# training forwards that still holds the initial weights is told the weights never moved).
# Still open, strict: a fix turns them into failures that ask to remove the mark.
HOLES: dict[str, str] = {}
PARAMS_BY_ID = [
    pytest.param(
        name,
        id=name,
        marks=[pytest.mark.xfail(strict=True, reason=f"open hole: {HOLES[name]}")]
        if name in HOLES
        else [],
    )
    for name in CASES
]


@pytest.mark.parametrize("case", PARAMS_BY_ID)
def test_ddp_script(case, tmp_path):
    edits, setup_tail, train_tail, expect, cause, not_causes = CASES[case]
    path = script(tmp_path, edits, setup_tail, train_tail)
    verdict = run_check(lesson.check_ddp_script, path)
    print(f"{case}: {verdict.status}: {verdict.failing}")  # shown with -rP
    assert_verdict(verdict, expect, cause, not_causes)
