"""Two measurements behind the capstone's constants, on this machine (quick mode, offline data,
one torch thread; run it on an idle machine):

    python scripts/capstone_measure.py decode      # capstone/selftest.py AUGMENT_MS, DECODE_MS
    python scripts/capstone_measure.py renamings 4 5

`decode`: CPU milliseconds per image of the newcomer's DataLoader (decode and augment each
image) and of `decode_all`, 5 passes over the 2,500 quick-mode images. `renamings`: the tuned
recipe's held-out accuracy, trained with `epochs` epochs on each of the 10 renamings of the
classes the speed-run check can hand a call (capstone/recipe.py's quick epochs).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import time

os.environ.setdefault("COURSE_DATASET", "offline")

import torch  # noqa: E402

import course_utils as cu  # noqa: E402
from course_utils.lessons import capstone as lesson  # noqa: E402
from course_utils.lessons.capstone import recipe, splits  # noqa: E402
from course_utils.lessons.capstone.data_path import decode_all, newcomer_loader  # noqa: E402


def decode() -> None:
    data = lesson.training_set()
    augment, decoded = [], []
    for seed in range(5):
        t = time.process_time()
        n = sum(len(y) for _, y in newcomer_loader(data, 32, torch.Generator().manual_seed(seed)))
        augment.append((time.process_time() - t) / n * 1e3)
        t = time.process_time()
        decode_all(data, torch.device("cpu"))
        decoded.append((time.process_time() - t) / len(data) * 1e3)
    for name, ms in (("newcomer's DataLoader", augment), ("decode_all", decoded)):
        print(f"{name}: median {statistics.median(ms):.3f} ms/image ({min(ms):.3f}-{max(ms):.3f})")


def renamings(epochs: list[int]) -> None:
    data = lesson.training_set()
    for n in epochs:
        tuned = dataclasses.replace(lesson.tuned_recipe(), epochs=n)
        accs = []
        for shift in range(splits.NUM_CLASSES):
            renamed = splits.Relabelled(data, shift)
            model = recipe.fit.__wrapped__(tuned, renamed, leave=False).model
            accs.append(lesson.held_out_accuracy(model, shift=shift))
        print(
            f"{n} epochs: {' '.join(f'{a:.1%}' for a in accs)}; min {min(accs):.1%}, "
            f"median {statistics.median(accs):.1%}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=["decode", "renamings"])
    parser.add_argument("epochs", nargs="*", type=int, default=[5])
    args = parser.parse_args()
    cu.setup(True)
    torch.set_num_threads(1)
    if args.what == "decode":
        decode()
    else:
        renamings(args.epochs)


if __name__ == "__main__":
    main()
