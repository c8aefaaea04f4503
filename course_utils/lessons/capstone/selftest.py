"""What `course selftest` runs for notebook 11: the speed-run check with the reference
answer, and the headline effect (the tuned recipe against the baseline, time to target);
and the notebook's cost for the run-time estimator (`COST`, counted below)."""

from __future__ import annotations

from ...effects import effect
from ...selftest.estimate import Cost, NotebookCost
from . import reference as ref
from .recipe import baseline, tuned_recipe
from .runs import train_recipe
from .splits import training_set

# FLOPs by FlopCounterMode: one training step (forward + backward) of ResNet-9(64) at batch
# 512: 1,163.3 GFLOP, at batch 32: 72.7; SmallCNN(16) at batch 32: 0.51. Forward of one test
# image: ResNet-9 0.759, SmallCNN 0.0056. Host CPU seconds per image, measured on an idle
# 2-core Xeon (cpu-bf16) with one torch thread, median of 5 passes over 2,500 offline JPEGs
# (0.28-0.32 and 0.11-0.15 ms; scripts/capstone_measure.py decode): 0.31 ms decoded and augmented by the newcomer's DataLoader,
# 0.12 ms by decode_all. CIFAR-10's items are arrays, not JPEGs: cheaper, so on the safe side.
STEP_GFLOP = {"resnet9-512": 1_163.3, "resnet9-32": 72.7, "smallcnn-32": 0.51}
AUGMENT_MS, DECODE_MS = 0.31, 0.12
FULL_TRAIN, FULL_STEPS_512, FULL_STEPS_32 = 50_000, 97, 1_562
BASELINE_TRAINED_EPOCHS = 1  # the notebook's baseline cell, full mode: cu.pick(full=1)


def _full() -> Cost:
    """Full mode: 50,000 training and 10,000 test images; 97 steps per epoch at batch 512,
    1,562 at 32. The baseline once (1 epoch trained, projected to its 5), the check's one
    pair (the learner's 16 epochs, the baseline's half epoch), the ablation (7 variants at
    3 + 48 steps, the batch-32 one at 3 + 780, the baseline reused), cu.diagnose twice."""
    big, small = STEP_GFLOP["resnet9-512"], STEP_GFLOP["resnet9-32"]
    evals = 2 * 10_000 * 0.759  # the baseline's and the check's held-out accuracy, fp32
    demo, check_base, warm = BASELINE_TRAINED_EPOCHS * FULL_STEPS_32, 780, 3
    ablation_big, ablation_small = 7 * 51, 783  # one of the 7 (float32) runs without autocast
    diagnose = 200  # steps, both loops, probes included (estimated from quick mode's 12 + 12)
    fp32 = (demo + check_base + warm) * small + 51 * big + evals + 100 * small
    amp = (16 * FULL_STEPS_512 + warm) * big + 6 * 51 * big + ablation_small * small + 100 * big
    augmented = (demo + check_base) * 32 + 51 * 512 + 100 * 32
    decoded = 3 * FULL_TRAIN  # the learner's run, the ablation's shared decode, diagnose's
    host = augmented * AUGMENT_MS / 1e3 + decoded * DECODE_MS / 1e3 + 25  # + start, data, CUDA
    steps = demo + check_base + 2 * warm + 16 * FULL_STEPS_512 + ablation_big + ablation_small
    return Cost(gflop=fp32, steps=steps + diagnose, host_s=host, amp_gflop=amp)


def speedrun_costs(tensor_cores: bool = True) -> tuple[Cost, Cost]:
    """Full mode: (the baseline's run as the check projects it, the reference's run). The
    baseline: 5 epochs at batch 32 in fp32, every image decoded and augmented in the training
    process; the reference: 16 epochs at batch 512, under autocast where there are tensor
    cores, decoded once."""
    base_steps, tuned_steps = 5 * FULL_STEPS_32, 16 * FULL_STEPS_512
    base = Cost(
        gflop=base_steps * STEP_GFLOP["resnet9-32"],
        steps=base_steps,
        host_s=base_steps * 32 * AUGMENT_MS / 1e3,
    )
    gflop = tuned_steps * STEP_GFLOP["resnet9-512"]
    host = FULL_TRAIN * DECODE_MS / 1e3
    tuned = (
        Cost(0, tuned_steps, host, amp_gflop=gflop)
        if tensor_cores
        else Cost(gflop, tuned_steps, host)
    )
    return base, tuned


def full_mode_estimates(gpus=("T4", "V100", "A100", "H100")) -> list[dict]:
    """Per GPU (a host as fast as the reference's 2 vCPUs): the whole notebook's full-mode
    seconds against its budget, the reference's estimated time ratio against the baseline
    (what the check's time part would read) and the bar that ratio is graded against."""
    from ...device import GPU_PEAK_FLOPS
    from ...selftest.estimate import budget_s, gpu_rates, seconds
    from .checks import FULL_GPU

    rows = []
    for gpu in gpus:
        r = gpu_rates(gpu)
        _, tf32, half = GPU_PEAK_FLOPS[gpu]
        base, tuned = speedrun_costs(tensor_cores=half is not None)
        env = {"device": "cuda", "device_name": gpu}
        rows.append(
            {
                "gpu": gpu,
                "notebook_s": seconds(COST.full, r),
                "budget_s": budget_s(env, False, COST),
                "baseline_s": seconds(base, r),
                "reference_s": seconds(tuned, r),
                "ratio": seconds(base, r) / seconds(tuned, r),
                # the check's full-mode bar (time_threshold): fp16 where there is no TF32,
                # i.e. tensor cores before Ampere (compute capability 7.x)
                "bar": FULL_GPU["fp16" if tf32 is None else "bf16"],
                "rates": r.source,
            }
        )
    return rows


def _quick() -> Cost:
    """Quick mode: 2,500 offline training images, 78 steps per epoch at batch 32, SmallCNN;
    baseline 8 epochs, the check's 3 pairs (5 + half of 1 epoch), 6 variants at 3 + 76 steps."""
    step = STEP_GFLOP["smallcnn-32"]
    amp_steps = 3 * 5 * 78 + 5 * 79 + 3  # the tuned runs autocast (bf16 on cpu-bf16)
    fp32_steps = 8 * 78 + 3 * 40 + 79 + 3 + 100
    augmented = (8 * 78 + 3 * 40 + 79) * 32
    host = augmented * AUGMENT_MS / 1e3 + 10 * 2_500 * DECODE_MS / 1e3 + 10
    return Cost(fp32_steps * step, amp_steps + fp32_steps, host, amp_steps * step)


COST = NotebookCost(
    _quick(),
    _full(),
    "full: the check's one tuned 16-epoch ResNet-9 run under autocast, then the baseline's "
    "per-image decoding (host) and fp32 epochs",
    full_budget_s=(900.0, 180.0),  # issue 15: the whole capstone, 15 min on a T4, 3 on an H100
)


def answers() -> dict:
    """check id -> the arguments its locked cell passes, as the reference answers."""
    return {"11-speedrun": lambda: (ref.reference_speedrun,)}


def speedrun_effect():
    train_set = training_set()
    slow = train_recipe(baseline(), train_set)
    tuned = train_recipe(tuned_recipe(), train_set)
    return effect(
        "the capstone speed-run (all techniques)",
        metric="time to target",
        baseline=slow.seconds,
        improved=tuned.seconds,
        show=False,
    )


def effects() -> dict:
    return {"speed-run": speedrun_effect}
