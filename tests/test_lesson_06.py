"""Lesson 06's checks launch real torchrun jobs: they pass the notebook's solution scripts,
name each realistic mistake, accept valid alternatives, and never hang.

The scripts under test are the `%%writefile` cells of solutions/06_ddp.ipynb (and of the
learner copy that `course assign` makes of it), so the tests grade what learners see.
Every launch costs a few seconds (three Python processes importing torch).
"""

from __future__ import annotations

import functools
import pickle
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch
from check_helpers import failure, status_of

from course_utils.authoring import learner_copy, read
from course_utils.lessons import distributed as lesson
from course_utils.lessons.distributed import checks as lesson_checks
from course_utils.lessons.distributed import ending, learner_runs
from course_utils.lessons.distributed import workload as lesson_workload
from course_utils.lessons.distributed.colleague import MAIN_GUARD, colleague_scripts
from course_utils.lessons.distributed.judge import RankFailed, judge_parameters, judge_trace
from course_utils.lessons.distributed.launch import Launch
from course_utils.lessons.distributed.reference_scripts import written_by

NOTEBOOK = Path(__file__).resolve().parents[1] / "solutions" / "06_ddp.ipynb"
scripts = written_by  # file name -> what a notebook's %%writefile cells write into it


SOLUTION = scripts(read(NOTEBOOK))


def write(folder: Path, files: dict[str, str], **edits: tuple[str, str]) -> Path:
    """Write the scripts into `folder`, applying edits `file_stem=(old, new)`; each `old`
    must occur, so a test cannot silently stop testing its mistake."""
    files = dict(files)
    for stem, (old, new) in edits.items():
        name = f"{stem}.py"
        assert old in files[name], f"{old!r} is no longer in {name}"
        files[name] = files[name].replace(old, new)
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


def survivors(folder: Path, wait_s: float) -> list:
    """Live processes whose command line names `folder`, after waiting up to `wait_s`."""
    deadline = time.monotonic() + wait_s
    while True:
        alive = []
        for p in psutil.process_iter(["cmdline", "status"]):
            cmd = " ".join(p.info["cmdline"] or [])
            if str(folder) in cmd and p.info["status"] != psutil.STATUS_ZOMBIE:
                alive.append(p)
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.5)


def ddp_failure(tmp_path, **edits):
    folder = write(tmp_path, {k: v for k, v in SOLUTION.items() if k != "accumulate.py"}, **edits)
    return failure(lesson.check_ddp_script, folder / "ddp_train.py")


# --- exercise 1: the DDP script ---------------------------------------------------------


def test_the_notebook_writes_three_scripts():
    assert set(SOLUTION) == {"ddp_setup.py", "ddp_train.py", "accumulate.py"}


def test_ddp_check_passes_the_solution_script(tmp_path):
    folder = write(tmp_path, SOLUTION)
    result = lesson.check_ddp_script(folder / "ddp_train.py")
    assert result.status == "passed", result.message
    parts = {p.name: p for p in result.parts}
    assert parts["same parameters as one process"].value <= lesson.THRESHOLDS["param_atol"].value
    # the one-process run's training was made to fail, and the script still shut down
    assert parts["shuts the process group down"].status == "passed"
    assert parts["checkpoint loads into a plain model"].status == "passed"


MAIN = SOLUTION["ddp_train.py"]
LOOP = MAIN[MAIN.rindex("    try:") : MAIN.rindex("### END SOLUTION")]  # the fixed main's


def test_ddp_check_passes_a_valid_alternative(tmp_path):
    """Sampler from the process group's defaults, the bare state dict saved once after
    training, the shutdown in an `except` that re-raises and after the loop: all fine."""
    folder = write(
        tmp_path,
        SOLUTION,
        ddp_setup=(
            "DistributedSampler(data, num_replicas=world, rank=rank, seed=cfg.seed)",
            "DistributedSampler(data, seed=cfg.seed, drop_last=True)",
        ),
        ddp_train=(
            LOOP,
            "    try:\n"
            "        for epoch in range(cfg.epochs):\n"
            "            sampler.set_epoch(epoch)\n"
            "            train_epoch(model, loader, optimizer, device)\n"
            "        if dist.get_rank() == 0:\n"
            "            torch.save(model.module.state_dict(), cfg.checkpoint)\n"
            "    except BaseException:\n"
            "        dist.destroy_process_group()\n"
            "        raise\n"
            "    dist.destroy_process_group()\n",
        ),
    )
    result = lesson.check_ddp_script(folder / "ddp_train.py")
    assert result.status == "passed", result.message


