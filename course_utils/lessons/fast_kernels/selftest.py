"""What `course selftest` runs for notebook 05: each check with its reference answers. The
notebook records no headline effect (its verdicts depend on the layout and compiler here)."""

from __future__ import annotations

from . import reference as ref


def answers() -> dict:
    """check id -> the arguments its locked cell passes, as the reference answers."""
    return {
        "05-bucketing": lambda: (ref.reference_bucket_batches, ref.reference_pad_collate),
        "05-channels-last": lambda: (ref.reference_to_channels_last, ref.ReferenceSqueezeExcite),
        "05-break-even": lambda: (ref.reference_should_compile,),
    }


def effects() -> dict:
    return {}
