"""Every technique the course teaches, once: the guide's tip, the lesson, the one line of code.

`tip` is the number of Kuhn's guide (course_utils.guide): the lessons cite those numbers
(tests/test_citations.py reads them from here) and the book's cheat sheet is built from this
table and the committed results (course_utils.references), so no figure or tip number is typed
twice. Techniques beyond the guide, and combinations of its tips, have `tip=None`.

`effect` ties a row to the one `cu.effect` headline that measures that very technique (the start
of its name, tests/test_techniques.py holds every call to exactly one row of its lesson): an
effect of a whole fixed loop belongs to the row for the whole loop, never to one habit in it.
"""

from __future__ import annotations

from dataclasses import dataclass

ALL_CLASSES = ("cuda-tensorcore", "cuda", "cpu-bf16", "cpu", "mps")
GPU = ("cuda-tensorcore", "cuda")


@dataclass(frozen=True)
class Technique:
    name: str
    tip: int | None  # the guide's tip number; None beyond the guide
    lesson: str  # the notebook that teaches it, e.g. "04_mixed_precision"
    code: str  # the one line a learner adds
    pays: str  # when it pays, in words
    classes: tuple[str, ...]  # device classes where the course expects it to pay
    effect: str = ""  # the start of the lesson's `cu.effect` technique name, if it reports one
    cost: str = ""  # what it costs where it pays, in words (the lesson measures it)


