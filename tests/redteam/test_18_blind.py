"""Red team, blind, for lesson 18's checks: 18-speedrun (`check_speedrun(speedrun, my_recipe)`)
and 18-ablation (`check_ablation(my_recipe, biggest_lever)`).

Written from notebooks/18_speedrun.ipynb, README.md, docs/glossary.md and `help()` of the
lesson's public functions only (not the checks' source). Each `wrong_*` is a plausible learner
mistake with the cause its failing message must name (and, where useful, one it must not); each
`valid_*` is an answer a strong learner could write. A case is the learner's `speedrun` (or
`biggest_lever`) marked with the `my_recipe` it goes with; `prepare` is an earlier notebook cell
run just before the check. Every speed-run case trains for real (quick mode: about 50 CPU
seconds per call on a loaded 2-core machine, 4 calls and 4 baseline timings per check), so CI
runs only the cases in CI_KEEP; COURSE_REDTEAM=all runs them all.

Run: COURSE_QUICK=1 COURSE_REDTEAM=all .venv/bin/python -m pytest -q -p no:cacheprovider
tests/redteam/test_18_blind.py
Duration (2-core machine shared with a test suite and other helpers, load 3-5, 2026-12-07): CI
subset 325 s (4 cases); an ablation case 10-20 s; a speed-run case that fails at its first call
(token slots, fresh model, validation read) 1-2 min, one that runs all 4 calls 4-6 min.
"""

from __future__ import annotations

import dataclasses
import io
import multiprocessing as mp

import pytest
import torch
from redteam_helpers import assert_graded, blame, case, grade, in_ci, open_holes

import course_utils as cu
from course_utils.lessons import speedrun as lesson

pytestmark = pytest.mark.timeout(1800)

NB: dict = {}  # what the learner's notebook holds from earlier cells
CACHE: dict = {}  # a learner's module-level cache across calls


def with_recipe(my_recipe, prepare=None):
    """Marks a learner function with the `my_recipe` cell (and earlier cell) it goes with."""

    def mark(fn):
        fn.my_recipe = my_recipe
        fn.prepare = prepare or (lambda: None)
        return fn

    return mark


# ---- the learner's recipes and loop -----------------------------------------------------------


def reference_like(device):
    """Packed rows, SDPA, twice the rows at a higher peak with warm-up and cosine; fp32 on a
    CPU (lesson 04: bf16 autocast does not pay for matmuls this small)."""
    return lesson.Recipe(
        steps=1200, rows=16, lr=0.004, schedule=True, attention="sdpa", packing=True
    )


def foreach_mix(device):
    """Another mix: the reference's levers plus foreach AdamW (lesson 10). (1,000 steps at peak
    0.005 missed the target, 1.482; peak 0.003 passed at 1.447, too near the 1.45 target.)"""
    return lesson.Recipe(
        steps=1200,
        rows=16,
        lr=0.004,
        schedule=True,
        attention="sdpa",
        packing=True,
        fused_optimizer=True,
    )


def too_few_steps(device):
    """The reference's levers for a third of its steps: the loss stops short of the target."""
    return dataclasses.replace(reference_like(device), steps=400)


def baseline_recipe(device):
    return lesson.BASELINE


def with_checkpointing(device):
    return dataclasses.replace(reference_like(device), checkpointing=True)


def with_bf16(device):
    return dataclasses.replace(reference_like(device), amp=True)


def with_foreach(device):
    return dataclasses.replace(reference_like(device), fused_optimizer=True)


def train(recipe, text, seed=0, data_recipe=None, cut=None, on_step=None, model=None):
    """The loop the exercise asks for: a fresh model, the recipe's steps, its rate per step.
    `data_recipe` draws the batches from another recipe; `cut` keeps the rows' first slots."""
    torch.manual_seed(seed)
    device = cu.get_device()
    if model is None:
        model = lesson.make_model(recipe, device)
    step_fn = torch.compile(model) if recipe.compile else model
    opt = lesson.make_optimizer(recipe, model.parameters(), device)
    data = lesson.batches(data_recipe or recipe, text, torch.Generator().manual_seed(seed))
    model.train()
    for step in range(recipe.steps):
        tokens, targets = (t.to(device) for t in next(data))
        if cut is not None:
            tokens, targets = tokens[:, :cut], targets[:, :cut]
        for group in opt.param_groups:
            group["lr"] = lesson.rate(recipe, step)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=recipe.amp):
            logits = step_fn(tokens)
        loss = lesson.lm_loss(logits, targets)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if on_step is not None and on_step(step, model, loss):
            break
    return model.eval()


