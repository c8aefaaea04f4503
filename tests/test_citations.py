"""Notebooks cite Kuhn's guide by the guide's own tip numbers, never a translation's sections."""

import json
import re
from pathlib import Path

import pytest

SOLUTIONS = Path(__file__).resolve().parents[1] / "solutions"

# The guide's numbering (efficientdl.com/faster-deep-learning-in-pytorch-a-guide/): 1 LR schedule,
# 2 DataLoader workers + pinned memory, 3 max batch size, 4 AMP, 5 optimizer, 6 cudnn.benchmark,
# 7 CPU-GPU transfers, 8 checkpointing, 9 accumulation, 10 DDP, 11 set_to_none, 12 as_tensor,
# 13 debug APIs off, 14 gradient clipping, 15 no bias before BN, 16 no grad in validation,
# 17 input and batch normalisation.
TIPS = {
    "01_one_cycle": {1, 5},
    "02_batch_size": {3},
    "03_data_loading": {2, 17},
    "04_mixed_precision": {4},
    "05_fast_kernels": {6},
    "06_ddp": {10},
    "07_accumulation_checkpointing": {8, 9},
    "08_gradient_clipping": {14},
    "09_no_bias_before_bn": {15},
    "10_habits": {7, 11, 12, 13, 16},
}


def markdown(name: str) -> str:
    nb = json.loads((SOLUTIONS / f"{name}.ipynb").read_text())
    return "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")


@pytest.mark.parametrize("name", sorted(TIPS))
def test_notebook_cites_the_guides_own_tip_numbers(name):
    text = markdown(name)
    cited = {int(n) for n in re.findall(r"\b[Tt]ips? (\d+)", text)}
    cited |= {int(n) for n in re.findall(r"\b[Tt]ips \d+ and (\d+)", text)}
    assert TIPS[name] <= cited, f"{name} cites tips {sorted(cited)}, expected {sorted(TIPS[name])}"
    assert not (cited - set(range(1, 18))), f"{name} cites a tip the guide does not have"


@pytest.mark.parametrize("name", sorted(TIPS))
def test_the_guide_is_never_cited_by_section(name):
    for line in markdown(name).splitlines():
        if "efficientdl.com" in line or "guide" in line.lower():
            assert not re.search(
                r"\b[Ss]ection \d+\b[^.]*guide|guide[^.]*\b[Ss]ection \d+\b", line
            ), line
