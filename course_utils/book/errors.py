"""The book's own failure, under the course's root exception (the CLI exits 2 with its text)."""

from __future__ import annotations

from ..errors import CourseError


class BookError(CourseError):
    """Raised when the book would mislead a reader: a lesson the report ran shown without its
    outputs, or an output folder that is not a book to replace."""