# ---- wrong speed-runs ---------------------------------------------------------------------------


@with_recipe(too_few_steps)
def wrong_stops_before_target(text):
    """A third of the reference's steps, trained exactly: fast, but short of the target."""
    return train(too_few_steps(None), text)


@with_recipe(reference_like)
def wrong_validation_early_stop(text):
    """Stops as soon as the validation loss reaches the target: tunes the run to the
    validation text (the rules forbid reading it)."""

    def done(step, model, loss):
        return step % 200 == 199 and lesson.validation_loss(model) < lesson.TARGET

    return train(reference_like(None), text, on_step=done)


def _grab_validation():
    NB["val"] = lesson.text.validation_docs()


@with_recipe(reference_like, prepare=_grab_validation)
def wrong_trains_on_validation(text):
    """Took the validation documents in an earlier cell and packs them into its training
    text too ("more data"): the run has seen what it is scored on."""
    docs = [text[i] for i in range(len(text))] + list(NB["val"])
    return train(reference_like(None), docs)


@with_recipe(reference_like)
def wrong_claims_more_rows(text):
    """Its recipe says 16 rows a step (the rate is tuned for them); its batches have 8: it
    trains half the token slots it claims."""
    recipe = reference_like(None)
    return train(recipe, text, data_recipe=dataclasses.replace(recipe, rows=8))


@with_recipe(reference_like)
def wrong_shorter_rows(text):
    """Keeps each row's first 64 slots "to look fast": half the slots per step."""
    return train(reference_like(None), text, cut=64)


@with_recipe(reference_like)
def wrong_stops_on_training_loss(text):
    """Stops once a step's training loss falls under the target: fewer steps than its recipe
    says, and a training loss is not the validation loss."""
    return train(reference_like(None), text, on_step=lambda s, m, loss: loss.item() < 1.45)


@with_recipe(baseline_recipe)
def wrong_just_the_baseline(text):
    """The baseline recipe through the learner's own loop: reaches the target, no faster."""
    return train(baseline_recipe(None), text)


@with_recipe(reference_like)
def wrong_plain_text_from_notebook(text):
    """Trains on the notebook's global `text` (the plain training text), not its argument."""
    return train(reference_like(None), NB.setdefault("text", lesson.training_text()))


@with_recipe(reference_like)
def wrong_kept_model(text):
    """Keeps the first call's trained model in a global and returns it again."""
    if "model" not in CACHE:
        CACHE["model"] = train(reference_like(None), text)
    return CACHE["model"]


@with_recipe(reference_like)
def wrong_cached_documents(text):
    """Copies the documents once into a list cached by their count (so the loop reads a list,
    not the watched text): later calls train on the first call's cipher."""
    key = ("docs", len(text))
    if key not in CACHE:
        CACHE[key] = [text[i] for i in range(len(text))]
    return train(reference_like(None), CACHE[key])


@with_recipe(reference_like)
def wrong_warm_start(text):
    """Starts each call from the previous call's weights, then trains the full recipe."""
    recipe = reference_like(None)
    model = lesson.make_model(recipe, cu.get_device())
    if "state" in CACHE:
        model.load_state_dict(CACHE["state"])
    model = train(recipe, text, model=model)
    CACHE["state"] = {k: v.clone() for k, v in model.state_dict().items()}
    return model


def _child(text, conn):
    torch.set_num_threads(1)
    buf = io.BytesIO()  # bytes, not tensors: a pipe shares tensors through files
    torch.save(train(reference_like(None), text).state_dict(), buf)
    conn.send_bytes(buf.getvalue())


