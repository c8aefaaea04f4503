"""Build hook (the rest of the metadata is in pyproject.toml): the wheel ships the documents a
notebook reads, so that Colab's `pip install git+...` has them with no repository beside it.

docs/ stays the one source (`course report --reference` writes docs/results): the build copies
these files into the wheel as course_utils/_docs/, and nothing is committed twice. An editable
install copies nothing: course_utils reads docs/ in the repository (course_utils/documents.py).
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
SHIPPED = ("glossary.md", "results/*.json")  # under docs/; MANIFEST.in lists them for the sdist


class BuildWithDocuments(build_py):
    """build_py, then docs/<SHIPPED> copied to course_utils/_docs/ in the build."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib) / "course_utils" / "_docs"
        shutil.rmtree(target, ignore_errors=True)  # a file removed from docs/ leaves no copy
        for pattern in SHIPPED:
            for source in sorted((ROOT / "docs").glob(pattern)):
                dest = target / source.relative_to(ROOT / "docs")
                dest.parent.mkdir(parents=True, exist_ok=True)
                self.copy_file(str(source), str(dest))


setup(cmdclass={"build_py": BuildWithDocuments})