def test_the_notebook_starts_exercise_1_from_the_colleagues_files():
    """The cells the learner fixes hold the colleague's code that `observe_colleague` runs,
    then the place for fixes; the learner copy keeps the code and stubs only that place."""
    stubs = scripts(learner_copy(read(NOTEBOOK), NOTEBOOK.name))
    for name, text in colleague_scripts().items():
        head = text.removesuffix(MAIN_GUARD)
        assert SOLUTION[name].startswith(head) and stubs[name].startswith(head), name
    assert stubs["ddp_train.py"].endswith(MAIN_GUARD)


def test_the_colleagues_script_is_measured_and_fails_on_its_three_faults(tmp_path):
    """Exercise 1's faults: each process batches the global batch, no set_epoch, the DDP
    wrapper's state dict saved. What observe_colleague shows, and what the check names."""
    shown = lesson.observe_colleague(tmp_path)
    rows = {line.split(" | ")[0].strip("| "): line for line in shown.splitlines()}
    assert rows["samples per training forward"].endswith("| 32 | 32 |")
    assert rows["epoch 0: first samples"] == rows["epoch 1: first samples"].replace("1:", "0:")
    assert "`module.0.weight`" in shown and "refused it" in shown
    exc = failure(lesson.check_ddp_script, tmp_path / "colleague" / "ddp_train.py")
    assert exc.status == "failed"
    for says in (
        f"each rank used the global batch size {lesson_checks.BATCH}",
        "call sampler.set_epoch(epoch)",
        "keys start with `module.`",
    ):
        assert says in exc.summary, says
    assert "shuts the process group down: destroy_process_group() ran" in exc.summary


def test_ddp_check_names_a_sampler_that_is_not_passed_to_the_loader(tmp_path):
    exc = ddp_failure(tmp_path, ddp_setup=("sampler=sampler)", "shuffle=True)"))
    assert exc.status == "failed"
    assert "without a DistributedSampler every process trains on the whole data set" in exc.summary


def test_ddp_check_names_a_forgotten_set_epoch(tmp_path):
    exc = ddp_failure(tmp_path, ddp_train=("sampler.set_epoch(epoch)", "pass"))
    assert exc.status == "failed"
    assert "same order in epochs 0 and 1: call sampler.set_epoch(epoch)" in exc.summary


def test_ddp_check_names_saving_on_every_rank(tmp_path):
    exc = ddp_failure(tmp_path, ddp_train=("if rank == 0:", "if True:"))
    assert exc.status == "failed"
    assert "torch.save was called on ranks [0, 1]" in exc.summary


def test_ddp_check_names_gradients_summed_instead_of_averaged(tmp_path):
    exc = ddp_failure(
        tmp_path,
        ddp_train=("y.to(device))\n", "y.to(device)) * dist.get_world_size()\n"),
    )
    assert exc.status == "failed"
    assert "gradients were summed over ranks instead of averaged" in exc.summary


def test_ddp_check_names_the_global_batch_used_on_every_rank(tmp_path):
    exc = ddp_failure(tmp_path, ddp_setup=("cfg.batch_size // world", "cfg.batch_size"))
    assert exc.status == "failed"
    assert f"each rank used the global batch size {lesson_checks.BATCH}" in exc.summary


def test_ddp_check_reports_an_exception_on_one_rank_as_an_error(tmp_path):
    exc = ddp_failure(
        tmp_path,
        ddp_train=("    try:\n", "    if rank == 1:\n        raise ValueError('boom')\n    try:\n"),
    )
    assert exc.status == "error"
    assert "ValueError on rank 1" in exc.summary and "boom" in exc.summary


def test_ddp_check_kills_a_hung_rank_at_the_deadline(tmp_path):
    hang = "    if rank == 1:\n        __import__('time').sleep(3600)\n    try:\n"
    folder = write(tmp_path, SOLUTION, ddp_train=("    try:\n", hang))
    start = time.perf_counter()
    exc = failure(functools.partial(lesson.check_ddp_script, timeout_s=10), folder / "ddp_train.py")
    assert time.perf_counter() - start < 10 + 20
    assert exc.status == "failed"
    assert "did not finish within 10 s, so every process was killed" in exc.summary
    assert not survivors(folder, wait_s=5), "processes outlived the deadline"