@with_recipe(reference_like)
def wrong_trains_in_child_process(text):
    """Trains in a forked child process and loads its weights: the work runs outside the
    process whose CPU seconds are timed."""
    parent, child = mp.get_context("fork").Pipe()
    proc = mp.get_context("fork").Process(target=_child, args=(text, child))
    proc.start()
    state = torch.load(io.BytesIO(parent.recv_bytes()))
    proc.join()
    model = lesson.make_model(reference_like(None), cu.get_device())
    model.load_state_dict(state)
    return model.eval()


# ---- valid speed-runs ---------------------------------------------------------------------------


@with_recipe(reference_like)
def valid_reference_levers(text):
    """Packing, SDPA, 16 rows with warm-up and cosine, the loop the exercise describes."""
    return train(reference_like(None), text)


@with_recipe(foreach_mix)
def valid_foreach_mix(text):
    """Another mix: foreach AdamW, a different seed."""
    return train(foreach_mix(None), text, seed=1)


@with_recipe(reference_like)
def valid_own_holdout(text):
    """Holds out every 20th training document and reports its loss after training (never the
    validation text): the full recipe is still trained on the rest."""
    keep = [text[i] for i in range(len(text)) if i % 20]
    model = train(reference_like(None), keep)
    held = [text[i] for i in range(0, len(text), 20)][:20]
    with torch.no_grad():
        for doc in held:
            x = doc[: lesson.row_len()].unsqueeze(0)
            lesson.lm_loss(model(x[:, :-1]), x[:, 1:])
    return model


VALID_AT = r"target|validation|loss"
SLOTS = r"slot|token"
FRESH = r"fresh|kept|earlier|previous|weights|state_dict|source|built"
VAL_SEEN = r"(read|used|trained on|saw)\W.{0,40}validation (text|doc)|held.out|test split"
CIPHER = r"cipher|plain|another"
NOT_CHEAT = r"fresh|slot|plain|another cipher|validation text, through"  # a rule broken

SPEEDRUN_CASES = [
    case(wrong_stops_before_target, names=r"target|loss", not_names=NOT_CHEAT),
    case(wrong_validation_early_stop, names=r"validation", not_names=r"image|train_set|slot"),
    case(wrong_trains_on_validation, names=VAL_SEEN, not_names=r"slot"),
    case(wrong_claims_more_rows, names=SLOTS, not_names=r"cipher|fresh"),
    case(wrong_shorter_rows, names=SLOTS, not_names=r"cipher|fresh"),
    case(wrong_stops_on_training_loss, names=SLOTS + r"|steps", not_names=r"cipher|fresh"),
    case(
        wrong_just_the_baseline, names=r"faster|time|speed|\dx", not_names=r"fresh|cipher|declares"
    ),
    case(wrong_plain_text_from_notebook, names=CIPHER, not_names=r"slot"),
    case(wrong_kept_model, names=FRESH, not_names=r"slot"),
    case(wrong_cached_documents, names=CIPHER, not_names=r"slot"),
    case(wrong_warm_start, names=FRESH, not_names=r"slot"),
    case(wrong_trains_in_child_process, names=r"process|child|fresh|weights|source|time"),
    case(valid_reference_levers, expect="passed"),
    case(valid_foreach_mix, expect="passed"),
    case(valid_own_holdout, expect="passed"),
]
# CI leaves every speed-run case to COURSE_REDTEAM=all (1-10 min each: the check trains and
# times the baseline); tests/test_lesson_18.py grades the speed-run in CI
SPEEDRUN_KEEP: set[str] = set()
# closed after the round: the held-out message speaks of this lesson's documents and text
SPEEDRUN_HOLES = {
    "wrong-trains_on_validation": "caught only by its loss: 'the median of your 3 runs' models "
    "scores 1.452 nats/byte ... the target is 1.45'; the validation documents it trained on "
    "(read in an earlier cell) go unnamed",
}


# ---- the ablation: biggest_lever with the my_recipe it goes with ------------------------------


@with_recipe(reference_like)
def valid_packing(device=None):
    """A quarter of the baseline's slots were padding; packing removes that waste."""
    return "packing"


@with_recipe(reference_like)
def valid_attention(device=None):
    """At T = 128 the (T, T) scores written and read back are a large share of a step."""
    return "attention"


