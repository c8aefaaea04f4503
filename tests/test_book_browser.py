"""The book in a real browser (tiered: needs Chromium and playwright-core, as
../shared/jupyterlab-check/setup.sh installs them), built from a real `course report` run:
every page loads without a console error, a failed request or a broken image, search finds a
technique by name, and at 1280 px and on a phone no headline figure is cut at the right edge
(a lesson page, the results page, the cheat sheet)."""

import functools
import http.server
import json
import os
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CANDIDATES = [
    os.environ.get("COURSE_PLAYWRIGHT_MODULES", ""),
    str(ROOT.parent / "shared" / "jupyterlab-check" / "node_modules"),
    str(Path.home() / ".cache" / "jupyterlab-check" / "node_modules"),
]
MODULES = next((c for c in CANDIDATES if c and (Path(c) / "playwright-core").is_dir()), None)
CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium")
LAYOUT = ("04_mixed_precision.html", "results.html", "cheatsheet.html")

pytestmark = [
    pytest.mark.skipif(
        os.environ.get("COURSE_TESTS") not in ("all", "browser"),
        reason="browser test: COURSE_TESTS=browser (or all) runs it",
    ),
    pytest.mark.skipif(
        not (MODULES and CHROMIUM and shutil.which("node")),
        reason="needs node, Chromium and playwright-core",
    ),
]


@pytest.fixture(scope="module")
def served_book(tmp_path_factory):
    from test_book import real_report

    from course_utils.book import build_book

    report = real_report(tmp_path_factory.mktemp("report") / "report")
    site = tmp_path_factory.mktemp("site") / "site"
    build_book(site, report)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield site, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def seen(served_book):
    """What the browser saw; screenshots go to $COURSE_BOOK_SHOTS when it is set."""
    site, url = served_book
    pages = sorted(
        str(p.relative_to(site))
        for p in site.rglob("*.html")
        if p.relative_to(site).parts[0] not in ("_static", "_sources")
    )
    shots = (
        ["--shots", os.environ["COURSE_BOOK_SHOTS"]] if os.environ.get("COURSE_BOOK_SHOTS") else []
    )
    run = subprocess.run(
        ["node", str(ROOT / "scripts" / "book_browser_check.js"), url, "autocast"]
        + ["--layout", ",".join(LAYOUT), *shots, *pages],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NODE_PATH": MODULES, "CHROMIUM": CHROMIUM},
    )
    assert run.returncode == 0, run.stderr[-2000:]
    return pages, json.loads(run.stdout)


def test_every_page_loads_cleanly_and_search_finds_a_technique(seen):
    pages, result = seen
    assert len(result["pages"]) == len(pages)
    bad = {p["page"]: p["errors"] for p in result["pages"] if p["errors"]}
    assert bad == {}
    assert "04_mixed_precision.html" in " ".join(result["search"]["hits"]), result["search"]


def test_no_headline_figure_is_cut_at_the_right_edge_at_1280_px_or_on_a_phone(seen):
    _, result = seen
    assert {(v["page"], v["width"]) for v in result["layout"]} == {
        (p, w) for p in LAYOUT for w in (1280, 390)
    }
    clipped = {(v["page"], v["width"]): v["clipped"] for v in result["layout"] if v["clipped"]}
    assert clipped == {}
    for view in result["layout"]:
        assert view["figures"] > 0, view  # the check looked at something
        if view["page"] == "04_mixed_precision.html":
            assert view["headlines"] >= 1, view
