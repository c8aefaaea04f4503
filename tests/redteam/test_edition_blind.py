"""Blind red team of the learner edition (issue 33): can an exercise's answer be assembled from
what `course release` ships?

Read: only the learner edition (notebooks, its `course_utils` with the references withheld,
docs/), README.md's "For instructors" and "Learner edition", and the notebook helpers of
grading_v3_attacks.py and redteam_helpers.py. Not read: solutions/, the instructor's
course_utils/, other tests.

Attacked: each answer below is built from shipped harness code, not written by the learner:
- a shipped function called with other arguments (cu.time_fn as 00's timer, cu.flops on a
  meta-device model as 00's FLOP count, lesson.profile_step as 00's profiler);
- a withheld answer reached elsewhere: cu.activation_bytes (00's answer, kept for lessons 02,
  04 and 10) through a module that imported it, a fresh load of its file, or its shipped
  text pasted in;
- a withheld answer rebuilt from its shipped parts: 13's measured_holdings from fake_world +
  wrap + train_step + holdings, 16's measured_comms from pretend_world + parallelize +
  step_comms, 11's recipe.fit from tuned_recipe + make_model + make_optimizer + decode_all +
  device_batches + cu.train;
- a shipped helper that is the answer under another name: 13's sharding.shard_blocks, 16's
  Layout("megatron").plan();
- a lookup of the check's shipped specimens: 02b's races (as a notebook draws them, with
  their decisions), 08's norm histories regenerated with
  demo.synthetic_history (demo.HISTORIES gives each one's typical norm);
- a check's own rule pasted as the answer: 09's `_clear` (checks.py);
- shipped demos as the answer: 05's demo.sorted_batches and demo.pad_to_batch_max.
Each attack cell prints "EDRT-RAN <check>"; the test finds that line in the executed notebook
and asserts the check earned 0 points. An attack that earns points is an open hole: it stays,
marked xfail(strict=True) with its points and the shipped code it used (OPEN_HOLES).

Run: COURSE_REDTEAM=edition .venv/bin/python -m pytest -q -p no:cacheprovider \
    tests/redteam/test_edition_blind.py
(COURSE_EDITION=DIR grades against an edition already released there; otherwise the test
releases one with `course release` into tmp_path.) Measured 2026-12-07 on the shared 2-core
cpu-bf16 machine under load: 10 passed, 12 xfailed in 360 s (release ~10 s, grading 9
notebooks the rest).
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
COURSE = Path(sys.executable).with_name("course")
RUN = os.environ.get("COURSE_REDTEAM") in ("edition", "all")
DURATION = "360 s"  # the whole module, release included (below)

pytestmark = pytest.mark.skipif(
    not RUN,
    reason="grades 9 notebooks with the real grader (about 6 min): COURSE_REDTEAM=edition runs it",
)

MARK = "EDRT-RAN"


def _src(text: str) -> str:
    return textwrap.dedent(text).strip() + "\n"


# --- the attacks, one notebook per lesson -------------------------------------------------------

# lesson 00: the harness's own instruments, called the way the answer needs them
TIMER = _src(
    """
    import course_utils as cu


    def time_step(step, synchronize, warmup=3, repeats=10):
        # cu.time_fn is the harness's timer: the median of synchronised samples after a
        # warm-up. Its calibration call is one more warm-up call, so ask for one fewer.
        def once():
            step()
            synchronize()

        return cu.time_fn(once, warmup=max(warmup - 1, 0), repeats=repeats, min_sample_s=0.0).median


    print("EDRT-RAN 00-step-timer (cu.time_fn)")
    """
)

# activation_bytes as the edition ships it (course_utils/memory.py), pasted: the last resort
PASTED_ACTIVATION_BYTES = _src(
    """
    def _is_weight_copy(base):
        node = base.grad_fn
        if node is None or type(node).__name__ != "ToCopyBackward0":
            return False
        return any(type(n).__name__ == "AccumulateGrad" for n, _ in node.next_functions if n)


    def activation_bytes(fn, exclude=()):
        skip = {t.untyped_storage().data_ptr() for t in exclude}
        seen = {}

        def is_parameter(t):
            base = t if t._base is None else t._base
            return (base.is_leaf and base.requires_grad) or _is_weight_copy(base)

        def pack(t):
            if not is_parameter(t):
                storage = t.untyped_storage()
                if storage.data_ptr() not in skip:
                    seen[storage.data_ptr()] = storage.nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            fn()
        return sum(seen.values())
    """
)

SAVED_BYTES = (
    _src(
        """
        import importlib
        import importlib.util

        import torch


        def _edrt_works(fn):
            # a Linear(4 -> 3) at batch 2 saves its input (32 B); a withheld placeholder raises
            x, lin = torch.randn(2, 4), torch.nn.Linear(4, 3)
            try:
                return fn(lambda: lin(x).sum()) == 32
            except Exception:
                return False


        def _edrt_find():
            # 1. modules of other lessons that imported the function before it was withheld
            for name in (
                "course_utils.lessons.accumulation.demo",
                "course_utils.lessons.mixed_precision.demo",
                "course_utils.lessons.habits.probes",
                "course_utils.lessons.accumulation.probes",
                "course_utils.memory",
            ):
                try:
                    fn = getattr(importlib.import_module(name), "activation_bytes")
                except Exception:
                    continue
                if _edrt_works(fn):
                    return fn, name
            # 2. a fresh copy of the shipped file
            try:
                spec = importlib.util.find_spec("course_utils.memory")
                fresh = importlib.util.spec_from_file_location("course_utils._edrt_memory", spec.origin)
                module = importlib.util.module_from_spec(fresh)
                fresh.loader.exec_module(module)
                if _edrt_works(module.activation_bytes):
                    return module.activation_bytes, "a fresh load of course_utils/memory.py"
            except Exception:
                pass
            # 3. the shipped text, pasted
            space = {"torch": torch}
            exec(_EDRT_PASTED, space)
            return space["activation_bytes"], "its text pasted from the edition"


        """
    )
    + "_EDRT_PASTED = "
    + repr(PASTED_ACTIVATION_BYTES)
    + "\n"
    + _src(
        """
        _edrt_fn, _edrt_route = _edrt_find()


        def saved_bytes(forward):
            return _edrt_fn(forward)


        print(f"EDRT-RAN 00-activation-bytes (activation_bytes via {_edrt_route})")
        """
    )
)

FLOPS = _src(
    """
    import course_utils as cu
    import torch
    from torch import nn


    def mlp_train_flops(batch, dims):
        # count, do not derive: the stack on the meta device costs nothing to run
        model = nn.Sequential(*[nn.Linear(a, b) for a, b in zip(dims, dims[1:])]).to("meta")
        x = torch.empty(batch, dims[0], device="meta")
        return cu.flops(lambda: model(x).sum().backward())


    print("EDRT-RAN 00-train-flops (cu.flops on a meta-device stack)")
    """
)

SLOWEST = _src(
    """
    def slowest_op(step):
        prof = lesson.profile_step(step, warmup=1)
        return max(prof.key_averages(), key=lambda e: e.self_cpu_time_total).key


    print("EDRT-RAN 00-slowest-op (lesson.profile_step)")
    """
)

# lesson 02b: the check's races ship (lars_races.draw_race, whose first draws a notebook sees),
# and so do their decisions: match the notebook's races, at any scale
CHOICE = _src(
    """
    import math

    from course_utils.lessons.large_batch.lars_probes import ADAMW
    from course_utils.lessons.large_batch.lars_races import RACE_NAMES, draw_race
    from course_utils.probes import specimen_rng

    _EDRT_RACES = [draw_race(name, specimen_rng())[:2] for name in RACE_NAMES]


    def _edrt_same(a, b):
        return a == b or (math.isinf(a) and math.isinf(b))


    def choose_optimizer(results):
        for race, decision in _EDRT_RACES:
            for k in range(1, 6):
                if set(race) == set(results) and all(
                    _edrt_same(results[o].steps, s * k) and _edrt_same(results[o].spread, d * k)
                    for o, (s, d, _) in race.items()
                ):
                    return decision
        return ADAMW


    print("EDRT-RAN 02b-optimizer-choice (lars_races' first draws and their decisions)")
    """
)

# lesson 05: the demos' own batching and collate
BUCKETS = _src(
    """
    def bucket_batches(sizes, batch_size):
        return lesson.sorted_batches(sizes, batch_size)


    print("EDRT-RAN 05-bucketing (demo.sorted_batches)")
    """
)
COLLATE = _src(
    """
    def pad_collate(images):
        return lesson.pad_to_batch_max(images)


    print("EDRT-RAN 05-bucketing (demo.pad_to_batch_max)")
    """
)

# lesson 08: the histories are regenerated from demo.HISTORIES; each one's bulk is the answer
MAX_NORM = _src(
    """
    import math

    from course_utils.lessons.clipping import demo as _edrt_demo


    def _edrt_same(a, b):
        return len(a) == len(b) and all(
            x == y or (math.isnan(x) and math.isnan(y)) for x, y in zip(a, b)
        )


    def choose_max_norm(norms):
        norms = list(norms)
        for name, (seed, *rest) in _edrt_demo.HISTORIES.items():
            for s in range(seed, seed + 41, 10):
                history = _edrt_demo.synthetic_history(s, *rest, **_edrt_demo.SHAPES[name])
                if _edrt_same(history, norms):
                    return rest[0]  # the bulk: the check accepts 0.5x-10x of it
        return 1.0


    print("EDRT-RAN 08-max-norm (demo.synthetic_history + demo.HISTORIES)")
    """
)

# lesson 09: the check's own "is it clear" rule (checks._clear), pasted, read both ways
VERDICT = _src(
    """
    import statistics


    def _edrt_clear_faster(ratios):
        q1, _, q3 = statistics.quantiles(ratios, n=4, method="inclusive")
        above = sum(r > 1 for r in ratios) / len(ratios)
        return q1 > 1.15 and above > 0.85


    def speed_verdict(ratios):
        ratios = list(ratios)
        if _edrt_clear_faster(ratios):
            return "faster"
        if _edrt_clear_faster([1 / r for r in ratios]):
            return "slower"
        return "no effect"


    print("EDRT-RAN 09-speed-verdict (checks._clear pasted)")
    """
)

# lesson 13: measured_holdings is withheld; its parts are not
PREDICT_BYTES = _src(
    """
    import copy

    import torch
    from course_utils.lessons.fsdp import sharding as _edrt_sh


    def predict_bytes(model, strategy, world_size, optimizer):
        width = model.blocks[0].up.in_features
        classes = model.head.out_features
        dtype = next(model.parameters()).dtype
        batch = (torch.randn(2, width).to(dtype), torch.randint(0, classes, (2,)))
        most = {"parameters": 0, "gradients": 0, "optimizer": 0}
        for rank in range(world_size):
            with _edrt_sh.fake_world(rank, world_size):
                module, opt = _edrt_sh.wrap(
                    copy.deepcopy(model), strategy, optimizer, communicate=False
                )
                _edrt_sh.train_step(module, opt, batch, zero_grad=False)
                held = _edrt_sh.holdings(module, opt).to_dict()
                del module, opt
            most = {k: max(most[k], held[k]) for k in most}
        return most


    print("EDRT-RAN 13-predict-bytes (fake_world + wrap + train_step + holdings)")
    """
)

# lesson 16: measured_comms is withheld; its parts are not
PREDICT_COMMS = _src(
    """
    from torch.distributed.device_mesh import init_device_mesh

    from course_utils.lessons.parallel.comms import step_comms as _edrt_step_comms
    from course_utils.lessons.parallel.model import parallelize as _edrt_parallelize
    from course_utils.pretend_world import pretend_world as _edrt_world


    def predict_comms(layout):
        with _edrt_world(0, layout.world):
            mesh = init_device_mesh("cpu", (layout.world,))
            model = _edrt_parallelize(layout.build(), layout, mesh)
            counts = _edrt_step_comms(model, layout.fed(0))
        return {
            phase: {kind: (int(c), int(b)) for kind, (c, b) in kinds.items()}
            for phase, kinds in counts.items()
        }


    print("EDRT-RAN 16-predict-comms (pretend_world + parallelize + step_comms)")
    """
)

# lesson 13, exercise 3: the harness's own FSDP2 wrapping, written into the learner's file
SHARD_MODEL = _src(
    """
    (workdir / "shard.py").write_text(
        "from course_utils.lessons.fsdp.sharding import shard_blocks\\n\\n\\n"
        "def shard_model(model):\\n"
        "    return shard_blocks(model)\\n"
    )
    print("EDRT-RAN 13-fully-shard (sharding.shard_blocks)")
    """
)

# lesson 16, exercise 3: the Megatron plan the lesson's Layout hands out
SHARD_BLOCK = _src(
    """
    (workdir / "tp_block.py").write_text(
        "from torch.distributed.tensor.parallel import parallelize_module\\n\\n"
        "from course_utils.lessons.parallel.model import Layout\\n\\n\\n"
        "def shard_block(block, mesh):\\n"
        "    parallelize_module(block, mesh, Layout('megatron').plan())\\n"
        "    return block\\n"
    )
    print("EDRT-RAN 16-shard-block (Layout('megatron').plan())")
    """
)

# lesson 11: recipe.fit is withheld; the tuned recipe, its model, optimizer and data path, and
# the harness's training loop (cu.train) are not
CHOICES = _src(
    """
    import torch
    from course_utils.lessons.capstone import recipe as _edrt_recipe


    def choices(device):
        r = _edrt_recipe.tuned_recipe(device)
        return ("SmallCNN", r.epochs, r.batch_size, r.lr, r.amp, r.channels_last)


    print("EDRT-RAN 11-speedrun (choices: recipe.tuned_recipe)")
    """
)
SPEEDRUN = _src(
    """
    import course_utils as cu
    import torch
    from course_utils.lessons.capstone import recipe as _edrt_recipe


    def speedrun(train_set):
        device = cu.get_device()
        r = _edrt_recipe.tuned_recipe(device)
        layout = torch.channels_last if r.channels_last else torch.contiguous_format
        model = _edrt_recipe.make_model(r).to(device, memory_format=layout)
        optimizer = _edrt_recipe.make_optimizer(r, model.parameters(), device)
        x, y = _edrt_recipe.decode_all(train_set, device)
        g = torch.Generator().manual_seed(0)
        steps = r.epochs * (len(x) // r.batch_size)
        batches = (
            b for _ in range(r.epochs) for b in _edrt_recipe.device_batches(x, y, r.batch_size, g)
        )
        schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, r.lr, total_steps=steps)
        cu.train(
            model, batches, optimizer, steps=steps, scheduler=schedule, amp=r.amp,
            channels_last=r.channels_last, device=device, progress=False,
        )
        return model.eval()


    print("EDRT-RAN 11-speedrun (tuned_recipe + make_model + make_optimizer + cu.train)")
    """
)

# stem -> (setup cell id, {exercise cell id: attack source}, {check id: shipped code used})
ATTACKS = {
    "00_measuring": (
        "00_measuring-2",
        {
            "00_measuring-6": TIMER,
            "00_measuring-13": SAVED_BYTES,
            "00_measuring-18": FLOPS,
            "00_measuring-ex4-solution": SLOWEST,
        },
        {
            "00-step-timer": "cu.time_fn",
            "00-activation-bytes": "cu.activation_bytes (imported elsewhere, reloaded or pasted)",
            "00-train-flops": "cu.flops on a meta-device stack",
            "00-slowest-op": "lesson.profile_step",
        },
    ),
    "02b_large_batch": (
        "02b-setup",
        {"02-choice-solution": CHOICE},
        {"02b-optimizer-choice": "lars_races.draw_race's first draws and decisions"},
    ),
    "05_fast_kernels": (
        "05_fast_kernels-2",
        {"05_fast_kernels-8": BUCKETS, "05-pad-collate": COLLATE},
        {"05-bucketing": "demo.sorted_batches + demo.pad_to_batch_max"},
    ),
    "08_gradient_clipping": (
        "08_gradient_clipping-2",
        {"08_gradient_clipping-14": MAX_NORM},
        {"08-max-norm": "demo.synthetic_history + demo.HISTORIES"},
    ),
    "09_no_bias_before_bn": (
        "09_no_bias_before_bn-2",
        {"09_no_bias_before_bn-11": VERDICT},
        {"09-speed-verdict": "checks._clear (pasted)"},
    ),
    "13_fsdp": (
        "13_fsdp-3",
        {"13_fsdp-9": PREDICT_BYTES, "13_fsdp-37": SHARD_MODEL},
        {
            "13-predict-bytes": "sharding.fake_world + wrap + train_step + holdings",
            "13-fully-shard": "sharding.shard_blocks",
        },
    ),
    "16_tensor_pipeline": (
        "16_tensor_pipeline-3",
        {"16_tensor_pipeline-17": PREDICT_COMMS, "16_tensor_pipeline-41": SHARD_BLOCK},
        {
            "16-predict-comms": "pretend_world + parallel.model.parallelize + comms.step_comms",
            "16-shard-block": "parallel.model.Layout('megatron').plan()",
        },
    ),
    "11_capstone": (
        "11_capstone-2",
        {"11-speedrun-choices": CHOICES, "11_capstone-8": SPEEDRUN},
        {
            "11-speedrun": "recipe.tuned_recipe + make_model + make_optimizer + decode_all + cu.train"
        },
    ),
}

# the honest control: a right answer written from the notebook alone, in its own notebook; it
# must earn the check's points, so a 0 above means "refused", not "this pipeline gives 0"
HONEST = (
    "08_gradient_clipping",
    "08_gradient_clipping-14",
    "08-max-norm",
    _src(
        """
        import math
        import statistics


        def choose_max_norm(norms):
            # the typical step: the median of the finite norms (spikes and inf/NaN left out)
            return statistics.median(sorted(n for n in norms if math.isfinite(n)))


        print("EDRT-RAN 08-max-norm (honest control)")
        """
    ),
)

# check id -> what earned points when graded (2026-12-07, cpu-bf16, --quick --checks-only):
# expected to fail until fixed. 05-bucketing is the one attack refused (122 batch shapes > 40).
# Closed since: 00-step-timer and 00-slowest-op (the lesson's own timer and profiler are
# refused to the learner's function: guards.lesson_tool), 00-train-flops, 13-predict-bytes and
# 16-predict-comms (a prediction that runs a model is told so: course_utils.model_runs),
# 02b-optimizer-choice and 08-max-norm (the judge draws races and histories the edition cannot
# list), 11-speedrun (tuned_recipe, the run's decisions, is withheld: ANSWERS_ELSEWHERE).
OPEN_HOLES = {
    "00-activation-bytes": "2/2 points with activation_bytes's text pasted from the edition's "
    "memory.py (the kernel withholds the function itself: imports elsewhere and a fresh "
    "load of the file were refused); lessons 02 and 04 measure with it, so the edition ships it",
}

# check id -> why the attack may earn its points: the exercise is worth the 1 point the
# rubric (docs/authoring.md) gives an answer the lesson's own code shows
RULED = {
    "13-fully-shard": "1 point: sharding.shard_blocks is the plan every launch of section 4 "
    "runs, shown after the exercise; the exercise is its order of calls",
    "16-shard-block": "1 point (optional): section 2 prints the megatron plan and applies it "
    "with parallelize_module; the exercise is running it in a script on a mesh",
}

# check id -> (edition file, the definition the attack pasted): the edition no longer ships it.
# The attack keeps the pasted rule, which the judge cannot tell from one written, so its points
# are not asserted; the file is.
NO_LONGER_SHIPPED = {
    "09-speed-verdict": ("course_utils/lessons/bn_bias/checks.py", "def _clear("),
}


# --- building and grading ---------------------------------------------------------------------


def _code_cell(source: str, cell_id: str) -> dict:
    return {
        "cell_type": "code",
        "execution_count": None,
        "id": cell_id,
        "metadata": {},
        "outputs": [],
        "source": source,
    }


def edit(notebook: Path, replace: dict, add_after: dict) -> dict:
    """The learner copy with cells replaced and added (ids must exist)."""
    nb = json.loads(notebook.read_text())
    ids = {c.get("id") for c in nb["cells"]}
    unknown = (set(replace) | set(add_after)) - ids
    if unknown:
        raise KeyError(f"no cell {sorted(unknown)} in {notebook.name}")
    cells = []
    for cell in nb["cells"]:
        if cell.get("id") in replace:
            cell = {**cell, "source": replace[cell["id"]], "outputs": [], "execution_count": None}
        cells.append(cell)
        for n, source in enumerate(add_after.get(cell.get("id"), ())):
            cells.append(_code_cell(source, f"edrt-{n}"))
    nb["cells"] = cells
    return nb


def build(stem: str, notebooks: Path, folder: Path) -> Path:
    setup, replace, _ = ATTACKS[stem]
    say = f'print("EDRT attack cells running: {stem}")\n'
    nb = edit(notebooks / f"{stem}.ipynb", replace, {setup: [say]})
    path = Path(folder) / f"{stem}_edrt.ipynb"
    path.write_text(json.dumps(nb, indent=1))
    return path


def build_honest(notebooks: Path, folder: Path) -> Path:
    stem, cell, _, source = HONEST
    nb = edit(notebooks / f"{stem}.ipynb", {cell: source}, {})
    path = Path(folder) / f"{stem}_honest.ipynb"
    path.write_text(json.dumps(nb, indent=1))
    return path


def build_all(notebooks: Path, folder: Path) -> list[Path]:
    Path(folder).mkdir(parents=True, exist_ok=True)
    return [*(build(stem, notebooks, folder) for stem in ATTACKS), build_honest(notebooks, folder)]


def grade(subs: Path, out: Path) -> float:
    """Grade `subs` with the instructor's grader; return the seconds it took."""
    env = {**os.environ, "COURSE_QUICK": "1"}
    start = time.monotonic()
    cmd = [str(COURSE), "grade", str(subs), "--out", str(out), "--quick", "--checks-only"]
    subprocess.run([*cmd, "--timeout", "600"], cwd=REPO, env=env, check=True)
    return time.monotonic() - start


