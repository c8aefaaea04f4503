"""Red team, notebook 05 (fast kernels), written from the notebook alone (blind).

Each case is a learner's answer, the verdict it deserves and, for a wrong one, the cause the
message must name (and causes it must not name).
"""

from __future__ import annotations

import bisect
import random
from collections import defaultdict

import pytest
import torch
import torch.nn.functional as F
from redteam_helpers import SLOW, assert_verdict, run_check
from torch import nn

from course_utils.lessons import fast_kernels as lesson

# --- 05-bucketing: bucket_batches(sizes, batch_size), pad_collate(images) --------------------


def _up(n, k=16):
    return -(-n // k) * k


def buckets_rounded(sizes, batch_size, k=16, drop_partial=False, uncut=False):
    groups = defaultdict(list)
    for i, (h, w) in enumerate(sizes):
        groups[(_up(h, k), _up(w, k))].append(i)
    if uncut:
        return list(groups.values())
    batches = []
    for g in groups.values():
        stop = len(g) - batch_size + 1 if drop_partial else len(g)
        batches += [g[s : s + batch_size] for s in range(0, max(stop, 0), batch_size)]
    random.Random(0).shuffle(batches)
    return batches


def collate_rounded(images, k=16):
    h, w = _up(max(i.shape[1] for i in images), k), _up(max(i.shape[2] for i in images), k)
    return torch.stack([F.pad(i, (0, w - i.shape[2], 0, h - i.shape[1])) for i in images])


def collate_centred(images):  # pads evenly on both sides: images move off the top-left
    h, w = _up(max(i.shape[1] for i in images)), _up(max(i.shape[2] for i in images))
    out = []
    for i in images:
        dh, dw = h - i.shape[1], w - i.shape[2]
        out.append(F.pad(i, (dw // 2, dw - dw // 2, dh // 2, dh - dh // 2)))
    return torch.stack(out)


def collate_resized(images):  # resizes every image to the bucket's size
    h, w = _up(max(i.shape[1] for i in images)), _up(max(i.shape[2] for i in images))
    return torch.stack([F.interpolate(i[None].float(), size=(h, w)).to(i.dtype)[0] for i in images])


def collate_floor_rounded(images):  # rounds *down*: F.pad with a negative pad crops
    h = max(i.shape[1] for i in images) // 16 * 16
    w = max(i.shape[2] for i in images) // 16 * 16
    return torch.stack([F.pad(i, (0, w - i.shape[2], 0, h - i.shape[1])) for i in images])


def collate_exact(images):  # pads to the batch's exact max: one shape per size combination
    h, w = max(i.shape[1] for i in images), max(i.shape[2] for i in images)
    return torch.stack([F.pad(i, (0, w - i.shape[2], 0, h - i.shape[1])) for i in images])


def buckets_sorted_exact(sizes, batch_size):  # sorted by size, no rounding
    order = sorted(range(len(sizes)), key=lambda i: sizes[i])
    return [order[s : s + batch_size] for s in range(0, len(order), batch_size)]


def buckets_one_group(sizes, batch_size):  # everything padded to the global max
    order = list(range(len(sizes)))
    random.Random(0).shuffle(order)
    return [order[s : s + batch_size] for s in range(0, len(order), batch_size)]


def collate_global(images):
    return torch.stack([F.pad(i, (0, 128 - i.shape[2], 0, 128 - i.shape[1])) for i in images])


def buckets_duplicate_one(sizes, batch_size):  # an off-by-one slice repeats an index
    batches = buckets_rounded(sizes, batch_size)
    short = next(b for b in batches if len(b) < batch_size)
    short.append(next(b for b in batches if b is not short)[0])
    return batches


def collate_channels_last_shape(images):  # (B, H, W, 3): the wrong axis order
    return collate_rounded(images).permute(0, 2, 3, 1)


EDGES = [24, 32, 48, 64, 96, 128]


def _edge(n):
    return EDGES[bisect.bisect_left(EDGES, n)] if n <= EDGES[-1] else _up(n, 64)


def buckets_by_edges(sizes, batch_size):  # valid: uneven bucket edges, batches by size
    groups = defaultdict(list)
    for i, (h, w) in enumerate(sizes):
        groups[(_edge(h), _edge(w))].append(i)
    batches = [g[s : s + batch_size] for g in groups.values() for s in range(0, len(g), batch_size)]
    random.shuffle(batches)
    return batches


def collate_by_edges(images):  # valid: preallocated zeros, slot assignment
    h = _edge(max(i.shape[1] for i in images))
    w = _edge(max(i.shape[2] for i in images))
    batch = images[0].new_zeros(len(images), 3, h, w)
    for slot, im in zip(batch, images, strict=True):
        slot[:, : im.shape[1], : im.shape[2]] = im
    return batch


def buckets_sorted_then_chunked(sizes, batch_size):  # valid: sort by rounded size, chunk
    def key(i):
        return _up(sizes[i][0]), _up(sizes[i][1])

    batches, current = [], []
    for i in sorted(range(len(sizes)), key=key):
        if current and (key(i) != key(current[0]) or len(current) == batch_size):
            batches.append(current)
            current = []
        current.append(i)
    return batches + [current]


BUCKETING = [
    pytest.param(
        buckets_rounded,
        collate_centred,
        "failed",
        r"top-left|moved|position|shift",
        (r"crop",),
        id="wrong-pads-centred",
    ),
    pytest.param(
        buckets_rounded,
        collate_resized,
        "failed",
        r"resiz|unchanged|intact|changed",
        (),
        id="wrong-resizes",
    ),
    pytest.param(
        buckets_rounded, collate_floor_rounded, "failed", r"crop", (), id="wrong-rounds-down-crops"
    ),
    pytest.param(
        lambda s, b: buckets_rounded(s, b, drop_partial=True),
        collate_rounded,
        "failed",
        r"once|missing|never",
        (r"crop",),
        id="wrong-drops-partial-batches",
    ),
    pytest.param(
        lambda s, b: buckets_rounded(s, b, uncut=True),
        collate_rounded,
        "failed",
        r"batch_size|at most|per batch|larger",
        (),
        id="wrong-buckets-not-cut",
    ),
    pytest.param(
        buckets_sorted_exact,
        collate_exact,
        "failed",
        r"shape",
        (r"padding overhead: [^;]*above",),
        id="wrong-sorted-no-rounding",
    ),
    pytest.param(
        buckets_one_group,
        collate_global,
        "failed",
        r"padding",
        (r"distinct batch shapes: [^;]*above",),
        id="wrong-global-max",
        marks=SLOW,
    ),
    pytest.param(
        buckets_duplicate_one,
        collate_rounded,
        "failed",
        r"once|twice|duplicate",
        (),
        id="wrong-index-twice",
    ),
    pytest.param(
        buckets_rounded,
        collate_channels_last_shape,
        "failed",
        r"shape|\(B, 3",
        (),
        id="wrong-nhwc-axis-order",
    ),
    pytest.param(buckets_by_edges, collate_by_edges, "passed", None, (), id="valid-uneven-edges"),
    pytest.param(
        buckets_sorted_then_chunked, collate_rounded, "passed", None, (), id="valid-sorted-chunks"
    ),
]


@pytest.mark.parametrize("sampler, collate, expected, cause, not_causes", BUCKETING)
def test_bucketing(sampler, collate, expected, cause, not_causes):
    verdict = run_check(lesson.check_bucketing, sampler, collate)
    assert_verdict(verdict, expected, cause, not_causes)


# --- 05-channels-last: to_channels_last(model, x), SqueezeExcite -----------------------------

CL = torch.channels_last


def convert_both(model, x):
    return model.to(memory_format=CL), x.to(memory_format=CL)


def convert_model_only(model, x):
    return model.to(memory_format=CL), x


def convert_input_only(model, x):
    return model, x.contiguous(memory_format=CL)


def convert_input_permuted(model, x):  # NHWC logical shape: not channels_last
    return model.to(memory_format=CL), x.permute(0, 2, 3, 1).contiguous()


def convert_top_children(model, x):  # only the direct children that are convs
    for m in model.children():
        if isinstance(m, nn.Conv2d):
            m.to(memory_format=CL)
    return model, x.to(memory_format=CL)


def convert_every_conv(model, x):  # valid: weights one by one, on every submodule
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            m.weight.data = m.weight.data.contiguous(memory_format=CL)
    return model, x.contiguous(memory_format=CL)


class GateGood(lesson.LegacySqueezeExcite):
    def forward(self, x):
        gate = torch.sigmoid(self.fc2(torch.relu(self.fc1(x.mean((2, 3))))))
        return x * gate[:, :, None, None]


class GateLegacyContiguous(lesson.LegacySqueezeExcite):  # the legacy body, unchanged
    def forward(self, x):
        b, c = x.shape[:2]
        x = x.contiguous()
        gate = torch.sigmoid(self.fc2(torch.relu(self.fc1(x.view(b, c, -1).mean(-1)))))
        return x * gate.view(b, c, 1, 1)


class GateContiguousOut(lesson.LegacySqueezeExcite):  # right gate, NCHW output
    def forward(self, x):
        gate = torch.sigmoid(self.fc2(torch.relu(self.fc1(x.mean((2, 3))))))
        return (x * gate[:, :, None, None]).contiguous()


class GateMax(lesson.LegacySqueezeExcite):  # keeps the layout, another function (max pool)
    def forward(self, x):
        gate = torch.sigmoid(self.fc2(torch.relu(self.fc1(x.amax((2, 3))))))
        return x * gate[:, :, None, None]


class GateNoSigmoid(lesson.LegacySqueezeExcite):
    def forward(self, x):
        gate = self.fc2(torch.relu(self.fc1(x.mean((2, 3)))))
        return x * gate[:, :, None, None]


class GateReshape(lesson.LegacySqueezeExcite):  # valid: reshape copies, the output keeps x's layout
    def forward(self, x):
        b, c = x.shape[:2]
        squeezed = x.reshape(b, c, -1).mean(-1)
        gate = torch.sigmoid(self.fc2(torch.relu(self.fc1(squeezed))))
        return x * gate.view(b, c, 1, 1)


class GatePool(lesson.LegacySqueezeExcite):  # valid: adaptive pooling, keepdim-style gate
    def forward(self, x):
        squeezed = F.adaptive_avg_pool2d(x, 1).flatten(1)
        gate = torch.sigmoid(self.fc2(F.relu(self.fc1(squeezed))))
        return x * gate.unsqueeze(-1).unsqueeze(-1)


CHANNELS_LAST = [
    pytest.param(
        convert_model_only,
        GateGood,
        "failed",
        r"input",
        (r"model weights: [^;]*not",),
        id="wrong-input-not-converted",
    ),
    pytest.param(
        convert_input_only, GateGood, "failed", r"weight", (), id="wrong-model-not-converted"
    ),
    pytest.param(
        convert_input_permuted,
        GateGood,
        "failed",
        r"input|shape",
        (),
        id="wrong-input-permuted-nhwc",
    ),
    pytest.param(
        convert_top_children, GateGood, "failed", r"weight|conv", (), id="wrong-top-children-only"
    ),
    pytest.param(
        convert_both,
        GateLegacyContiguous,
        "failed",
        r"SqueezeExcite|gate|layer",
        (),
        id="wrong-legacy-gate",
    ),
    pytest.param(
        convert_both,
        GateContiguousOut,
        "failed",
        r"SqueezeExcite|gate|layer",
        (),
        id="wrong-gate-output-contiguous",
    ),
    pytest.param(
        convert_both,
        GateMax,
        "failed",
        r"output",
        (r"channels_last\b.*lost",),
        id="wrong-gate-max-not-mean",
    ),
    pytest.param(convert_both, GateNoSigmoid, "failed", r"output", (), id="wrong-gate-no-sigmoid"),
    pytest.param(
        convert_every_conv,
        GateReshape,
        "passed",
        None,
        (),
        id="valid-every-conv-reshape-gate",
        marks=SLOW,
    ),
    pytest.param(
        convert_both, GatePool, "passed", None, (), id="valid-adaptive-pool-gate", marks=SLOW
    ),
]


@pytest.mark.parametrize("convert, gate, expected, cause, not_causes", CHANNELS_LAST)
def test_channels_last(convert, gate, expected, cause, not_causes):
    verdict = run_check(lesson.check_channels_last, convert, gate)
    assert_verdict(verdict, expected, cause, not_causes)


# 05-break-even: its blind cases answered `break_even_steps(timing, compiles)`; the exercise
# now asks for a decision, `should_compile(timing, run_steps, compiles)`, so they no longer
# apply (tests/redteam/README.md, "Issue 18"). The author's cases are in test_lesson_05.py.
