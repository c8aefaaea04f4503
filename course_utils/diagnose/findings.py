"""What `diagnose` found: one Finding per lesson that applies, ranked by what it is worth.

A finding carries its evidence (what was measured or counted in the learner's own loop), the
fix in one line and the notebook that teaches it. `gain` is a whole-step speed-up factor
(>1) where it could be measured or estimated from a measurement, else None: those rank after
the measured ones, in the order of ORDER. Checks that could not run on this device say so in
`not_checked`; checks that ran and found nothing are listed in `ok`.
"""

from __future__ import annotations

import html
from dataclasses import asdict, dataclass, field

# Kinds of finding, and the notebook that teaches each fix. The order is the rank of findings
# whose gain could not be measured: habits that cost most on a GPU first (a sync stalls the
# whole queue; anomaly mode and a profiler cost milliseconds per step, lesson 10's measurements).
LESSONS = {
    "data-bound": "03_data_loading",
    "profiler-on": "10_habits",
    "anomaly-on": "10_habits",
    "syncs": "10_habits",
    "ddp-no-sync": "06_ddp",
    "fp32": "04_mixed_precision",
    "channels-last": "05_fast_kernels",
    "cudnn-benchmark-off": "05_fast_kernels",
    "cudnn-benchmark-changing-shapes": "05_fast_kernels",
    "small-batch": "02_batch_size",
    "optimizer-loop": "10_habits",
    "grads-zeroed": "10_habits",
    "bias-before-bn": "09_no_bias_before_bn",
}
ORDER = tuple(LESSONS)


@dataclass
class Finding:
    """One inefficiency seen in the learner's loop."""

    kind: str  # a key of LESSONS
    title: str
    evidence: str  # what was measured or counted, with the numbers
    fix: str  # the fix, one line
    gain: float | None = None  # whole-step speed-up factor (throughput for small-batch)
    basis: str = "not measured"  # "measured", "estimated" (from a measurement) or "not measured"
    data: dict = field(default_factory=dict)  # raw numbers behind the evidence

    @property
    def lesson(self) -> str:
        return LESSONS[self.kind]

    def to_dict(self) -> dict:
        return {**asdict(self), "lesson": self.lesson}


def rank(findings: list[Finding]) -> list[Finding]:
    """Measured or estimated gains first, biggest first; then the rest in ORDER."""
    return sorted(
        findings,
        key=lambda f: (f.gain is None, -(f.gain or 0.0), ORDER.index(f.kind)),
    )


def _gain_text(f: Finding) -> str:
    if f.gain is None:
        return "not measured"
    unit = "x samples/s" if f.kind == "small-batch" else "x step"
    prefix = "up to " if f.basis == "upper bound" else "~" if f.basis == "estimated" else ""
    return f"{prefix}{f.gain:.2f}{unit} ({f.basis})"


@dataclass
class Diagnosis:
    """The result of `diagnose`: ranked findings, the window that was measured, and the checks
    that found nothing or could not run here."""

    findings: list[Finding]
    ok: list[str]  # checks that ran and found nothing, one line each
    not_checked: list[str]  # checks that could not run on this device or loop, with the reason
    window: dict  # steps, seconds per step, data wait, device, device class, torch version

    def kinds(self) -> list[str]:
        return [f.kind for f in self.findings]

    def __getitem__(self, kind: str) -> Finding:
        return next(f for f in self.findings if f.kind == kind)

    def __contains__(self, kind: str) -> bool:
        return kind in self.kinds()

    def to_dict(self) -> dict:
        return {
            "findings": [f.to_dict() for f in self.findings],
            "ok": list(self.ok),
            "not_checked": list(self.not_checked),
            "window": dict(self.window),
        }

    def _header(self) -> str:
        w = self.window
        return (
            f"{w['steps']} steps on {w['device']} ({w['device_class']}, torch {w['torch']}): "
            f"{w['step_ms']:.1f} ms/step, {w['wait_ms']:.1f} ms of it waiting for data"
        )

    def __str__(self) -> str:
        lines = [f"Diagnosis: {self._header()}"]
        if not self.findings:
            lines.append("No findings: none of the course's lessons measurably applies here.")
        for i, f in enumerate(self.findings, 1):
            lines += [
                f"{i}. {f.title}  [{_gain_text(f)}] -> {f.lesson}",
                f"   evidence: {f.evidence}",
                f"   fix: {f.fix}",
            ]
        lines += [f"ok: {line}" for line in self.ok]
        lines += [f"not checked: {line}" for line in self.not_checked]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"Diagnosis(findings={self.kinds()})"

    def _repr_html_(self) -> str:
        e = html.escape
        rows = "".join(
            f"<tr><td>{i}</td><td><b>{e(f.title)}</b></td><td>{e(_gain_text(f))}</td>"
            f"<td>{e(f.evidence)}</td><td><code>{e(f.fix)}</code></td><td>{e(f.lesson)}</td></tr>"
            for i, f in enumerate(self.findings, 1)
        )
        table = (
            "<table><tr><th>#</th><th>finding</th><th>gain</th><th>evidence</th><th>fix</th>"
            f"<th>notebook</th></tr>{rows}</table>"
            if self.findings
            else "<p>No findings: none of the course's lessons measurably applies here.</p>"
        )
        extra = "".join(f"<li>ok: {e(line)}</li>" for line in self.ok) + "".join(
            f"<li>not checked: {e(line)}</li>" for line in self.not_checked
        )
        return f"<p><b>Diagnosis</b>: {e(self._header())}</p>{table}<ul>{extra}</ul>"
