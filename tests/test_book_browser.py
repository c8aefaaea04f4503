"""The book in a real browser (tiered: needs Chromium and playwright-core, as
../shared/jupyterlab-check/setup.sh installs them): every page loads without a console error,
a failed request or a broken image, and search finds a technique by name."""

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
    from test_book import LESSON, RESULTS, _executed

    from course_utils.book import build_book

    report = tmp_path_factory.mktemp("report")
    (report / "results.json").write_text((RESULTS / "cpu-bf16-amd-epyc.json").read_text())
    _executed(report, LESSON)
    site = tmp_path_factory.mktemp("site") / "site"
    build_book(site, report)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield site, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_every_page_loads_cleanly_and_search_finds_a_technique(served_book):
    site, url = served_book
    pages = sorted(
        str(p.relative_to(site))
        for p in site.rglob("*.html")
        if p.relative_to(site).parts[0] not in ("_static", "_sources")
    )
    run = subprocess.run(
        ["node", str(ROOT / "scripts" / "book_browser_check.js"), url, "autocast", *pages],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NODE_PATH": MODULES, "CHROMIUM": CHROMIUM},
    )
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(run.stdout)
    assert len(result["pages"]) == len(pages)
    bad = {p["page"]: p["errors"] for p in result["pages"] if p["errors"]}
    assert bad == {}
    assert "04_mixed_precision.html" in " ".join(result["search"]["hits"]), result["search"]