def sampled_trace(
    cfg: lesson_workload.Config, *, drop_last: bool = False, shard: bool = True, save_at=None
) -> Launch:
    """A trace like the check's launch records, made in one process: every rank's training
    forwards from a DistributedSampler (set_epoch called; `shard=False`: every rank reads the
    whole data set), and rank 0's torch.save after `save_at` forwards (default: the last)."""
    data, world = lesson_workload.make_dataset(), lesson_checks.WORLD
    events, t = [], 0.0
    for epoch in range(cfg.epochs):
        for rank in range(world):
            sampler = torch.utils.data.DistributedSampler(data, world, rank, seed=cfg.seed)
            sampler.set_epoch(epoch)
            loader = torch.utils.data.DataLoader(
                range(len(data)),
                cfg.batch_size // world,
                sampler=sampler if shard else None,
                drop_last=drop_last,
            )
            for batch in loader:
                t += 1.0
                events.append({"event": "forward", "rank": rank, "t": t, "samples": batch.tolist()})
    forwards = [e for e in events if e["rank"] == 0]
    when = forwards[save_at - 1]["t"] + 0.5 if save_at else t + 1.0
    events.append({"event": "save", "rank": 0, "t": when, "path": str(cfg.checkpoint)})
    return Launch(["torchrun"], 0, 1.0, 120, "", events)


def check_config(tmp_path) -> lesson_workload.Config:
    cfg = lesson_workload.Config(batch_size=lesson_checks.BATCH, checkpoint=tmp_path / "c.pt")
    cfg.checkpoint.write_bytes(b"")  # the rank-0 part only asks that it exists
    return cfg


