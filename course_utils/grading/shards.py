"""`course grade --shard I/N` and `course grade merge OUT`: grading split across jobs of an
engine that runs one command N times (a Slurm job array, a Kubernetes Indexed Job, a CI
matrix), merged afterwards.

The submissions, sorted by name, are dealt to the shards in turn (the i-th to shard i mod N):
shards differ by at most one submission, and every job given the same folder agrees on the
split, on any machine and in every rerun. Shard I grades its part into OUT/shards/I/ like a
serial run (its own state file: a rerun grades only what changed) and writes shard.json with
the full list of submissions, so that merge can name every one without a result.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError
from .feedback import write_csvs
from .outbox import STATE_FILE
from .records import Row, Submission
from .settings import RunSettings

MANIFEST = "shard.json"


def parse(spec: str) -> tuple[int, int]:
    try:
        index, count = (int(x) for x in spec.split("/"))
    except ValueError:
        raise UsageError(f"--shard {spec}: expected I/N, e.g. 0/4 (I from 0 to N-1)") from None
    if count < 1 or not 0 <= index < count:
        raise UsageError(f"--shard {spec}: I must be 0..N-1 and N >= 1")
    return index, count


def shard_of(name: str, names: list[str], count: int) -> int:
    """The shard of `name` among all `names` (see the module docstring)."""
    return sorted(names).index(name) % count


def start_shard(
    subs: list[Submission], out: Path, spec: str, sol_digest: str, run: RunSettings
) -> tuple[list[Submission], Path]:
    """This shard's submissions and its folder, with its manifest written."""
    index, count = parse(spec)
    folder = out / "shards" / str(index)
    folder.mkdir(parents=True, exist_ok=True)
    manifest = {
        "index": index,
        "count": count,
        "submissions": [s.name for s in subs],
        "solutions": sol_digest,
        "run": run.tag(),
    }
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    names = [s.name for s in subs]
    return [s for s in subs if shard_of(s.name, names, count) == index], folder


@dataclass
class MergeResult:
    out: Path
    graded: int
    missing: list[str]

    @property
    def ok(self) -> bool:
        return not self.missing

    def __str__(self) -> str:
        if self.missing:
            return (
                f"merge: {len(self.missing)} submission(s) have no result; nothing written:\n"
                + "\n".join(f"  {name} (shard {shard})" for name, shard in self.missing)
            )
        return f"merged {self.graded} submission(s) -> {self.out / 'grades.csv'}"


def _manifests(out: Path) -> dict[int, dict]:
    found = {}
    for path in sorted((out / "shards").glob(f"*/{MANIFEST}")):
        found[int(path.parent.name)] = json.loads(path.read_text(encoding="utf-8"))
    if not found:
        raise UsageError(f"nothing to merge: no {out / 'shards' / '*' / MANIFEST}")
    first = next(iter(found.values()))
    for index, m in found.items():
        for key in ("count", "submissions", "solutions", "run"):
            if m[key] != first[key]:
                raise UsageError(
                    f"shard {index} was graded with another {key} than the others "
                    "(submissions, solutions or settings changed in between): rerun it"
                )
    return found


def merge(out: Path, *, allow_mixed_devices: bool = False) -> MergeResult:
    """grades.csv and summary.csv in the serial order, feedback and executed notebooks copied
    up, from every shard under `out`; nothing is written while a submission lacks a result."""
    manifests = _manifests(out)
    first = next(iter(manifests.values()))
    count, names = first["count"], first["submissions"]
    states = {
        i: json.loads(p.read_text()) if (p := out / "shards" / str(i) / STATE_FILE).exists() else {}
        for i in range(count)
    }
    missing, per_submission, devices = [], [], set()
    for name in names:
        shard = shard_of(name, names, count)
        entry = states[shard].get(name) if shard in manifests else None
        if entry is None:
            missing.append((name, shard))
            continue
        rows = [Row(**r) for r in entry["rows"]]
        per_submission.append(rows)
        devices |= {r.device_class for r in rows if r.device_class}
    if missing:
        return MergeResult(out, 0, missing)
    if len(devices) > 1 and not allow_mixed_devices:
        raise UsageError(
            f"the shards ran on different device classes ({', '.join(sorted(devices))}); "
            "pass --allow-mixed-devices to merge them anyway"
        )
    for kind, suffix in (("feedback", ".md"), ("executed", ".ipynb")):
        (out / kind).mkdir(parents=True, exist_ok=True)
        for name in names:
            file = Submission(Path(name), name).slug + suffix
            source = out / "shards" / str(shard_of(name, names, count)) / kind / file
            if source.exists():
                shutil.copyfile(source, out / kind / file)
    write_csvs(out, per_submission)
    return MergeResult(out, len(per_submission), [])
