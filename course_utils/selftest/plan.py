"""Which notebooks fit a time budget, by their estimated full-mode run time here.

`python -m course_utils.selftest.plan SELFTEST_JSON SECONDS` prints the prefixes (04,05,...)
of the notebooks that fit, in teaching order, skipping any whose estimate alone exceeds
what is left; scripts/gpu_check.sh passes them to `course report --only`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def fit_budget(estimates: list[dict], seconds: float) -> list[str]:
    chosen, left = [], seconds
    for e in estimates:
        if e["estimate_s"] <= left:
            chosen.append(e["notebook"].split("_")[0])  # "02b" for 02b_large_batch
            left -= e["estimate_s"]
    return chosen


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m course_utils.selftest.plan SELFTEST_JSON SECONDS", file=sys.stderr)
        return 2
    data = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    print(",".join(fit_budget(data["estimates"], float(argv[1]))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