def test_the_check_batch_leaves_a_smaller_last_batch_that_drop_last_loses(tmp_path):
    """A batch that divides each rank's shard hides drop_last; the check's does not, and the
    trace tells a dropped last batch from other lost samples by its shape: whole batches only,
    exactly the samples that fill them."""
    cfg = check_config(tmp_path)
    shard = lesson_workload.N_SAMPLES // lesson_checks.WORLD
    assert shard % (lesson_checks.BATCH // lesson_checks.WORLD), "the batch divides the shard"
    right = {p.name: p for p in judge_trace(sampled_trace(cfg), cfg, lesson_checks.WORLD)}
    assert all(p.status == "passed" for p in right.values()), right
    dropped = {p.name: p for p in judge_trace(sampled_trace(cfg, drop_last=True), cfg, 2)}
    assert dropped["per-process batch"].status == "passed"
    assert dropped["sharding"].status == "failed"
    assert "instead of every sample once" in dropped["sharding"].message
    assert "drop_last=True" in dropped["sharding"].message
    # without a sampler each rank's 128 samples end with a batch of 8: still the right batch
    whole = {p.name: p for p in judge_trace(sampled_trace(cfg, shard=False), cfg, 2)}
    assert whole["per-process batch"].status == "passed"
    assert "without a DistributedSampler" in whole["sharding"].message


def test_weights_that_never_moved_are_told_apart_from_a_save_made_too_early(tmp_path):
    """The checkpoint equals the initial parameters in both; the trace says when it was
    written: after every training forward (the optimizer steps another model) or before any
    (a save in the wrong place)."""
    cfg = check_config(tmp_path)
    initial = lesson_workload.make_model().state_dict()
    after = judge_parameters(sampled_trace(cfg), cfg, initial, 1e-4)
    assert after.status == "failed"
    assert "the weights did not change during training" in after.message
    assert "save after" not in after.message
    before = judge_parameters(sampled_trace(cfg, save_at=1), cfg, initial, 1e-4)
    assert "save after the last step of the epoch" in before.message


def test_the_exercise_text_names_the_sizes_the_check_launches():
    text = "\n".join(c.source for c in read(NOTEBOOK).cells if c.cell_type == "markdown")
    per_rank = lesson_checks.BATCH // lesson_checks.WORLD
    shard = lesson_workload.N_SAMPLES // lesson_checks.WORLD
    assert f"global batch {lesson_checks.BATCH}: each rank's {shard} samples" in text
    assert f"{shard // per_rank} batches of {per_rank} and a last one of {shard % per_rank}" in text
    assert f'"ddp_train.py", batch_size={lesson_checks.BATCH})' in text


def test_learner_copy_writes_valid_stub_scripts_that_report_not_attempted(tmp_path):
    stubs = scripts(learner_copy(read(NOTEBOOK), NOTEBOOK.name))
    assert set(stubs) == set(SOLUTION)
    for name, text in stubs.items():
        compile(text, name, "exec")  # still a valid Python file
        assert "raise NotImplementedError()" in text and "### BEGIN SOLUTION" not in text
    folder = write(tmp_path, stubs)
    assert status_of(lesson.check_ddp_script, folder / "ddp_train.py") == "not-attempted"


# --- exercise 2: accumulation with no_sync ---------------------------------------------

ACCUMULATE = {
    "solution": SOLUTION["accumulate.py"],
    "alternative": (  # the flag no_sync() sets, and the loss scaled by each batch's share
        "import torch.nn.functional as F\n\n\n"
        "def accumulate_gradients(model, micro_batches):\n"
        "    n = sum(len(y) for _, y in micro_batches)\n"
        "    for i, (x, y) in enumerate(micro_batches):\n"
        "        model.require_backward_grad_sync = i == len(micro_batches) - 1\n"
        "        (F.cross_entropy(model(x), y, reduction='sum') / n).backward()\n"
        "    model.require_backward_grad_sync = True\n"
    ),
    "no_no_sync": SOLUTION["accumulate.py"].replace(
        "contextlib.nullcontext() if last else model.no_sync()", "contextlib.nullcontext()"
    ),
    "backward_only": (
        "import torch.nn.functional as F\n\n\n"
        "def accumulate_gradients(model, micro_batches):\n"
        "    for i, (x, y) in enumerate(micro_batches):\n"
        "        loss = F.cross_entropy(model(x), y) / len(micro_batches)\n"
        "        if i < len(micro_batches) - 1:\n"
        "            with model.no_sync():\n"
        "                loss.backward()\n"
        "        else:\n"
        "            loss.backward()\n"
    ),
    "all_in_no_sync": SOLUTION["accumulate.py"].replace(
        "contextlib.nullcontext() if last else model.no_sync()", "model.no_sync()"
    ),
    "not_divided": SOLUTION["accumulate.py"].replace(" / k  #", "  #"),
    "colleague": (  # exercise 2's starting point, as the notebook prints it
        "from course_utils.lessons.distributed.colleague import colleague_accumulate\n\n"
        "accumulate_gradients = colleague_accumulate\n"
    ),
    "sync_first": SOLUTION["accumulate.py"].replace("last = i == k - 1", "last = i == 0"),
    "divides_by_world": SOLUTION["accumulate.py"]
    .replace(" / k  #", " / (k * torch.distributed.get_world_size())  #")
    .replace("import contextlib\n", "import contextlib\n\nimport torch.distributed\n"),
    "zero_grad_inside": SOLUTION["accumulate.py"].replace(
        "        last = i == k - 1\n",
        "        last = i == k - 1\n        model.zero_grad(set_to_none=True)\n",
    ),
    "manual_allreduce": (  # right gradient, averaged by hand: one collective per parameter
        "import torch.distributed as dist\nimport torch.nn.functional as F\n\n\n"
        "def accumulate_gradients(model, micro_batches):\n"
        "    with model.no_sync():\n"
        "        for x, y in micro_batches:\n"
        "            (F.cross_entropy(model(x), y) / len(micro_batches)).backward()\n"
        "    for p in model.parameters():\n"
        "        dist.all_reduce(p.grad)\n"
        "        p.grad /= dist.get_world_size()\n"
    ),
    "extra_allreduce": SOLUTION["accumulate.py"]  # DDP's sync, then the same by hand
    + "    from torch.distributed import all_reduce, get_world_size\n\n"
    "    for p in model.parameters():\n"
    "        all_reduce(p.grad)\n"
    "        p.grad /= get_world_size()\n",
    "stub": scripts(learner_copy(read(NOTEBOOK), NOTEBOOK.name))["accumulate.py"],
    "delegates": (
        "from course_utils.lessons.distributed.reference import reference_accumulate\n\n\n"
        "def accumulate_gradients(model, micro_batches):\n"
        "    reference_accumulate(model, micro_batches)\n"
    ),
}


@pytest.fixture(scope="module")
def probed(tmp_path_factory):
    """Every variant measured in ONE launch of probe.py: path -> result."""
    folder = tmp_path_factory.mktemp("accumulate")
    paths = {}
    for name, text in ACCUMULATE.items():
        assert text != SOLUTION["accumulate.py"] or name == "solution", name
        paths[name] = folder / f"{name}.py"
        paths[name].write_text(text)
    results = learner_runs.measure_no_sync(list(paths.values()))
    failed = [r for r in results.values() if "launch" in r]
    if failed:  # one failed launch would fail every test below: say why, once
        pytest.fail(f"probe.py launch failed:\n{failed[0]['launch'].tail(400)}")
    return paths, results


def check_probed(probed, monkeypatch, name: str):
    paths, results = probed
    monkeypatch.setattr(learner_runs, "measure_no_sync", lambda p, t=None, offset=0: results)
    return paths[name]


@pytest.mark.parametrize("name", ["solution", "alternative"])
def test_no_sync_check_passes_the_solution_and_an_alternative(probed, monkeypatch, name):
    path = check_probed(probed, monkeypatch, name)
    assert lesson.check_no_sync(path).status == "passed"


@pytest.mark.parametrize(
    "name, says",
    [
        ("no_no_sync", "every micro-batch was all-reduced"),
        ("backward_only", "the forward AND backward of all but the last micro-batch"),
        ("all_in_no_sync", "nothing was all-reduced"),
        ("not_divided", "4x the mean: divide each micro-batch's loss by 4"),
        ("sync_first", "each exactly what synchronising the first instead of the last leaves"),
        ("divides_by_world", "1/2 of the mean (half): divided by the world size (2)"),
        ("zero_grad_inside", "only the last micro-batch's gradient is left"),
        ("manual_allreduce", "0 all-reduce(s) by DDP plus 4 dist.all_reduce (one per parameter)"),
        ("extra_allreduce", "1 all-reduce(s) by DDP plus 4 dist.all_reduce (one per parameter)"),
        ("delegates", "reference answer `reference_accumulate`"),
    ],
)
def test_no_sync_check_names_each_mistake(probed, monkeypatch, name, says):
    exc = failure(lesson.check_no_sync, check_probed(probed, monkeypatch, name))
    assert exc.status == "failed"
    assert says in exc.summary


def test_no_sync_check_passes_the_gradient_that_a_manual_allreduce_got_right(probed, monkeypatch):
    """Averaging by hand leaves the right gradient: only the count fails, and the message does
    not say the ranks never average."""
    exc = failure(lesson.check_no_sync, check_probed(probed, monkeypatch, "manual_allreduce"))
    assert "every rank holds the full-batch mean gradient" in exc.summary
    assert "never average" not in exc.summary


def _ranks(known: list[dict]) -> list[dict]:
    """Measured results of 2 ranks whose gradients are off the full-batch mean by 0.5."""
    return [
        {"exception": None, "micro_batches": 4, "per_sync": 1, "allreduces": 1,
         "own_collectives": {}, "parameters": 4, "diff_full": 0.5, "scale": 1.0,
         "known": k, "rank_diff": 0.0}
        for k in known
    ]  # fmt: skip


def test_a_known_mistake_is_named_only_when_every_rank_matches_it():
    from course_utils.lessons.distributed.judge import judge_accumulation

    both = judge_accumulation(_ranks([{"world_down": 0.0}, {"world_down": 1e-7}]), 1e-4)
    assert "divided by the world size" in both[1].message
    one = judge_accumulation(_ranks([{"world_down": 0.0}, {"world_down": 0.3}]), 1e-4)
    assert "neither the full-batch mean nor a known mistake" in one[1].message
    assert "world size" not in one[1].message


def test_no_sync_check_names_both_mistakes_of_the_colleagues_code(probed, monkeypatch):
    """Exercise 2's code all-reduces every micro-batch (forward outside no_sync) and leaves
    4x the mean (losses not divided): each measurement gets its own cause."""
    exc = failure(lesson.check_no_sync, check_probed(probed, monkeypatch, "colleague"))
    assert exc.status == "failed"
    assert "for 4 micro-batches: every micro-batch was all-reduced" in exc.summary
    assert "4x the mean: divide each micro-batch's loss by 4" in exc.summary


def test_no_sync_check_reports_not_attempted_for_the_stub(probed, monkeypatch):
    path = check_probed(probed, monkeypatch, "stub")
    assert status_of(lesson.check_no_sync, path) == "not-attempted"


def test_no_sync_check_end_to_end_on_the_solution(tmp_path):
    path = tmp_path / "accumulate.py"
    path.write_text(SOLUTION["accumulate.py"])
    assert lesson.check_no_sync(path).status == "passed"


# --- the lesson's demos -----------------------------------------------------------------


def test_a_function_from_main_cannot_be_unpickled_in_a_fresh_process(monkeypatch):
    def square(x):
        return x * x

    square.__module__, square.__qualname__ = "__main__", "square"
    monkeypatch.setattr(sys.modules["__main__"], "square", square, raising=False)
    stored = lesson.what_pickle_stores(square)
    assert stored["names"] == ["__main__", "square"]
    assert "Can't get attribute 'square'" in lesson.unpickle_in_fresh_process(stored["blob"])
    assert "loaded" == lesson.unpickle_in_fresh_process(pickle.dumps(len))


def test_a_script_that_dies_before_tracing_reports_the_exception_from_the_output():
    """A SyntaxError in an imported file kills the ranks before the trace is installed: the
    check reads torchrun's "[rankN]:" traceback lines instead."""
    output = (
        '[rank1]:   File "ddp_setup.py", line 3\n'
        "[rank1]: SyntaxError: invalid syntax\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
    )
    launch = Launch(["torchrun"], 1, 2.0, 120, output)
    with pytest.raises(RankFailed, match="SyntaxError on rank 1 of ddp_train.py"):
        lesson_checks._launch_error(launch, "ddp_train.py")


def test_scaling_efficiency_is_the_speedup_per_process_on_the_same_global_batch():
    samples = {
        "1 process": [0.05, 0.07],
        "DDP, 2 processes": [0.04],
        "all-reduce alone": [0.01],
    }
    s = lesson.Scaling(samples, {}, batch=256, world=2, device="cpu", torch="x", launch_s=1.0)
    assert s.speedup == pytest.approx(1.5) and s.efficiency == pytest.approx(0.75)
    assert "**75%**" in lesson.scaling_verdict(s, 2)


def fake_gpus(monkeypatch, count: int) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)


