"""Lesson 14: the timeline and the compiler's modes. Traces read from Python (trace, intervals),
the loops recorded (loops; on two ranks worker and launch), the timeline drawn (timeline_plot),
Dynamo's view of a model (dynamo), exercise 2's models and scenarios (models, plans, with the
costs measure_costs wrote), the demos (demo); answers in reference (exercise 1's analysis in
attribution), checks in stall_check and compile_check (thresholds in thresholds)."""

from . import intervals as spans
from .checks import THRESHOLDS, check_compile_plan, check_find_stall
from .demo import (
    DEMO_LOOP,
    compile_seconds,
    costs_table,
    fixed_vs_slow,
    overlap,
    reduce_overhead,
    regional_rounds,
)
from .dynamo import Graphs, compiles, graphs
from .launch import record_ranks
from .loops import PHASE_SETS, make_step, record, record_loop, spec
from .models import MODELS, Block, Net, apply, batch, build, train_step
from .plans import WHERE, CompileScenario, costs, scenario
from .reference import reference_choose_compile, reference_find_stall
from .timeline_plot import plot_timeline
from .trace import Event, events, load, main_thread, rank, steps, threads, within

__all__ = [
    "DEMO_LOOP",
    "MODELS",
    "PHASE_SETS",
    "THRESHOLDS",
    "WHERE",
    "Block",
    "CompileScenario",
    "Event",
    "Graphs",
    "Net",
    "apply",
    "batch",
    "build",
    "check_compile_plan",
    "check_find_stall",
    "compile_seconds",
    "compiles",
    "costs",
    "costs_table",
    "events",
    "fixed_vs_slow",
    "graphs",
    "load",
    "main_thread",
    "make_step",
    "overlap",
    "plot_timeline",
    "rank",
    "record",
    "record_loop",
    "record_ranks",
    "reduce_overhead",
    "reference_choose_compile",
    "reference_find_stall",
    "regional_rounds",
    "scenario",
    "spans",
    "spec",
    "steps",
    "threads",
    "train_step",
    "within",
]

# harness functions that compute an exercise's answer under another name: the grading kernel
# withholds them (course_utils.grading.kernel_harness). attribution splits a trace's phases
# into the four kinds and names the largest stall: exercise 1 whole
ANSWERS_ELSEWHERE = (
    "course_utils.lessons.timeline.attribution:breakdown",
    "course_utils.lessons.timeline.attribution:scores",
    "course_utils.lessons.timeline.attribution:stall_of",
)
