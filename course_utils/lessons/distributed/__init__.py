"""Lesson 06, DistributedDataParallel: what notebook 06 calls as `lesson.*`.

Modules: workload (the problem every process imports, and the trace), launch (torchrun from
a notebook, with a deadline), probe and bench (torchrun entry points), reference (answers and
the single-process replay), judge and checks (verdicts), demo (what the notebook shows).
"""

from .checks import THRESHOLDS, check_ddp_script, check_no_sync
from .demo import (
    Scaling,
    measure_scaling,
    multinode_command,
    plot_scaling,
    scaling_table,
    scaling_verdict,
    unpickle_in_fresh_process,
    what_pickle_stores,
    workdir,
)
from .reference import reference_accumulate

__all__ = [
    "THRESHOLDS",
    "Scaling",
    "check_ddp_script",
    "check_no_sync",
    "measure_scaling",
    "multinode_command",
    "plot_scaling",
    "reference_accumulate",
    "scaling_table",
    "scaling_verdict",
    "unpickle_in_fresh_process",
    "what_pickle_stores",
    "workdir",
]