@pytest.mark.parametrize(
    ("gpus", "backend", "says"),
    [(0, "gloo", "2 CPU processes (gloo"), (1, "gloo", "2 CPU processes (gloo"),
     (2, "nccl", "2 processes (NCCL, one GPU each)")],
    ids=["laptop", "one-gpu-colab", "two-gpus"],
)  # fmt: skip
def test_launch_backend_and_its_description_follow_the_gpus_present(
    monkeypatch, gpus, backend, says
):
    fake_gpus(monkeypatch, gpus)
    monkeypatch.delenv("COURSE_DEVICE", raising=False)
    assert lesson_workload.launch_backend(2) == backend
    assert lesson_workload.describe_launch(2).startswith(says)


def test_ddp_check_message_names_the_backend_and_devices(monkeypatch, tmp_path):
    """On a two-GPU machine the launch runs NCCL: the check says so (launch and backend
    faked; the grading process itself keeps COURSE_DEVICE=cpu, having no GPU here)."""
    monkeypatch.setattr(lesson_workload, "launch_backend", lambda world: "nccl")
    monkeypatch.setenv("COURSE_DEVICE", "cpu")
    script = tmp_path / "ddp_train.py"
    script.write_text("")
    done = Launch(["torchrun"], 0, 3.0, 120, "")
    monkeypatch.setattr(learner_runs, "torchrun", lambda *a, **k: done)  # the probe's launch
    monkeypatch.setattr(learner_runs, "start_alone", lambda *a, **k: Finished(done))
    exc = failure(lesson.check_ddp_script, script)  # no trace: the ranks did not train
    assert "2 processes (NCCL, one GPU each) finished after 3.0 s" in exc.summary


