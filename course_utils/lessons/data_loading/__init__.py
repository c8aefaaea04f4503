"""Lesson 03, feeding the model: profiling an epoch, fixing a slow DataLoader, choosing
num_workers by measuring, and copying uint8 batches to normalise on the device. The notebook
uses it as `lesson`."""

from ...data import close_loader
from ...measure import knee
from .checks import THRESHOLDS, check_fast_loader
from .demo import (
    BATCH,
    DATA_BOUND,
    SCENARIOS,
    STORED_SIZE,
    EpochProfile,
    SimulatedTrainer,
    SleepyData,
    Traced,
    cpu_pipeline,
    decode_heavy,
    knee_label,
    n_images,
    plain_loader,
    plot_sweep,
    run_epoch,
    sweep_workers,
    time_loader,
    train_step,
    transfer_timings,
    uint8_transform,
    usable_cpus,
    worker_knee,
)
from .normalise import (
    convergence_grid,
    describe,
    loaders,
    median_steps,
    plot_convergence,
    target_loss,
    uint8_images,
)
from .normalise_check import check_normalise
from .probes import TransferSpy, parallel_speedup, spawn_problems
from .profile_check import check_profile
from .reference import (
    reference_fast_loader,
    reference_make_normaliser,
    reference_profile,
    reference_to_device,
)
from .transfer_check import check_transfer

__all__ = [
    "target_loss",
    "reference_make_normaliser",
    "uint8_images",
    "plot_convergence",
    "median_steps",
    "loaders",
    "describe",
    "convergence_grid",
    "check_normalise",
    "BATCH",
    "DATA_BOUND",
    "SCENARIOS",
    "STORED_SIZE",
    "THRESHOLDS",
    "EpochProfile",
    "SimulatedTrainer",
    "SleepyData",
    "Traced",
    "TransferSpy",
    "check_fast_loader",
    "check_profile",
    "check_transfer",
    "close_loader",
    "cpu_pipeline",
    "decode_heavy",
    "knee",
    "knee_label",
    "n_images",
    "parallel_speedup",
    "plain_loader",
    "plot_sweep",
    "reference_fast_loader",
    "reference_profile",
    "reference_to_device",
    "run_epoch",
    "spawn_problems",
    "sweep_workers",
    "time_loader",
    "train_step",
    "transfer_timings",
    "uint8_transform",
    "usable_cpus",
    "worker_knee",
]

# harness functions that compute an exercise's answer under another name: the grading kernel
# withholds them (course_utils.grading.kernel_harness). normalise_check._stats: per-channel
# mean and std pooled over every pixel, in the 0-1 scale (exercise 4's statistics).
ANSWERS_ELSEWHERE = ("course_utils.lessons.data_loading.normalise_check:_stats",)
