"""`course` command: parse arguments, call one library function, map errors to exit codes.

Exit codes: 0 done (whatever learners scored), 1 `assign --check` found differences, a
`report` check or `selftest` item did not pass, or `grade merge` lacks a shard's results;
130 interrupted,
2 usage error (bad path, nothing to grade) or an environment that cannot run the course (a
torchvision built for another torch: `course env` names the pip command), 3 a malformed
solution notebook.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .errors import AuthoringError, CourseError, UsageError


def _env(args) -> int:
    from .compat import require_torchvision

    require_torchvision()  # a mismatched pair: one line with the fix (exit 2), not a traceback
    from .session import env

    info = env(verbose=not args.json)
    if args.json:
        print(json.dumps(info, indent=2, default=str))
    return 0


def _assign(args) -> int:
    from .authoring import assign, normalise_solutions

    sources = normalise_solutions(args.solutions, check=args.check)
    changed = assign(args.solutions, args.notebooks, check=args.check)
    if args.check:
        for name in sources:
            print(f"nbgrader metadata incomplete: {Path(args.solutions) / name}")
        for name in changed:
            print(f"out of date: {Path(args.notebooks) / name}")
        if changed or sources:
            print("Run `course assign` to regenerate notebooks/ from solutions/.")
        return 1 if changed or sources else 0
    if sources:
        print(f"completed nbgrader metadata in {len(sources)} solution(s): " + ", ".join(sources))
    print(
        f"wrote {len(changed)} notebook(s)"
        + (": " + ", ".join(changed) if changed else " (all up to date)")
    )
    return 0


def _grade(args) -> int:
    if args.paths[0] == "merge" and not Path("merge").exists():
        return _merge(args)
    if args.dask and args.shard:
        raise UsageError("--dask and --shard: choose one (a shard may not start a cluster)")
    if args.dask and args.jobs > 1:
        raise UsageError("--jobs is for grading on this machine; with --dask, add workers")
    from .grading import grade

    try:
        summary = grade(
            [Path(p) for p in args.paths],
            out=Path(args.out),
            solutions=Path(args.solutions),
            cell_timeout=args.timeout,
            quick=args.quick,
            jobs=args.jobs,
            checks_only=args.checks_only,
            dask=args.dask,
            shard=args.shard,
            allow_mixed_devices=args.allow_mixed_devices,
            lesson=args.lesson,
            isolation=args.isolation,
        )
    except KeyboardInterrupt:
        from .grading.outbox import STATE_FILE

        print(
            f"course grade: interrupted; what was graded is kept in {Path(args.out)}/**/{STATE_FILE}: "
            "run the same command again to continue",
            file=sys.stderr,
        )
        return 130
    print(summary)
    return 0


def _merge(args) -> int:
    """`course grade merge OUT`: the shards under OUT into OUT/grades.csv; 1 if any lacks."""
    from .grading.shards import merge

    if len(args.paths) != 2:
        raise UsageError("usage: course grade merge OUT (the --out folder the shards wrote to)")
    result = merge(Path(args.paths[1]), allow_mixed_devices=args.allow_mixed_devices)
    print(result, file=sys.stdout if result.ok else sys.stderr)
    return 0 if result.ok else 1


def _report(args) -> int:
    from .report import report

    result = report(
        solutions=Path(args.solutions),
        out=Path(args.out),
        quick=args.quick,
        timeout=args.timeout,
        only=[o.strip() for o in args.only.split(",") if o.strip()] if args.only else None,
        reference=Path("docs/results") if args.reference else None,
    )
    print(result.summary() if hasattr(result, "summary") else result)
    print(f"report: {Path(args.out) / 'report.md'} and {Path(args.out) / 'report.html'}")
    return 0 if getattr(result, "ok", True) else 1


def _book(args) -> int:
    import time

    from .book import build_book
    from .book.links import check_links

    t0 = time.perf_counter()
    out = Path(args.out)
    warnings = build_book(out, Path(args.from_), with_solutions=args.with_solutions)
    links = check_links(out)
    for line in warnings + links.broken:
        print(line, file=sys.stderr)
    print(
        f"book: {out / 'index.html'}: {links.pages} pages, {links.checked} internal links "
        f"checked, {len(links.broken)} broken, {len(warnings)} Sphinx warnings, "
        f"{time.perf_counter() - t0:.0f} s"
    )
    return 0 if not (warnings or links.broken) else 1


def _selftest(args) -> int:
    from .selftest import selftest

    result = selftest(
        Path(args.out),
        quick=args.quick,
        only=[o.strip() for o in args.only.split(",") if o.strip()] if args.only else None,
        budget=args.budget,
        timeout=args.timeout,
        reference=Path("docs/results") if args.reference else None,
    )
    print(result.summary())
    print(f"selftest: {Path(args.out) / 'selftest.md'} and {Path(args.out) / 'selftest.json'}")
    return 0 if result.ok else 1


def _export(args) -> int:
    from .grading.gradescope import export

    print(
        export(
            args.lesson,
            out=Path(args.out) if args.out else None,
            solutions=Path(args.solutions),
            quick=args.quick,
            time_limit_minutes=args.time_limit,
            grade_speed=args.grade_speed,
            torch_index=args.torch_index,
            visibility=args.visibility,
        )
    )
    return 0


def _release(args) -> int:
    from .release import DEFAULT_INSTALL, release

    print(
        release(
            Path(args.dir),
            solutions=Path(args.solutions),
            install_url=args.install_url or DEFAULT_INSTALL,
        )
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="course", description="Faster PyTorch Training course tools"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("env", help="device, device class, versions, peak FLOP/s, data set")
    p.add_argument("--json", action="store_true", help="print as JSON")
    p.set_defaults(run=_env)

    p = sub.add_parser("assign", help="write notebooks/ from solutions/")
    p.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if notebooks/ differ"
    )
    p.add_argument("--solutions", default="solutions")
    p.add_argument("--notebooks", default="notebooks")
    p.set_defaults(run=_assign)

    p = sub.add_parser(
        "grade",
        help="grade submitted notebooks (files or folders); `course grade merge OUT` joins shards",
    )
    p.add_argument(
        "paths", nargs="+", help="submitted notebooks, or folders of them; or: merge OUT"
    )
    p.add_argument("--out", default="grades", help="where grades.csv, summary.csv, feedback/ go")
    p.add_argument("--timeout", type=float, default=600, help="seconds per cell (default 600)")
    p.add_argument("--quick", action="store_true", help="run with quick=True (small workloads)")
    p.add_argument(
        "--jobs", type=int, default=1, help="submissions at once; >1 makes timings noisy"
    )
    p.add_argument(
        "--solutions", default="solutions", help="where the locked check cells come from"
    )
    p.add_argument(
        "--checks-only",
        action="store_true",
        help="skip the demo cells no check depends on (tagged `demo`); same verdicts, less time",
    )
    p.add_argument(
        "--dask",
        metavar="ADDRESS",
        help="grade on a Dask cluster: tcp://HOST:8786, or local:N for N workers here",
    )
    p.add_argument(
        "--shard",
        metavar="I/N",
        help="grade only shard I of N (0-based) into OUT/shards/I; then `course grade merge OUT`",
    )
    p.add_argument(
        "--allow-mixed-devices",
        action="store_true",
        help="accept workers or shards of different device classes",
    )
    p.add_argument(
        "--lesson",
        metavar="NN",
        help="every submission answers this lesson (08 or its name): an unreadable one still "
        "counts 0 of its points",
    )
    p.add_argument(
        "--isolation",
        choices=["auto", "bwrap", "user", "none"],
        default="auto",
        help="how each learner's kernel is sandboxed: bwrap where it works, else a grading "
        "user (root); none runs learner code as you (debugging only)",
    )
    p.set_defaults(run=_grade)

    p = sub.add_parser("report", help="run every solution notebook; write results table and plots")
    p.add_argument(
        "--quick",
        action="store_true",
        help="small workloads (about a minute per notebook on a CPU)",
    )
    p.add_argument("--out", default="report")
    p.add_argument("--timeout", type=float, default=900, help="seconds per cell")
    p.add_argument(
        "--only", help="comma-separated notebook prefixes (e.g. 04,05); merged into OUT's results"
    )
    p.add_argument(
        "--reference",
        action="store_true",
        help="also write docs/results/<device-class>-<device>.md/.json (the committed references)",
    )
    p.add_argument("--solutions", default="solutions")
    p.set_defaults(run=_report)

    p = sub.add_parser(
        "book",
        help="the course as a static site: the learner notebooks with a report run's outputs, "
        "results per device, a cheat sheet, a glossary",
    )
    p.add_argument("--out", default="site")
    p.add_argument(
        "--from", dest="from_", default="report", help="the folder `course report` wrote"
    )
    p.add_argument(
        "--with-solutions", action="store_true", help="show the reference answers (instructors)"
    )
    p.set_defaults(run=_book)

    p = sub.add_parser(
        "selftest",
        help="every check with its reference answer and every headline effect, each in its own "
        "process; run-time estimates per notebook (no notebook tools needed)",
    )
    p.add_argument("--quick", action="store_true", help="small workloads (quick mode)")
    p.add_argument("--only", help="comma-separated notebook prefixes (e.g. 04,07)")
    p.add_argument(
        "--budget", type=float, help="seconds for the whole run; items left over are skipped"
    )
    p.add_argument("--timeout", type=float, help="seconds per item (default 300 quick, 900 full)")
    p.add_argument(
        "--out", default="selftest", help="where selftest.json/.md and the resume state go"
    )
    p.add_argument(
        "--reference",
        action="store_true",
        help="also write docs/results/<class>-<device>-selftest.{json,md} (only if all ok)",
    )
    p.set_defaults(run=_selftest)

    p = sub.add_parser(
        "release",
        help="write the learner edition to DIR: notebooks and harness, no reference answers",
    )
    p.add_argument("dir", metavar="DIR", help="a new (or empty) folder")
    p.add_argument("--solutions", default="solutions")
    p.add_argument(
        "--install-url",
        help="what the notebooks' Colab setup cell pip-installs (default: this course's git "
        "URL, the full course, references included: pass where you host DIR)",
    )
    p.set_defaults(run=_release)

    p = sub.add_parser("export", help="export a notebook's grading to another platform")
    targets = p.add_subparsers(dest="target", required=True)
    p = targets.add_parser("gradescope", help="a Gradescope autograder zip for notebook NN")
    p.add_argument("lesson", metavar="NN", help="the notebook: its number (08) or name")
    p.add_argument("--out", help="the zip to write (default autograder_NN.zip)")
    p.add_argument("--quick", action="store_true", help="grade with small workloads (advised)")
    p.add_argument(
        "--time-limit",
        type=int,
        default=40,
        help="minutes: the autograder timeout you set on Gradescope (default 40, its maximum)",
    )
    p.add_argument(
        "--grade-speed",
        action="store_true",
        help="grade speed parts too (only with more CPUs than Gradescope's default half vCPU)",
    )
    p.add_argument(
        "--torch-index",
        default="https://download.pytorch.org/whl/cpu",
        help="where setup.sh installs torch from (default: the PyTorch CPU wheels); "
        "$COURSE_TORCH_INDEX overrides it when Gradescope builds the autograder",
    )
    p.add_argument(
        "--visibility",
        # gradescope.VISIBILITIES, not imported here: the parser stays free of nbformat
        choices=("hidden", "after_due_date", "after_published", "visible"),
        default="after_due_date",
        help="when learners see each check's messages and hint (scores: always); "
        "default after_due_date",
    )
    p.add_argument("--solutions", default="solutions")
    p.set_defaults(run=_export)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except ModuleNotFoundError as exc:
        print(
            f"course {args.command}: needs {exc.name}, one of the course tools: "
            "pip install 'faster-pytorch-training[tools]'",
            file=sys.stderr,
        )
        return 2
    except AuthoringError as exc:
        print(f"course {args.command}: malformed notebook: {exc}", file=sys.stderr)
        return 3
    except UsageError as exc:
        print(f"course {args.command}: {exc}", file=sys.stderr)
        return 2
    except CourseError as exc:
        print(f"course {args.command}: {exc}", file=sys.stderr)
        return 2
