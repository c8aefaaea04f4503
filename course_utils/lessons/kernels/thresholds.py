"""Every number lesson 17's checks compare against, with the evidence that sized it."""

from __future__ import annotations

from ...checks import Threshold

THRESHOLDS = {
    "softmax_atol": Threshold(
        1e-5,
        "max |learner - torch.softmax| over a case's rows (float32). The reference kernel: "
        "1.4e-9 to 3.2e-8 on the check's 5 cases (Triton 3.8's interpreter, CPU, torch 2.14); "
        "the colleague's kernel, lanes loaded as 0.0, is off by 0.054 to 0.26 on each case "
        "whose rows are not a power of two long and hold numbers below 0 (tests/"
        "test_lesson_17.py); an exp without the max gives nan on the entries in the hundreds",
        measured_on=("cpu-bf16",),
    ),
    "flash_atol": Threshold(
        5e-3,
        "max |learner - SDPA (causal)| over a case's outputs (float32). The reference kernel: "
        "2.6e-7 to 2.3e-6 on the check's 3 cases (interpreter, CPU; scores up to 16). Not measured on a GPU yet: there tl.dot rounds float32 to "
        "TF32 (10-bit mantissa, errors about 1e-3 on these scores), hence the room. A kernel "
        "that does not rescale its accumulator or its sum when the max grows is off by 0.24 to "
        "2.9 on the check's growing and random cases, for tiles of 16 to 64 keys",
        measured_on=("cpu-bf16",),
    ),
    "traffic_atol": Threshold(
        0.5,
        "bytes: the counts are whole numbers, and the smallest piece a mistake can miss is one "
        "element of one tensor; 0.5 absorbs only float arithmetic",
    ),
}