@with_recipe(reference_like)
def wrong_not_in_recipe(device=None):
    """bf16 autocast, from lesson 04, though the recipe leaves amp off."""
    return "amp"


@with_recipe(reference_like)
def wrong_schedule(device=None):
    """The schedule: the notebook says a timing run cannot rank it."""
    return "schedule"


@with_recipe(reference_like)
def wrong_kernel_name(device=None):
    """The kernel's name, not the lever's: the recipe field is `attention`."""
    return "sdpa"


@with_recipe(reference_like)
def wrong_ranking_tuple(device=None):
    """The whole guessed ranking instead of one name."""
    return ("packing", "attention", "fused_optimizer")


@with_recipe(with_checkpointing)
def wrong_checkpointing(device=None):
    """Checkpointing in the recipe, named as the biggest lever: it costs time, undone it is
    faster."""
    return "checkpointing"


@with_recipe(with_bf16)
def wrong_bf16_on_cpu(device=None):
    """bf16 autocast in the recipe on a CPU, named biggest: lesson 04's GPU result copied."""
    return "amp"


@with_recipe(with_foreach)
def wrong_foreach(device=None):
    """The optimizer kernel, guessed: ~100k parameters' update is a small share of a step."""
    return "fused_optimizer"


@with_recipe(baseline_recipe)
def wrong_baseline_recipe(device=None):
    """The baseline has no lever to undo; the answer is copied from the hint."""
    return "packing"


@with_recipe(reference_like)
def wrong_measures_instead_of_predicting(device=None):
    """Times the ablation itself (lesson.measure) and returns its top lever: not a prediction
    made before anything is timed."""
    costs = lesson.measure(reference_like(None))
    return max(costs, key=costs.get)


ABLATION_CASES = [
    case(wrong_not_in_recipe, names=r"amp|recipe|sets|lever"),
    case(wrong_schedule, names=r"schedule|rank|not .*lever|list"),
    case(wrong_kernel_name, names=r"sdpa|attention|lever|name"),
    case(wrong_ranking_tuple, names=r"not a lever|name|str|one|tuple"),
    case(wrong_checkpointing, names=r"checkpoint|faster|cost|rank"),
    case(wrong_bf16_on_cpu, names=r"amp|faster|cost|rank"),
    case(wrong_foreach, names=r"fused_optimizer|rank|packing|attention"),
    case(wrong_baseline_recipe, names=r"baseline|no lever|recipe|packing"),
    case(wrong_measures_instead_of_predicting, names=r"measur|predict|timed|before"),
    case(valid_packing, expect="passed"),
    case(valid_attention, expect="passed"),
]
ABLATION_KEEP = {"wrong-schedule", "valid-packing"}
# closed after the round: lesson.measure refuses while biggest_lever is asked (ablate.PREDICTING)
ABLATION_HOLES: dict = {}


@pytest.fixture(scope="module", autouse=True)
def quick_mode():
    cu.setup(True)
    yield


@pytest.fixture(autouse=True)
def fresh_notebook():
    NB.clear()
    CACHE.clear()
    yield
    NB.clear()
    CACHE.clear()


@pytest.mark.parametrize(
    "fn, expect, names, not_names",
    open_holes(in_ci(SPEEDRUN_CASES, SPEEDRUN_KEEP), SPEEDRUN_HOLES),
)
def test_check_speedrun(fn, expect, names, not_names):
    fn.prepare()
    result = grade(lesson.check_speedrun, fn, fn.my_recipe)
    print(f"VERDICT {fn.__name__}: {result.status}: {blame(result)}")
    assert_graded(result, expect, names, not_names)


@pytest.mark.parametrize(
    "fn, expect, names, not_names",
    open_holes(in_ci(ABLATION_CASES, ABLATION_KEEP), ABLATION_HOLES),
)
def test_check_ablation(fn, expect, names, not_names):
    fn.prepare()
    result = grade(lesson.check_ablation, fn.my_recipe, fn)
    print(f"VERDICT {fn.__name__}: {result.status}: {blame(result)}")
    assert_graded(result, expect, names, not_names)