TECHNIQUES = (
    Technique(
        "timing that waits for the device",
        None,
        "00_measuring",
        "torch.cuda.synchronize(); t0 = time.perf_counter()  # warm up first, median of repeats",
        "every speed claim: CUDA queues work asynchronously; interleave what you compare",
        ALL_CLASSES,
    ),
    Technique(
        "the profiler, before optimising",
        None,
        "00_measuring",
        'with torch.profiler.profile() as p: step(); print(p.key_averages().table(sort_by="self_cpu_time_total"))',
        "before changing anything: find the op that takes the time",
        ALL_CLASSES,
        cost="slows every op while it records: never in a training run",
    ),
    Technique(
        "one-cycle learning rate",
        1,
        "01_one_cycle",
        "sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr, total_steps=n)",
        "fewer steps to a target accuracy; tune max_lr with an LR range test",
        ALL_CLASSES,
    ),
    Technique(
        "AdamW instead of Adam + L2",
        5,
        "01_one_cycle",
        "opt = torch.optim.AdamW(model.parameters(), lr, weight_decay=0.05)",
        "decoupled weight decay regularises as intended with adaptive optimizers",
        ALL_CLASSES,
    ),
    Technique(
        "a larger batch, up to the throughput knee",
        3,
        "02_batch_size",
        "batch = min(b for b, r in sweep.items() if r >= 0.8 * max(sweep.values()))  # knee",
        "until throughput stops rising or the batch passes the critical batch size",
        ALL_CLASSES,
        effect="larger batch, up to the throughput knee",
    ),
    Technique(
        "linear LR scaling with warm-up for a larger batch",
        3,
        "02b_large_batch",
        "lr = base_lr * batch / base_batch  # reached by a linear warm-up from base_lr",
        "below the critical batch size, while the scaled LR stays stable",
        ALL_CLASSES,
        effect="larger batch with linear LR scaling",
    ),
    Technique(
        "LARS/LAMB trust ratio for large batches",
        5,
        "02b_large_batch",
        "update *= trust_coef * w.norm() / g.norm()  # per layer, not on biases or norms",
        "very large batches where one global LR is unstable",
        ALL_CLASSES,
    ),
    Technique(
        "DataLoader workers and pinned memory",
        2,
        "03_data_loading",
        "DataLoader(ds, batch_size, num_workers=4, pin_memory=True, persistent_workers=True)",
        "when the step waits for data (decode, augmentation); pinning only with a GPU",
        ALL_CLASSES,
        effect="DataLoader workers",
    ),
    Technique(
        "normalise inputs on the device",
        17,
        "03_data_loading",
        "x = (x.to(device, non_blocking=True).float() - mean) / std",
        "when the loader is CPU-bound; one fused step on the device",
        ALL_CLASSES,
    ),
    Technique(
        "automatic mixed precision",
        4,
        "04_mixed_precision",
        "with torch.autocast(device.type, dtype=torch.bfloat16): loss = model(x)",
        "tensor-core GPUs and CPUs with native bf16; slower where bf16 is emulated",
        ("cuda-tensorcore", "cpu-bf16"),
        effect="autocast",
    ),
    Technique(
        "cuDNN autotuning",
        6,
        "05_fast_kernels",
        "torch.backends.cudnn.benchmark = True",
        "convolutions with fixed input shapes on NVIDIA GPUs; bucket variable shapes",
        GPU,
    ),
    Technique(
        "channels_last memory format",
        None,
        "05_fast_kernels",
        "model = model.to(memory_format=torch.channels_last)",
        "convolutions on tensor cores (AMP) and on oneDNN CPUs",
        ("cuda-tensorcore", "cpu-bf16"),
    ),  # = device.CHANNELS_LAST (a test holds them equal)
    Technique(
        "torch.compile",
        None,
        "05_fast_kernels",
        "model = torch.compile(model)",
        "long runs with fixed shapes: the compile time must be paid back",
        ALL_CLASSES,
    ),
    Technique(
        "DistributedDataParallel and no_sync",
        10,
        "06_ddp",
        "model = DDP(model); with model.no_sync(): loss.backward()",
        "several devices; no_sync under accumulation skips all-reduces",
        ALL_CLASSES,
        effect="no_sync",
    ),
    Technique(
        "activation checkpointing",
        8,
        "07_accumulation_checkpointing",
        "y = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)",
        "when activations do not fit: memory for about a third more compute",
        ALL_CLASSES,
        effect="activation checkpointing",
        cost="a slower step: each segment's forward runs again in backward (the lesson's check "
        "times it)",
    ),
    Technique(
        "gradient accumulation",
        9,
        "07_accumulation_checkpointing",
        "(loss / accum_steps).backward(); step every accum_steps micro-batches",
        "a batch larger than memory allows, same gradients",
        ALL_CLASSES,
    ),
    Technique(
        "gradient clipping",
        14,
        "08_gradient_clipping",
        "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)",
        "exploding gradients (RNNs, transformers); unscale_ first under fp16 AMP",
        ALL_CLASSES,
    ),
    Technique(
        "no bias before BatchNorm",
        15,
        "09_no_bias_before_bn",
        "nn.Conv2d(c_in, c_out, 3, padding=1, bias=False)",
        "always before BN: BN subtracts the mean, which cancels the bias",
        ALL_CLASSES,
    ),
    Technique(
        "conv+BN fusion for inference",
        None,
        "09_no_bias_before_bn",
        "fused = torch.nn.utils.fusion.fuse_conv_bn_eval(conv, bn)  # eval mode only",
        "inference: one convolution instead of a convolution and a BN",
        ALL_CLASSES,
        effect="conv+BN fusion",
    ),
    Technique(
        "tensors made on the device",
        7,
        "10_habits",
        "torch.zeros(n, device=device); no .item()/.cpu() inside the loop",
        "every GPU loop: each host-device sync stalls the queue",
        GPU,
    ),
    Technique(
        "gradients set to None",
        11,
        "10_habits",
        "opt.zero_grad(set_to_none=True)  # the default since PyTorch 2.0",
        "always: skips a memset per parameter",
        ALL_CLASSES,
    ),
    Technique(
        "as_tensor / from_numpy",
        12,
        "10_habits",
        "x = torch.from_numpy(array)  # shares memory, no copy",
        "whenever data arrives as numpy arrays",
        ALL_CLASSES,
    ),
    Technique(
        "debugging APIs off",
        13,
        "10_habits",
        "torch.autograd.set_detect_anomaly(False); no profiler in training runs",
        "always outside a debugging session",
        ALL_CLASSES,
    ),
    Technique(
        "no gradients in validation",
        16,
        "10_habits",
        "with torch.inference_mode(): logits = model(x)",
        "every evaluation loop: no graph, less memory",
        ALL_CLASSES,
    ),
    Technique(
        "a training loop without the slow habits",
        None,
        "10_habits",
        "no .item()/print/profiler/detect_anomaly per step; zero_grad(set_to_none=True)",
        "every loop: each habit costs a little, together they dominate the step",
        ALL_CLASSES,
        effect="fixing the habits",
    ),
    Technique(
        "all of it together: a speed-run to a target accuracy",
        None,
        "11_capstone",
        "cu.diagnose(...)  # find the largest cost, fix it, measure the time to target again",
        "a fixed accuracy target: time to target, with an ablation of what paid",
        ALL_CLASSES,
        effect="the capstone speed-run",
    ),
    Technique(
        "scaled dot-product attention",
        None,
        "12_transformers",
        "y = F.scaled_dot_product_attention(q, k, v, is_causal=True)",
        "every transformer: fused kernels, no T x T scores in memory on GPUs",
        ALL_CLASSES,
        effect="SDPA",
    ),
    Technique(
        "sequence packing",
        None,
        "12_transformers",
        "pack documents into fixed-length rows with a block-diagonal causal mask",
        "mixed-length documents: no compute spent on padding",
        ALL_CLASSES,
        effect="packing documents",
    ),
    Technique(
        "fused AdamW + autocast for a transformer",
        None,
        "12_transformers",
        "opt = torch.optim.AdamW(model.parameters(), lr, fused=True)  # + autocast in the step",
        "transformer training on tensor cores; at small widths the casts may cost more",
        ("cuda-tensorcore", "cpu-bf16"),
        effect="fused AdamW + autocast",
    ),
    Technique(
        "FSDP2 sharding",
        None,
        "13_fsdp",
        "for block in model.blocks: fully_shard(block); fully_shard(model)",
        "a model whose parameters, gradients and optimizer state do not fit one device",
        ALL_CLASSES,
        effect="FSDP2 sharding",
    ),
    Technique(
        "reading the profiler timeline",
        None,
        "14_timeline_compile",
        "profile(schedule=schedule(wait=1, warmup=1, active=3), on_trace_ready=...); prof.step()",
        "a step slower than its operators explain: data waits, Python between ops, a late rank",
        ALL_CLASSES,
        effect="fixing the stall the timeline shows",
    ),
    Technique(
        "regional compilation",
        None,
        "14_timeline_compile",
        "for block in model.blocks: block.compile(fullgraph=True)",
        "models built of repeated blocks: one block's compile serves them all",
        ALL_CLASSES,
        effect="regional compilation",
    ),
    Technique(
        "CUDA graphs for launch-bound steps",
        None,
        "14_timeline_compile",
        'model = torch.compile(model, mode="reduce-overhead")',
        "small kernels the CPU cannot launch fast enough, static shapes, on a CUDA GPU",
        GPU,
        effect="CUDA graphs",
    ),
    Technique(
        "tensor parallelism, column then row",
        None,
        "16_tensor_pipeline",
        'parallelize_module(block, mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})',
        "a layer's matrices or activations too large for one GPU, GPUs joined by NVLink",
        ALL_CLASSES,
        cost="one all-reduce of each block's output forward and one backward, every micro-batch",
    ),
    Technique(
        "1F1B pipeline schedule",
        None,
        "16_tensor_pipeline",
        "Schedule1F1B(PipelineStage(stage, rank, world, device), n_microbatches=m, loss_fn=...)",
        "a model larger than a node; many micro-batches per replica keep the bubble small",
        ALL_CLASSES,
        effect="1F1B schedule",
        cost="a bubble of (p - 1) / (m + p - 1) of the step, as GPipe's",
    ),
    Technique(
        "selective activation checkpointing",
        8,
        "15_memory_precision",
        "checkpoint(block, x, use_reentrant=False, context_fn=partial(create_selective_checkpoint_contexts, policy))",
        "activations do not fit and full checkpointing's recompute is too slow: save matmuls",
        ALL_CLASSES,
        effect="selective activation checkpointing",
        cost="more memory than full checkpointing; the cheap ops run again (the lesson counts both)",
    ),
    Technique(
        "float8 matmuls with rowwise scaling",
        None,
        "15_memory_precision",
        "convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name('rowwise'))",
        "matmul-bound steps on H100-class GPUs (sm_89+), with torchao",
        ("cuda-tensorcore",),
        cost="e4m3's 3 mantissa bits: numerics to verify on your model (the lesson measures them)",
    ),
    Technique(
        "a fused kernel of your own (Triton)",
        None,
        "17_triton_kernels",
        "@triton.jit  # one program per tile: load, compute in registers, store once",
        "a memory-bound chain of ops no library fuses; attention's scores never written",
        GPU,
        effect="fused attention",
        cost="a kernel to write, test against torch and maintain; the interpreter only checks it",
    ),
    Technique(
        "all of it together on a transformer: a speed-run to a target loss",
        None,
        "18_speedrun",
        'recipe = lesson.Recipe(steps, rows, lr, schedule=True, packing=True, attention="sdpa")',
        "a fixed validation loss: time to target, with an ablation of the levers that paid",
        ALL_CLASSES,
        effect="the transformer speed-run",
        cost="levers that pay on a GPU (bf16, compile) can cost time on a CPU: measure each",
    ),
)


def tips_of(lesson: str) -> set[int]:
    """The guide's tip numbers a lesson teaches."""
    return {t.tip for t in TECHNIQUES if t.lesson == lesson and t.tip is not None}
