"""Every number lesson 16's checks compare against, with the evidence that sized it."""

from __future__ import annotations

from ...checks import Threshold

THRESHOLDS = {
    # exercise 1: predicted collectives against counted ones
    "bytes_atol": Threshold(
        0.5,
        "slack in bytes and calls on each predicted figure: counts and sizes are whole numbers, "
        "deterministic (the real parallelize_module on a pretend world, equal in every run and "
        "equal to the counts of 2 gloo processes: tests/test_lesson_16.py), and the smallest "
        "piece a mistake can miss is one bf16 element; 0.5 absorbs only float arithmetic",
    ),
    # exercise 2: a plan for a job
    "slower": Threshold(
        1.15,
        "a plan that fits fails if a plan that fits is modelled this much faster (jobs.py's "
        "step model, deterministic). On the check's 5 jobs the best plan is unique; plans the "
        "valid variants of the model pick (DP's all-reduce fully exposed, or hidden under the "
        "whole step; PP's sends left out; the smallest model parallelism that fits, TP first) "
        "are 1.00-1.08x the best. The wrong rules' plans: TP over a whole node 1.22-3.79x "
        "('long sequences', 'a PCIe server', 'a 1.2B model': 1.68x), TP first on PCIe 2.16x, "
        "TP across nodes 3.39-5.95x, PP only 2.20-2.37x, no bubble counted 2.20x, and "
        "ignoring activations picks a plan that does not fit (1.31-3.70x the memory); the "
        "nearest plans above the limit are 1.17x ('a 1.2B model', 'a few micro-batches')",
    ),
    "memory_margin": Threshold(
        0.07,
        "no plan that the check would pass on time (within `slower` of the fastest) needs "
        "within 7% of the GPU's memory (jobs.py's model: the nearest are 0.83-0.88 of it for "
        "the best plans and 1.17 for 'bigger than a node' (1, 4, 8), which does not fit); the "
        "plans within 7% of it are 1.36x the best or slower. So a learner's memory estimate "
        "that differs a little (embeddings, a buffer) passes and fails the same plans "
        "(tests/test_lesson_16.py)",
    ),
    # exercise 3: a learner's parallelize_module
    "output_atol": Threshold(
        1e-5,
        "max |sharded - whole| over the block's output and every parameter's gradient after "
        "one step on 2 gloo processes (float32): 2.4e-7 for the reference plan, 1.2e-7 with "
        "sequence parallelism; a plan that splits a layer's input and never sums the partial "
        "outputs is off by 0.1 or more",
        measured_on=("cpu-bf16",),
    ),
    "held_fraction": Threshold(
        0.55,
        "elements of each Linear weight a rank holds / the weight's: 0.5 split over 2 ranks "
        "(even rows or columns), 1.0 left whole",
    ),
    "shard_launch_timeout_s": Threshold(
        240, "seconds before exercise 3's launch is killed: 20-40 s at load 7-10"
    ),
    "demo_launch_timeout_s": Threshold(
        600, "seconds before the notebook's launch is killed: 25-40 s at load 7-13"
    ),
}
