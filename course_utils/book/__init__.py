"""`course book`: the course as a static site (Sphinx + MyST-NB + the Sphinx Book Theme).

It renders what a `course report` run wrote, never executing a notebook itself: each lesson's
learner copy with the outputs of that run (demos ran on the reference answers), the reference
results of the device classes the run did not have, a results page over every file in
docs/results, a cheat sheet built from course_utils.techniques, and the glossary.
"""

from .build import build_book

__all__ = ["build_book"]
