"""The capstone's full-mode figures by estimate, per GPU: the whole notebook's run time against
its budget (issue 15: 15 minutes on a T4, 3 on an A100/H100) and the ratio the speed-run
check's time part would read for the reference (baseline / reference), against the full-mode
threshold that GPU gets. No GPU is needed: the figures come from the run-time estimator's rates
(course_utils/selftest/estimate.py) and the capstone's counted costs (capstone/selftest.py),
with a host as fast as the reference machine's 2 vCPUs (Colab's T4 has 2 as well).

    python scripts/capstone_estimates.py > docs/results/capstone-full-mode-estimate.md

A measured figure replaces these: `bash scripts/gpu_check.sh` on the GPU.
"""

from __future__ import annotations

import datetime

import torch

from course_utils.lessons.capstone.selftest import full_mode_estimates


def main() -> None:
    print("# Capstone full mode by estimate (no GPU run yet)\n")
    print(
        f"Written by `python scripts/capstone_estimates.py` on {datetime.date.today()}, torch "
        f"{torch.__version__}. Estimates, not measurements: the method is in docs/gpu.md "
        '("How the capstone\'s figures were made").\n'
    )
    print(
        "| GPU | notebook (s) | budget (s) | baseline run (s) | reference run (s) | ratio | bar |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in full_mode_estimates():
        bar = r["bar"].value
        print(
            f"| {r['gpu']} | {r['notebook_s']:.0f} | {r['budget_s']:.0f} | {r['baseline_s']:.0f} "
            f"| {r['reference_s']:.0f} | {r['ratio']:.2f}x | {bar}x |"
        )
    print("\nRates (achieved FLOP/s: fp32, then 16-bit under autocast):\n")
    for r in full_mode_estimates():
        print(f"- {r['gpu']}: {r['rates']}")
    print(
        "\nThe baseline run is the check's: 5 epochs at batch 32 in fp32, per-image decoding in "
        "the training process (a lower bound of its time to 94%); the reference run is 16 "
        "epochs at batch 512 under autocast, decoded once."
    )


if __name__ == "__main__":
    main()
