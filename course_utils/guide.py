"""Kuhn's guide, which the course follows: its title, its address, and its own numbering of
its tips (1-17), which the lessons cite (course_utils.techniques ties each tip to its lesson).

Faster Deep Learning Training with PyTorch – a 2021 Guide,
https://efficientdl.com/faster-deep-learning-in-pytorch-a-guide/
"""

from __future__ import annotations

TITLE = "Faster Deep Learning Training with PyTorch – a 2021 Guide"
URL = "https://efficientdl.com/faster-deep-learning-in-pytorch-a-guide/"

# The guide's own numbering and titles of its tips.
GUIDE_TIPS = {
    1: "Consider using another learning rate schedule",
    2: "Use multiple workers and pinned memory in DataLoader",
    3: "Max out the batch size",
    4: "Use Automatic Mixed Precision (AMP)",
    5: "Consider using another optimizer",
    6: "Turn on cuDNN benchmarking",
    7: "Beware of frequently transferring data between CPUs and GPUs",
    8: "Use gradient/activation checkpointing",
    9: "Use gradient accumulation",
    10: "Use DistributedDataParallel for multi-GPU training",
    11: "Set gradients to None rather than 0",
    12: "Use .as_tensor() rather than .tensor()",
    13: "Turn off debugging APIs if not needed",
    14: "Use gradient clipping",
    15: "Turn off bias before BatchNorm",
    16: "Turn off gradient computation during validation",
    17: "Use input and batch normalization",
}
