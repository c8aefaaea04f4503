"""The book's Sphinx configuration and its stylesheet: the Book Theme's launch and download
buttons pointed at the learner notebooks, and nothing a reader needs cut at the right edge."""

from __future__ import annotations

CONF = """\
project = "Faster PyTorch Training"
author = "the course's authors"
extensions = ["myst_nb"]
html_theme = "sphinx_book_theme"
html_title = "Faster PyTorch Training"
html_static_path = ["_static"]
html_css_files = ["course.css"]
html_favicon = "favicon.svg"  # else browsers ask for /favicon.ico and log a 404
html_context = {{"default_mode": "light"}}  # unset, the theme logs a console error per page
html_sourcelink_suffix = ""  # _sources/NN.ipynb, replaced by the learner notebook after the build
html_theme_options = {{
    "repository_url": "{repo}",
    "repository_branch": "main",
    "path_to_docs": "notebooks",  # the launch buttons open notebooks/NN_*.ipynb, the learner copy
    "use_repository_button": True,
    "use_download_button": True,
    "launch_buttons": {{"colab_url": "https://colab.research.google.com"}},
}}
nb_execution_mode = "off"  # the book renders what `course report` ran; it executes nothing
myst_enable_extensions = ["colon_fence"]
exclude_patterns = ["_build", "_static"]
suppress_warnings = ["mystnb.unknown_mime_type"]  # the course's check and effect records
"""

FAVICON = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16">'
    '<path d="M2 14 L8 2 L14 14 Z" fill="#ee4c2c"/></svg>'
)

CSS = """\
/* The course book: a figure at the end of a long line must stay on screen at 1280 px and on a
   phone, so text wraps where the theme would scroll it out of sight. */
.bd-article pre {
  white-space: pre-wrap;
  overflow-wrap: anywhere;
}
/* A printed table (the profiler's) keeps its columns and scrolls instead. */
div.tag_course-wide-output div.cell_output pre {
  white-space: pre;
  overflow-wrap: normal;
  font-size: 0.75em;
}
table.table td, table.table th { white-space: normal; overflow-wrap: anywhere; }
.bd-article span.pre, .bd-article a { white-space: pre-wrap; overflow-wrap: anywhere; }
.course-effect {
  border-left: 4px solid #ee4c2c;
  background: var(--pst-color-surface);
  padding: 0.4em 0.8em;
  margin: 0.3em 0;
}
.course-check-note { font-style: italic; color: var(--pst-color-text-muted); margin: 0.2em 0; }
div.cheat-card.docutils.container {
  border: 1px solid var(--pst-color-border);
  border-radius: 6px;
  padding: 0.5em 1em;
  margin: 0 0 1em;
}
.cheat-card p { margin: 0.3em 0; }
"""
