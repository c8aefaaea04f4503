"""course_utils: the measuring harness and grading tools of the Faster PyTorch Training course."""

from . import checks, plots
from .data import OfflineImages, load_data, to_tensors
from .device import amp_dtype, device_class, get_device, peak_flops, synchronize
from .measure import (
    activation_bytes,
    compare,
    cuda_peak_memory,
    flops,
    mfu,
    peak_rss,
    steady_cpu,
    throughput,
    time_fn,
)
from .mode import is_quick, pick
from .models import MLP, ResNet9, SeqRNN, SmallCNN, count_parameters
from .session import env, seed_everything, setup
from .train import History, evaluate, train

__all__ = [
    "History",
    "MLP",
    "OfflineImages",
    "ResNet9",
    "SeqRNN",
    "SmallCNN",
    "activation_bytes",
    "amp_dtype",
    "checks",
    "compare",
    "count_parameters",
    "cuda_peak_memory",
    "device_class",
    "env",
    "evaluate",
    "flops",
    "get_device",
    "is_quick",
    "load_data",
    "mfu",
    "peak_flops",
    "peak_rss",
    "pick",
    "plots",
    "seed_everything",
    "setup",
    "steady_cpu",
    "synchronize",
    "throughput",
    "time_fn",
    "to_tensors",
    "train",
]
