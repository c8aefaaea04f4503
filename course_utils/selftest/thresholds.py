"""Every threshold of the lessons under test, with its evidence, what this run measured
against it, and a flag where its evidence was never measured on this device class.

`measured_on` (the device classes a threshold was measured on) is read with getattr, so
thresholds that do not carry it yet are flagged rather than trusted.
"""

from __future__ import annotations

import importlib
import math

from .items import CHECK, LESSONS, Item


def lesson_thresholds(prefix: str) -> dict:
    """name -> Threshold of lesson `prefix`'s checks module (empty if it has none)."""
    module = importlib.import_module(f"course_utils.lessons.{LESSONS[prefix][1]}.checks")
    found = getattr(module, "THRESHOLDS", {})
    return {k: v for k, v in found.items() if hasattr(v, "value") and hasattr(v, "evidence")}


def _measured_against(value: float, records: list[tuple[str, dict]]) -> list[dict]:
    """The parts of these check results whose threshold is `value`."""
    hits = []
    for check_id, record in records:
        for part in (record.get("result") or {}).get("parts", []):
            th = part.get("threshold")
            if th is not None and math.isclose(th, value, rel_tol=1e-9, abs_tol=1e-12):
                hits.append(
                    {
                        "check": check_id,
                        "part": part["name"],
                        "value": part.get("value"),
                        "status": part["status"],
                    }
                )
    return hits


def threshold_rows(items: list[Item], records: dict[str, dict], device_class: str) -> list[dict]:
    rows = []
    for prefix in dict.fromkeys(i.lesson for i in items if i.lesson in LESSONS):
        checked = [
            (i.name, records[i.key])
            for i in items
            if i.lesson == prefix and i.kind == CHECK and i.key in records
        ]
        for name, th in lesson_thresholds(prefix).items():
            measured_on = tuple(getattr(th, "measured_on", ()) or ())
            rows.append(
                {
                    "lesson": prefix,
                    "name": name,
                    "value": th.value,
                    "evidence": th.evidence,
                    "measured_on": list(measured_on),
                    "unmeasured_here": device_class not in measured_on,
                    "measured": _measured_against(th.value, checked),
                }
            )
    return rows
