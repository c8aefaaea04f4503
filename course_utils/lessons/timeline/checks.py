"""Lesson 14's graded checks and their thresholds: exercise 1 (name the stall a trace shows)
in stall_check.py, exercise 2 (a compile plan for a job) in compile_check.py; the numbers
they compare against in thresholds.py."""

from __future__ import annotations

from .compile_check import check_compile_plan
from .stall_check import check_find_stall
from .thresholds import THRESHOLDS

__all__ = ["THRESHOLDS", "check_compile_plan", "check_find_stall"]