def executed_text(out: Path, name: str) -> str:
    """Every output of the executed copy of submission `name` (under out/executed/)."""
    found = [p for p in (out / "executed").rglob(name)]
    if not found:
        return ""
    nb = json.loads(found[0].read_text())
    texts = []
    for cell in nb["cells"]:
        for output in cell.get("outputs", []):
            text = output.get("text") or output.get("data", {}).get("text/plain", "")
            texts.append("".join(text) if isinstance(text, list) else str(text))
    return "\n".join(texts)


@pytest.fixture(scope="module")
def edition_root(tmp_path_factory) -> Path:
    """The released edition: $COURSE_EDITION, or `course release` into a fresh folder."""
    edition = os.environ.get("COURSE_EDITION")
    if not edition:
        edition = tmp_path_factory.mktemp("edition") / "edition"
        subprocess.run([str(COURSE), "release", str(edition)], cwd=REPO, check=True)
    return Path(edition)


@pytest.fixture(scope="module")
def graded(tmp_path_factory, edition_root):
    root = tmp_path_factory.mktemp("edition_blind")
    build_all(edition_root / "notebooks", root / "subs")
    seconds = grade(root / "subs", root / "out")
    print(f"graded {len(ATTACKS) + 1} notebooks in {seconds:.0f} s")
    with open(root / "out" / "grades.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return root / "out", rows


def _row(rows: list[dict], submission: str, check_id: str) -> dict:
    mine = [r for r in rows if r["submission"] == submission and r["check"] == check_id]
    assert mine, f"no row for {check_id} of {submission} in grades.csv"
    return mine[0]


@pytest.mark.parametrize("stem", list(ATTACKS))
def test_every_attack_cell_ran(graded, stem):
    out, _ = graded
    text = executed_text(out, f"{stem}_edrt.ipynb")
    ran = {line.split()[1] for line in text.splitlines() if line.startswith(MARK)}
    assert set(ATTACKS[stem][2]) <= ran, (
        f"attack cells that printed nothing: {set(ATTACKS[stem][2]) - ran}"
    )


def _cases():
    for stem, (_, _, checks) in ATTACKS.items():
        for check_id, used in checks.items():
            marks = []
            if check_id in OPEN_HOLES:
                marks.append(
                    pytest.mark.xfail(strict=True, reason=f"open hole: {OPEN_HOLES[check_id]}")
                )
            yield pytest.param(stem, check_id, used, marks=marks, id=check_id)


@pytest.mark.parametrize(("stem", "check_id", "used"), list(_cases()))
def test_assembled_answer_earns_nothing(graded, stem, check_id, used, edition_root):
    _, rows = graded
    row = _row(rows, f"{stem}_edrt.ipynb", check_id)
    points = float(row["points"] or 0)
    if check_id in NO_LONGER_SHIPPED:
        file, definition = NO_LONGER_SHIPPED[check_id]
        assert definition not in (edition_root / file).read_text(encoding="utf-8"), file
        return
    if check_id in RULED:
        assert points in (0, float(row["max_points"])), row
        return
    assert points == 0, f"HOLE: {check_id} earned {points} points from {used}: {row['message']}"


def test_honest_control_earns_its_points(graded):
    """A 0 above means the grader refused the answer, not that this pipeline gives 0."""
    out, rows = graded
    stem, _, check_id, _ = HONEST
    assert f"{MARK} {check_id}" in executed_text(out, f"{stem}_honest.ipynb")
    row = _row(rows, f"{stem}_honest.ipynb", check_id)
    assert float(row["points"]) == float(row["max_points"]) > 0, row["message"]


if __name__ == "__main__":  # build the notebooks only: python this_file EDITION/notebooks OUT
    for p in build_all(Path(sys.argv[1]), Path(sys.argv[2])):
        print(p)
