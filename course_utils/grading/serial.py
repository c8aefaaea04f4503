"""The serial engine: grade submissions on this machine, `jobs` at a time (default one, for
honest timings), reusing unchanged ones; the main thread is the only writer."""

from __future__ import annotations

import queue
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tqdm.auto import tqdm

from .isolated import stopped
from .outbox import GradeSummary, Outbox
from .records import Graded, Row, Submission
from .settings import RunSettings, fingerprint, gpu_count, grading_settings
from .submission import grade_submission, read_data


def grade_serially(
    subs: list[Submission],
    sols: dict,
    sol_paths: list[Path],
    run: RunSettings,
    outbox: Outbox,
    *,
    jobs: int = 1,
    lesson: str | None = None,
) -> GradeSummary:
    settings = grading_settings(sol_paths, run.cell_timeout, run.quick, checks_only=run.checks_only)
    gpus = gpu_count() if jobs > 1 else 0
    if jobs > 1:
        print(
            f"Grading {jobs} submissions at a time: timing checks get noisy; use --jobs 1 for final grades.",
            file=sys.stderr,
        )
    slots: queue.Queue[int] = queue.Queue()
    for slot in range(max(1, jobs)):
        slots.put(slot)

    def work(sub: Submission) -> tuple[Submission, Graded | list[Row]]:
        """Grade one submission in a worker thread, or return its reused rows. Only the main
        thread touches the outbox (a dict mutated while json.dumps iterates it fails)."""
        data = read_data(sub)
        key = fingerprint(data, settings + (f"|lesson {lesson}" if lesson else ""))
        reused = outbox.reusable(sub, {key})
        if reused is not None:
            return sub, reused
        slot = slots.get()
        try:
            graded = grade_submission(
                sub.name,
                sub.path.name,
                data,
                sols,
                run,
                lesson=lesson,
                gpu=slot % gpus if gpus > 1 else None,
            )
        finally:
            slots.put(slot)
        graded.key = key
        return sub, graded

    pool = ThreadPoolExecutor(max_workers=max(1, jobs))
    try:
        for sub, result in tqdm(
            pool.map(work, subs), total=len(subs), desc="grading", unit="notebook"
        ):
            if isinstance(result, Graded):
                outbox.record(sub, result)
            else:
                outbox.reuse(sub, result)
    except BaseException:  # Ctrl-C: stop the notebooks in flight now and start nothing more;
        with stopped():  # the state file has what was done, their work folders go with them
            pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown()
    return outbox.finish(subs)