def nccl_scaling() -> lesson.Scaling:
    samples = {
        "1 process": [0.004],
        "DDP, 2 processes": [0.0025],
        "all-reduce alone": [0.001],
        "accumulate x4": [0.01],
        "accumulate x4 + no_sync": [0.008],
    }
    return lesson.Scaling(samples, {}, 256, 2, "cuda:0", "x", 1.0, backend="nccl")


def test_scaling_table_and_verdict_name_nccl_and_gpus_not_threads_or_cpus():
    s = nccl_scaling()
    text = lesson.scaling_table(s) + lesson.scaling_verdict(s, 16)
    assert "NCCL, one GPU each" in text
    assert "thread" not in text and "CPU" not in text
    assert s.variants == ["1 process", "DDP, 2 processes"]


def test_scaling_table_and_verdict_name_gloo_on_the_cpu():
    samples = {"1 process": [0.06], "1 process, 2 threads": [0.04], "DDP, 2 processes": [0.04],
               "all-reduce alone": [0.01]}  # fmt: skip
    s = lesson.Scaling(samples, {}, batch=256, world=2, device="cpu", torch="x", launch_s=1.0)
    assert "2 CPU processes, gloo, one thread each" in lesson.scaling_table(s)
    assert "2 CPU processes, gloo, one thread each, on 2 CPUs" in lesson.scaling_verdict(s, 2)


def test_launch_backend_is_gloo_when_course_device_asks_for_the_cpu(monkeypatch):
    fake_gpus(monkeypatch, 2)
    monkeypatch.setenv("COURSE_DEVICE", "cpu")
    assert lesson_workload.launch_backend(2) == "gloo"
    assert lesson_workload.describe_launch(2).startswith("2 CPU processes (gloo")
    monkeypatch.setenv("COURSE_DEVICE", "cuda")
    assert lesson_workload.launch_backend(2) == "nccl"


# --- how the script ends: checkpoint keys and shutdown, judged from made-up traces ---------


class Finished:
    """Stands in for a started launch (`launch.Running`) that has already ended."""

    def __init__(self, launch: Launch) -> None:
        self.launch = launch

    def finish(self) -> Launch:
        return self.launch

    def kill(self) -> None:
        pass


