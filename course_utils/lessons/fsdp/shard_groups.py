"""Exercise 3's structural probe: the learner's `shard_model` run once here, on a pretend world
of 2 (sharding.fake_world), before any launch. It tells which FSDP2 group holds each parameter
and, where shard_model raised or returned another module, why, so that the check's messages
name a cause only where this probe saw it.

A parameter belongs to the group of the nearest module, itself or above it, that `fully_shard`
made an `FSDPModule` (FSDP2's own rule: a call manages what no nested call already manages);
one that no such module holds stays a plain tensor, in no group.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path

from torch import nn

WORLD = 2


@dataclass
class Preflight:
    """What shard_model did to a fresh model on rank 0 of a pretend world of 2."""

    raised: BaseException | None = None
    root_first: str = ""  # the submodule whose fully_shard raised under an already sharded one
    copy: str = ""  # the type of another module returned while the one given stayed plain
    plain: list[str] = field(default_factory=list)  # parameters in no group
    blocks_in_root: list[int] = field(default_factory=list)  # blocks in the root's group


def _load(path: Path, suffix: str):
    spec = importlib.util.spec_from_file_location(f"learner_{path.stem}_{suffix}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def owners(model: nn.Module) -> dict[str, str]:
    """parameter name -> the name of the FSDPModule whose group holds it ('' the root; None:
    in no group)."""
    from torch.distributed.fsdp import FSDPModule

    sharded = {name for name, m in model.named_modules() if isinstance(m, FSDPModule)}
    out = {}
    for name, _ in model.named_parameters():
        parts = name.split(".")[:-1]
        prefixes = [".".join(parts[:i]) for i in range(len(parts), -1, -1)]
        out[name] = next((p for p in prefixes if p in sharded), None)
    return out


def _fully_shard_target(exc: BaseException):
    """The module (or list of modules) of the innermost torch `fully_shard` call the exception
    came out of, or None."""
    target, tb = None, exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_name == "fully_shard" and "fsdp" in code.co_filename.replace("\\", "/"):
            target = tb.tb_frame.f_locals.get("module", target)
        tb = tb.tb_next
    return target


def _sharded_above(model: nn.Module, exc: BaseException) -> str:
    """The name of the submodule whose fully_shard raised while a module holding it had been
    sharded already ('' where that is not what happened)."""
    from torch.distributed.fsdp import FSDPModule

    target = _fully_shard_target(exc)
    targets = target if isinstance(target, list | tuple) else [target]
    names = {id(m): n for n, m in model.named_modules()}
    for t in targets:
        name = names.get(id(t))
        if not name:  # not in the model, or the root itself
            continue
        above = [".".join(name.split(".")[:i]) for i in range(name.count(".") + 1)]
        modules = dict(model.named_modules())
        if any(isinstance(modules[a], FSDPModule) for a in above):
            return name
    return ""


def preflight(path: Path, spec) -> Preflight:
    """Run the file's shard_model once on `spec.build()` in this process (rank 0 of 2)."""
    from torch.distributed.tensor import DTensor

    from .sharding import fake_world

    module = _load(path, "preflight")
    model, out = spec.build(), Preflight()
    with fake_world(0, WORLD):
        try:
            returned = module.shard_model(model)
        except NotImplementedError:
            raise
        except Exception as exc:  # the learner's code: the check names what it can
            out.raised, out.root_first = exc, _sharded_above(model, exc)
            return out
        params = dict(model.named_parameters())
        if not any(isinstance(p, DTensor) for p in params.values()) and (
            isinstance(returned, nn.Module) and returned is not model
        ):
            out.copy = type(returned).__name__
        owner = owners(model)
        out.plain = [n for n, o in owner.items() if o is None]
        out.blocks_in_root = sorted(
            {int(n.split(".")[1]) for n, o in owner.items() if o == "" and n.startswith("blocks.")}
        )
    return out
