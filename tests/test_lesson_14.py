"""Lesson 14's checks pass the reference answers and a valid alternative (the notebook's own),
and fail the answers a learner who half-understands would write, with a message naming what
the judge's reading of the trace (exercise 1) or Dynamo (exercise 2) confirms.

Exercise 1 records its loops on this machine: the one-process ones in this process, the
two-rank ones by one launch of 2 processes, recorded once per test module here (a cached
stand-in for launch.record_ranks) except in the judged tests, whose judge launches its own.
"""

from __future__ import annotations

import json

import pytest
from check_helpers import cells_of, failure, not_attempted, status_of

from course_utils.lessons import timeline as lesson
from course_utils.lessons.timeline import attribution, intervals, launch, loops, plans, stall_check
from course_utils.probes import Local, _FirstChoice

FIND = lesson.reference_find_stall.__wrapped__  # callable as a learner's answer
CHOOSE = lesson.reference_choose_compile.__wrapped__
NOTEBOOK = cells_of("14_timeline_compile", "14_timeline_compile-18", "14_timeline_compile-35",
                    lesson=lesson)  # fmt: skip
_RANKS: dict[str, list] = {}
_RECORD_RANKS = launch.record_ranks  # the real launch, before the fixture replaces it


@pytest.fixture(autouse=True)
def recorded_once(monkeypatch):
    """Two-rank recordings made once per loop for the whole module (each launch costs 10-60 s)."""

    def cached(batch, **kwargs):
        key = [json.dumps(loop, sort_keys=True) for loop in batch]
        todo = [loop for k, loop in zip(key, batch, strict=True) if k not in _RANKS]
        if todo:
            for loop, traces in zip(todo, _RECORD_RANKS(todo), strict=True):
                _RANKS[json.dumps(loop, sort_keys=True)] = traces
        return [_RANKS[k] for k in key]

    monkeypatch.setattr(stall_check.launch, "record_ranks", cached)


def parts_of(check, answer) -> list:
    return check.__wrapped__(Local(answer))


def failed(parts) -> list:
    return [p for p in parts if p.status == "failed"]


# --- the pieces ------------------------------------------------------------------------------


def test_intervals_merge_intersect_and_subtract():
    a = intervals.merge([(0, 2), (1, 3), (5, 6)])
    assert a == [(0, 3), (5, 6)]
    assert intervals.intersect(a, [(2, 5.5)]) == [(2, 3), (5, 5.5)]
    assert intervals.subtract(a, [(1, 2), (5, 7)]) == [(0, 1), (2, 3)]
    assert intervals.total(a) == 4


def test_a_recorded_trace_has_its_steps_phases_and_main_thread():
    trace = loops.record_loop(loops.spec("none"))[0]
    assert len(lesson.steps(trace)) == loops.ACTIVE and lesson.rank(trace) == 0
    names = [n for n, _ in attribution.phases(trace)]
    assert names == list(loops.PHASE_SETS[0]) * loops.ACTIVE
    parts = attribution.breakdown(trace)  # the four kinds add up to each phase's duration
    for name, p in attribution.phases(trace)[:5]:
        assert sum(parts[name, k] for k in attribution.KINDS) >= p.dur / 1e6 * 0.999


@pytest.mark.parametrize("stall, at", [("host", 4), ("data", 0), ("compute", 3), ("host", 1)])
def test_each_planted_stall_leads_the_judges_reading_of_its_trace(stall, at):
    loop = loops.spec(stall, at, names=1)
    traces = loops.record_loop(loop)
    assert stall_check.lead(traces, loop) >= lesson.THRESHOLDS["lead"].value
    assert FIND(traces) == {"kind": stall, "phase": loops.PHASE_SETS[1][at], "rank": 0}


def test_on_two_ranks_the_waiting_rank_shows_communication_and_the_late_one_the_cause():
    straggler, _ = stall_check.two_rank_specimens(_FirstChoice(0))
    traces = stall_check.launch.record_ranks([straggler])[0]
    kind, phase, late = stall_check.planted(straggler)
    waiting = 1 - late
    waits = attribution.breakdown(traces[waiting]).get(("backward", "communication"), 0)
    waits = max(waits, attribution.breakdown(traces[waiting]).get(("bwd", "communication"), 0))
    assert waits > 0.5 * attribution.breakdown(traces[late])[phase, kind]
    assert FIND(traces) == {"kind": kind, "phase": phase, "rank": late}


# --- exercise 1: name the stall ----------------------------------------------------------------


def test_find_stall_passes_the_reference_and_the_notebooks_own_answer():
    assert lesson.check_find_stall(FIND).status == "passed"
    assert lesson.check_find_stall(NOTEBOOK["find_stall"]).status == "passed"


