"""Every number lesson 14's checks compare against, with the evidence that sized it."""

from __future__ import annotations

from ...checks import Threshold

THRESHOLDS = {
    # exercise 1: the stall a trace shows
    "lead": Threshold(
        2.0,
        "the judge keeps a recording only where its own reading puts the planted stall's seconds "
        "at this many times the next largest (kind, phase, rank): else the machine's load hid it "
        "and it records again. Measured (stall_check.lead of every stall and phase of "
        "stall_check.ONE, 2 seeds each, one process, one thread; every two-rank specimen in one "
        "launch of 2 gloo processes), load 12-19 on the 2-core AMD EPYC (other sessions' tests "
        "beside it), n=19 recordings: lead 4.1-511, median 12; lowest: compute in the last "
        "phase (4.1, 5.4), a late rank 1 in 'forward' (4.6). 2.0 keeps every recording of a "
        "busy machine and still drops one where a spike of load doubled another phase",
        measured_on=("cpu-bf16",),
    ),
    "attempts": Threshold(3, "recordings per specimen before it is called undecidable here"),
    # exercise 2: a compile plan for a job
    "total_slack": Threshold(
        0.10,
        "a plan passes if its job time (compile + steps x step, from the measured costs) is within "
        "this fraction of the best plan that fits the budget. The costs (compile_costs.py, "
        "measure_costs.py: Inductor, one thread, each plan in a fresh process, 2-core AMD EPYC "
        "at load 14-24, n=8 plans, 30 interleaved pairs of steps each) put the places whose steady "
        "steps differ by less than the pairs resolve at this load within 1.06 of each other "
        "(whole vs blocks: stack 1.01-1.02, logs-norm 1.06, clamps 1.00), and every plan a rule "
        "of section 3 refuses at 1.18 or more (eager on a long job 1.18-1.42, the recompiling "
        "whole model 1.21-1.23, any compile on a short run 1.37-3.6); tests/test_lesson_14.py "
        "keeps every scenario and draw 3% or more away from 1.10",
        measured_on=("cpu-bf16",),
    ),
}