def traced(*events: dict, code: int | None = 0) -> Launch:
    return Launch(["python"], code, 1.0, 120, "", [{"t": i, **e} for i, e in enumerate(events)])


def exits(*up: bool) -> list[dict]:
    return [{"event": "exit", "rank": r, "process_group": u} for r, u in enumerate(up)]


INJECTED = {"event": "injected", "rank": 0}


def test_shutdown_passes_when_the_group_is_down_after_training_and_after_a_failure():
    part = ending.judge_shutdown(traced(*exits(False, False)), traced(INJECTED, *exits(False)))
    assert part.status == "passed"


def test_shutdown_names_a_destroy_that_an_exception_jumps_over():
    part = ending.judge_shutdown(traced(*exits(False, False)), traced(INJECTED, *exits(True)))
    assert part.status == "failed"
    assert "an exception jumped over it" in part.message and "`finally:`" in part.message


def test_shutdown_names_a_destroy_never_called_from_the_main_launch():
    part = ending.judge_shutdown(traced(*exits(True, True)), traced(INJECTED, *exits(True)))
    assert part.status == "failed"
    assert "ranks [0, 1] exited with their process group still initialised" in part.message


def test_shutdown_is_not_judged_when_training_never_ran_in_the_failing_run():
    part = ending.judge_shutdown(traced(*exits(False, False)), traced(*exits(False), code=1))
    assert part.status == "not-applicable" and "check's limit" in part.message


def test_shutdown_says_the_failing_run_timed_out():
    part = ending.judge_shutdown(traced(*exits(False, False)), traced(INJECTED, code=None))
    assert part.status == "failed" and "did not finish within 120 s" in part.message


def saved(tmp_path, obj) -> Path:
    torch.save(obj, tmp_path / "checkpoint.pt")
    return tmp_path / "checkpoint.pt"


def test_checkpoint_of_the_wrapped_model_loads_into_a_plain_model(tmp_path):
    plain = lesson_workload.make_model().state_dict()
    for obj in ({"model": plain, "epoch": 1}, plain):
        state, part = ending.judge_checkpoint(saved(tmp_path, obj))
        assert part.status == "passed" and set(state) == set(plain)


def test_checkpoint_of_the_ddp_wrapper_names_the_module_prefix_and_the_fix(tmp_path):
    wrapped = {f"module.{k}": v for k, v in lesson_workload.make_model().state_dict().items()}
    state, part = ending.judge_checkpoint(saved(tmp_path, {"model": wrapped, "epoch": 1}))
    assert part.status == "failed"
    assert "keys start with `module.`" in part.message
    assert "model.module.state_dict()" in part.message
    assert not any(k.startswith("module.") for k in state)  # the parameters are still compared


def test_checkpoint_that_is_not_a_state_dict_fails_saying_what_it_holds(tmp_path):
    _, part = ending.judge_checkpoint(saved(tmp_path, {"weights": [1, 2], "epoch": 1}))
    assert part.status == "failed" and "a dict with keys ['epoch', 'weights']" in part.message
    torch.save(lesson_workload.make_model(), tmp_path / "module.pt")  # a pickled module
    _, part = ending.judge_checkpoint(tmp_path / "module.pt")
    assert part.status == "failed" and "weights_only=True" in part.message


# --- judged as `course grade` judges: the check body here, the learner's side in a child ------


@pytest.fixture
def judged_files(tmp_path, monkeypatch):
    """The files of the judged cases (the solution's and a red-team wrong answer per check),
    and a module naming each as the locked cells hand it to the check (a LearnerFile: the
    check's probes then run beside it, in the child), importable here and in the child."""
    import os
    import textwrap

    here = Path(__file__).parent
    paths = [str(here), str(here / "redteam"), str(tmp_path)]
    for path in paths:
        monkeypatch.syspath_prepend(path)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([*paths, os.environ.get("PYTHONPATH", "")]))
    import test_06_ddp as redteam

    body = redteam.train_body(loss_factor=" * dist.get_world_size()")
    folders = {
        "solution": SOLUTION,
        "loss_times_world": {  # wrong-loss-times-world: gradients summed, the weights show it
            "ddp_setup.py": redteam.setup_with(),
            "ddp_train.py": redteam.TRAIN.format(body=textwrap.indent(body.strip("\n"), "    ")),
        },
        "sync_first": {  # wrong-sync-first-micro-batch
            "accumulate.py": redteam.HEAD + redteam.ACCUMULATE["wrong-sync-first-micro-batch"],
        },
    }
    names = ["from course_utils.lessons.distributed.learner_runs import LearnerFile"]
    for folder, files in folders.items():
        (tmp_path / folder).mkdir()
        write(tmp_path / folder, files)
        for name in files:  # as the locked cells hand a file to the check
            path = str(tmp_path / folder / name)
            names.append(f"{folder.upper()}_{name[:-3].upper()} = LearnerFile({path!r})")
    (tmp_path / "judged_files_06.py").write_text("\n".join(names) + "\n")
    monkeypatch.delitem(sys.modules, "judged_files_06", raising=False)  # this test's files
    import judged_files_06

    return judged_files_06