def test_find_stall_says_not_attempted_before_recording_on_two_ranks(monkeypatch):
    monkeypatch.setattr(stall_check, "_record_two", lambda b: pytest.fail("it launched"))
    assert failure(lesson.check_find_stall, not_attempted).status == "not-attempted"


def _longest_phase(traces):
    """The phase with the longest total, on the rank where it is longest; kind by whether
    operators run in it at all."""
    best = None
    for trace in traces:
        for name, p in attribution.phases(trace):
            if best is None or p.dur > best[1].dur:
                best = (name, p, lesson.rank(trace), trace)
    name, p, rank, trace = best
    ops = [e for e in lesson.events(trace) if e.cat == "cpu_op" and lesson.within(p, e)]
    return {"kind": "compute" if ops else "host", "phase": name, "rank": rank}


def _top_operator(traces):
    """key_averages' habit: the phase holding the operator with the most self time is
    compute."""
    trace = traces[0]
    evs = [e for e in lesson.events(trace) if e.cat == "cpu_op"]
    top = max(evs, key=lambda e: e.dur)
    phase = next(n for n, p in attribution.phases(trace) if lesson.within(p, top))
    return {"kind": "compute", "phase": phase, "rank": 0}


def _no_min_over_ranks(traces):
    """Every rank's own seconds, a wait in a collective counted like any other time."""
    found = {}
    for trace in traces:
        for (phase, kind), s in attribution.breakdown(trace).items():
            found[kind, phase, lesson.rank(trace)] = s
    kind, phase, rank = max(found, key=found.get)
    return {"kind": kind, "phase": phase, "rank": rank}


def _innermost_range(traces):
    """The reference, but naming the innermost range the stall sits in."""
    said = FIND(traces)
    if said["kind"] == "data":
        said["phase"] = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    return said


@pytest.mark.parametrize(
    "answer, broken, cause",
    [
        (_longest_phase, {"run 1", "run 2"}, ""),
        (_top_operator, {"run 1", "run 2"}, ""),
        (_innermost_range, {"run 2"}, "is a range inside the phase"),
        (lambda traces: {"kind": "host", "phase": "log", "rank": 0}, {"run 2", "run 3"}, ""),
    ],
    ids=["longest-phase", "top-operator", "innermost-range", "always-host"],
)
def test_find_stall_fails_the_half_understood_answers(answer, broken, cause):
    parts = parts_of(lesson.check_find_stall, answer)
    names = {p.name.split(" (")[0] for p in failed(parts)}
    assert broken <= names, [(p.name, p.message) for p in parts]
    if cause:
        assert any(cause in p.message for p in failed(parts)), [p.message for p in failed(parts)]


def test_find_stall_fails_the_waiting_rank_whenever_a_reading_without_min_names_it():
    """On the straggler run the waiting rank's all-reduce wait is about the late rank's stall
    (it waits exactly that long, plus the all-reduce), so the largest number of the table names
    the waiting rank in some recordings and the late rank in others: then it is right by chance.
    Whenever it names the waiting rank, the part fails and says why."""
    said = []

    def answer(traces):
        said.append((len(traces), _no_min_over_ranks(traces)))
        return said[-1][1]

    parts = parts_of(lesson.check_find_stall, answer)
    run4 = next(p for p in parts if p.name.startswith("run 4"))
    if "not decidable" in run4.message:
        pytest.skip("this machine's load hid the straggler in every recording")
    named = next(value for ranks, value in said if ranks == 2)  # run 4 is the first of two ranks
    if named["kind"] == "communication":
        assert run4.status == "failed", run4.message
        assert "a collective returns on every rank once the last one" in run4.message
    else:
        assert run4.status == "passed", (named, run4.message)


def test_find_stall_tells_an_answer_of_the_wrong_shape():
    parts = parts_of(lesson.check_find_stall, lambda traces: ("host", "log", 0))
    assert all(p.status == "failed" and "return a dict" in p.message for p in parts)


# --- exercise 2: a compile plan ----------------------------------------------------------------


def test_every_scenario_names_a_measured_model_and_its_answer_holds_for_every_draw():
    """THRESHOLDS['total_slack']: in every scenario and draw, each place that fits is either
    clearly within the slack of the best (accepted) or clearly beyond it (refused), never near
    the edge, and the places accepted are the same in every draw."""
    slack = lesson.THRESHOLDS["total_slack"].value
    for name, (habit, steps_choices, budgets) in plans.SCENARIOS.items():
        assert set(plans.costs(habit)) == set(plans.WHERE), habit
        accepted = set()
        for steps in steps_choices:
            for budget in budgets:
                job = plans.totals(plans.costs(habit), steps, budget)
                ratio = {where: seconds / min(job.values()) for where, seconds in job.items()}
                for r in ratio.values():
                    assert not (1 + slack) / 1.03 < r < (1 + slack) * 1.03, (name, job)
                accepted.add(frozenset(w for w, r in ratio.items() if r <= 1 + slack))
        assert len(accepted) == 1, (name, accepted)


