"""The child side of `course selftest`: run one item and leave its result in a JSON file.

The parent starts every item in a fresh process from a fork server that has imported torch
and the harness once (about 4 s saved per item on a 2-core machine); a child that crashes,
hangs or poisons its CUDA context takes only its own item down. Nothing here imports the
notebook stack (nbformat, nbclient, papermill).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
import traceback
from pathlib import Path

import torch  # noqa: F401 - imported once in the fork server, not once per item

from .. import checks, mode
from ..errors import CheckFailed
from .items import CHECK, Item, lesson_selftest


def resolve(target: str):
    """The function a "module:function" string names."""
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def _run_check(item: Item) -> dict:
    answers = lesson_selftest(item.lesson).answers()
    if item.name not in answers:
        return {"status": "no-reference", "detail": "the lesson's selftest.answers() lacks it"}
    shown: list = []
    emit = checks.emit
    checks.emit = lambda result: (shown.append(result), emit(result))  # keep what was shown
    try:
        args = answers[item.name]()
        check = checks.REGISTRY[item.name]
        try:
            check(*args)
        except CheckFailed:
            pass  # the result was shown (and kept) before the check raised
    finally:
        checks.emit = emit
    result = shown[-1].to_dict()
    return {"status": result["status"], "result": result}


def _run_effect(item: Item) -> dict:
    effect = lesson_selftest(item.lesson).effects()[item.name]()
    return {"status": "measured", "result": effect.to_dict()}


def run_item(item: Item, quick: bool, env: dict, result_path: str, log_path: str) -> None:
    """Run `item` with the parent's course settings; write {status, result, seconds} to
    `result_path`. Output (the check's verdict, tracebacks) goes to `log_path`."""
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.environ.update(env)  # the fork server's environment is the one it started with
    mode.set_quick(quick)
    from ..session import seed_everything

    seed_everything(0)
    t0 = time.perf_counter()
    try:
        if item.target:
            payload = resolve(item.target)()
        elif item.kind == CHECK:
            payload = _run_check(item)
        else:
            payload = _run_effect(item)
    except Exception as exc:  # an expected failure of the item, not of the self-test
        traceback.print_exc()
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        payload = {"status": "error", "detail": f"{type(exc).__name__}: {first}"[:300]}
    payload["seconds"] = time.perf_counter() - t0
    sys.stdout.flush()
    sys.stderr.flush()
    tmp = Path(result_path).with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, default=str), encoding="utf-8")
    tmp.replace(result_path)