JUDGED_REFERENCES = [
    ("06-ddp-script", "judged_files_06:SOLUTION_DDP_TRAIN"),
    ("06-no-sync", "judged_files_06:SOLUTION_ACCUMULATE"),
]
JUDGED_WRONG = [
    ("06-ddp-script", "check_ddp_script", "judged_files_06:LOSS_TIMES_WORLD_DDP_TRAIN"),
    ("06-no-sync", "check_no_sync", "judged_files_06:SYNC_FIRST_ACCUMULATE"),
]


@pytest.mark.parametrize(
    "check_id, answer", JUDGED_REFERENCES, ids=[c for c, _ in JUDGED_REFERENCES]
)
def test_the_solution_passes_when_judged_outside_the_learners_process(
    judged_files, check_id, answer
):
    from judge_helpers import remote_verdict

    verdict = remote_verdict(check_id, answer)
    assert verdict["status"] == "passed", verdict["message"]


@pytest.mark.parametrize(
    "check_id, check, answer", JUDGED_WRONG, ids=[c for c, _, _ in JUDGED_WRONG]
)
def test_a_wrong_answer_gets_the_same_verdict_judged_as_in_a_notebook(
    judged_files, check_id, check, answer
):
    from judge_helpers import remote_verdict

    here = status_of(getattr(lesson, check), getattr(judged_files, answer.partition(":")[2]))
    verdict = remote_verdict(check_id, answer)
    assert here == verdict["status"] == "failed", verdict["message"]


def test_the_locked_cells_hand_the_checks_the_learners_file(tmp_path, monkeypatch):
    """A path is plain data, and a probe given only data runs where the check runs (in the
    judge, outside the learner's sandbox): the locked cells' check_ddp_script and
    check_no_sync hand the checks a handle on the file, whose probes run beside it."""
    seen = []
    for name in ("check_ddp_script_file", "check_no_sync_file"):
        monkeypatch.setattr(lesson_checks, name, lambda f, **k: seen.append((f, k)) or "verdict")
    assert lesson.check_ddp_script(tmp_path / "ddp_train.py", timeout_s=5) == "verdict"
    assert lesson.check_no_sync(tmp_path / "accumulate.py") == "verdict"
    (script, first), (accumulate, second) = seen
    assert isinstance(script, learner_runs.LearnerFile) and first == {"timeout_s": 5}
    assert script() == str(tmp_path / "ddp_train.py") and script.__name__ == "ddp_train.py"
    assert accumulate() == str(tmp_path / "accumulate.py") and second == {"timeout_s": None}


def test_a_bare_path_is_refused_rather_than_run_where_the_check_runs(tmp_path):
    exc = failure(lesson_checks.check_ddp_script_file, str(tmp_path / "ddp_train.py"))
    assert exc.status == "error" and "LearnerFile" in exc.summary


@pytest.mark.parametrize("offset", lesson_checks.OFFSETS)
def test_at_every_drawn_offset_the_known_mistakes_stay_far_apart(offset):
    """The micro-batches start at an offset the judge draws: at each, every candidate gradient
    (the full-batch mean, each known mistake's) stays far beyond grad_rtol from the others,
    so a mistake is still named only when a rank's gradient is that mistake's."""
    import itertools

    from course_utils.lessons.distributed import gradients

    cpu, world = torch.device("cpu"), lesson_checks.WORLD
    for rank in range(world):
        mine, (gx, gy) = gradients.micro_batches(rank, world, cpu, offset)
        full = gradients.one_process_grad([(gx, gy)], cpu)
        candidates = {"full": full, "unscaled": len(mine) * full}
        candidates["local"] = gradients.one_process_grad(mine, cpu)
        candidates.update(gradients.known_mistakes(rank, world, cpu, offset))
        scale = full.abs().max().item()
        closest = min(
            (a - b).abs().max().item() / scale
            for a, b in itertools.combinations(candidates.values(), 2)
        )
        assert closest > 0.3 > 1000 * lesson.THRESHOLDS["grad_rtol"].value, (offset, rank)