def test_compile_plan_passes_the_reference_and_the_notebooks_own_answer():
    assert lesson.check_compile_plan(CHOOSE).status == "passed"
    assert lesson.check_compile_plan(NOTEBOOK["choose_compile"]).status == "passed"
    assert failure(lesson.check_compile_plan, not_attempted).status == "not-attempted"


def _with(**changes):
    def choose(scenario):
        plan = CHOOSE(scenario)
        for key, fn in changes.items():
            plan[key] = fn(scenario, plan)
        return plan

    return choose


def _ignore_compile(scenario, plan):
    return min(scenario.costs, key=lambda w: scenario.costs[w]["step_s"])


def _ignore_budget(scenario, plan):
    job = plans.totals(scenario.costs, scenario.steps, None)
    return min(job, key=job.get)


@pytest.mark.parametrize(
    "answer, cause",
    [
        (_with(where=lambda s, p: "whole", fullgraph=lambda s, p: True), "fullgraph=True raises"),
        (_with(where=lambda s, p: "blocks"), "the best that fits"),
        (_with(where=_ignore_compile), "the best that fits"),
        (_with(where=_ignore_budget), "over the budget"),
        (_with(fullgraph=lambda s, p: False), "compiles into one graph"),
        (_with(fullgraph=lambda s, p: p["where"] != "none"), "fullgraph=True raises"),
        (_with(mode=lambda s, p: "reduce-overhead"), "CUDA graphs"),
        (_with(mode=lambda s, p: "max-autotune"), "max-autotune"),
    ],
    ids=["always-whole-fullgraph", "always-blocks", "steady-step-only", "no-budget",
         "never-fullgraph", "always-fullgraph", "reduce-overhead-on-cpu", "max-autotune"],
)  # fmt: skip
def test_compile_plan_fails_the_half_understood_answers(answer, cause):
    parts = parts_of(lesson.check_compile_plan, answer)
    assert failed(parts) and any(cause in p.message for p in failed(parts)), [
        (p.name, p.message) for p in parts
    ]


def test_compile_plan_tells_an_answer_of_the_wrong_shape():
    parts = parts_of(lesson.check_compile_plan, lambda s: ("blocks", True, "default"))
    assert all(p.status == "failed" and "return a dict" in p.message for p in parts)


def test_the_costs_file_carries_its_provenance_and_every_plan_the_scenarios_use():
    data = plans.measured()
    assert {"command", "date", "machine", "torch", "load_1min"} <= set(data["provenance"])
    for habit in {h for h, _, _ in plans.SCENARIOS.values()}:
        assert {r["where"] for r in data["plans"] if r["model"] == habit} >= {"whole", "blocks"}


def test_every_threshold_carries_its_evidence():
    for name, t in lesson.THRESHOLDS.items():
        assert len(t.evidence) > 40 and "PLACEHOLDER" not in t.evidence, name


# --- judged as `course grade` judges: the check body here, the learner's side in a child ------

JUDGED = [
    ("14-find-stall", "course_utils.lessons.timeline.reference:reference_find_stall"),
    ("14-compile-plan", "course_utils.lessons.timeline.reference:reference_choose_compile"),
]


@pytest.mark.parametrize("check_id, answer", JUDGED, ids=[c for c, _ in JUDGED])
def test_the_reference_passes_when_judged_outside_the_learners_process(check_id, answer):
    from judge_helpers import remote_verdict

    verdict = remote_verdict(check_id, answer)
    assert verdict["status"] == "passed", verdict["message"]


def test_a_wrong_plan_gets_the_same_verdict_judged_as_in_a_notebook(tmp_path, monkeypatch):
    from judge_helpers import remote_verdict

    (tmp_path / "wrong_14.py").write_text(
        "def always_whole(scenario):\n"
        "    return {'where': 'whole', 'fullgraph': True, 'mode': 'default'}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import wrong_14

    here = status_of(lesson.check_compile_plan, wrong_14.always_whole)
    verdict = remote_verdict("14-compile-plan", "wrong_14:always_whole", paths=(tmp_path,))
    assert here == verdict["status"] == "failed", verdict["message"]
