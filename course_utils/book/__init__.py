"""`course book`: the course as a static site (Sphinx + MyST-NB + the Sphinx Book Theme).

It renders what a `course report` run wrote, never executing a notebook itself: each lesson's
learner copy with the outputs of that run (demos ran on the reference answers; a check cell says
only whether the reference passed), a landing page, the results of every run side by side, a
cheat sheet built from course_utils.techniques, and the glossary.
"""

from .build import build_book
from .errors import BookError

__all__ = ["BookError", "build_book"]
