"""Lesson 06's checks launch real torchrun jobs: they pass the notebook's solution scripts,
name each realistic mistake, accept valid alternatives, and never hang.

The scripts under test are the `%%writefile` cells of solutions/06_ddp.ipynb (and of the
learner copy that `course assign` makes of it), so the tests grade what learners see.
Every launch costs a few seconds (three Python processes importing torch).
"""

from __future__ import annotations

import functools
import pickle
import re
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
from course_utils.lessons.distributed import workload as lesson_workload
from course_utils.lessons.distributed.judge import RankFailed
from course_utils.lessons.distributed.launch import Launch

NOTEBOOK = Path(__file__).resolve().parents[1] / "solutions" / "06_ddp.ipynb"
WRITEFILE = re.compile(r"^%%writefile \{workdir\}/(?P<name>\S+)\n")


def scripts(nb) -> dict[str, str]:
    """file name -> text of every `%%writefile {workdir}/NAME` cell of a notebook."""
    found = {}
    for cell in nb.cells:
        match = WRITEFILE.match(cell.source) if cell.cell_type == "code" else None
        if match:
            found[match["name"]] = cell.source[match.end() :] + "\n"
    return found


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
    same = next(p for p in result.parts if p.name == "same parameters as one process")
    assert same.value <= lesson.THRESHOLDS["param_atol"].value


def test_ddp_check_passes_a_valid_alternative(tmp_path):
    """Sampler from the process group's defaults, save once after training with the
    'module.' prefix, no try/finally: all fine."""
    folder = write(
        tmp_path,
        SOLUTION,
        ddp_setup=(
            "DistributedSampler(data, num_replicas=world, rank=rank, seed=cfg.seed)",
            "DistributedSampler(data, seed=cfg.seed, drop_last=True)",
        ),
        ddp_train=(
            SOLUTION["ddp_train.py"][
                SOLUTION["ddp_train.py"].index("    try:") : SOLUTION["ddp_train.py"].index(
                    "    ### END SOLUTION"
                )
            ],
            "    for epoch in range(cfg.epochs):\n"
            "        sampler.set_epoch(epoch)\n"
            "        for x, y in loader:\n"
            "            optimizer.zero_grad(set_to_none=True)\n"
            "            F.cross_entropy(model(x), y).backward()\n"
            "            optimizer.step()\n"
            "    if dist.get_rank() == 0:\n"
            "        torch.save(model.state_dict(), cfg.checkpoint)\n"
            "    dist.destroy_process_group()\n",
        ),
    )
    result = lesson.check_ddp_script(folder / "ddp_train.py")
    assert result.status == "passed", result.message


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
    assert "each rank used the global batch size 32" in exc.summary


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
    results = lesson_checks.measure_no_sync(list(paths.values()))
    failed = [r for r in results.values() if "launch" in r]
    if failed:  # one failed launch would fail every test below: say why, once
        pytest.fail(f"probe.py launch failed:\n{failed[0]['launch'].tail(400)}")
    return paths, results


def check_probed(probed, monkeypatch, name: str):
    paths, results = probed
    monkeypatch.setattr(lesson_checks, "measure_no_sync", lambda p, t=None: results)
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
        ("delegates", "reference answer `reference_accumulate`"),
    ],
)
def test_no_sync_check_names_each_mistake(probed, monkeypatch, name, says):
    exc = failure(lesson.check_no_sync, check_probed(probed, monkeypatch, name))
    assert exc.status == "failed"
    assert says in exc.summary


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
    assert lesson_workload.launch_backend(2) == backend
    assert lesson_workload.describe_launch(2).startswith(says)


def test_ddp_check_message_names_the_backend_and_devices(monkeypatch, tmp_path):
    """On a two-GPU machine the launch runs NCCL: the check says so (launch faked)."""
    fake_gpus(monkeypatch, 2)
    monkeypatch.setenv("COURSE_DEVICE", "cpu")  # the grading process itself: no GPU here
    script = tmp_path / "ddp_train.py"
    script.write_text("")
    done = Launch(["torchrun"], 0, 3.0, 120, "")
    monkeypatch.setattr(lesson_checks, "torchrun", lambda *a, **k: done)
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
