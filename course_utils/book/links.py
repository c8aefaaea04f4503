"""Check a built site the way a reader's clicks would: every internal link and image resolves,
to an existing file and, for `#anchor`, to an element with that id."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.refs: list[str] = []

    def handle_starttag(self, tag, attrs) -> None:
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("name"):
            self.ids.add(attrs["name"])
        ref = (
            attrs.get("href")
            if tag in ("a", "link")
            else attrs.get("src")
            if tag
            in (
                "img",
                "script",
            )
            else None
        )
        if ref:
            self.refs.append(ref)


@dataclass
class LinkReport:
    pages: int = 0
    checked: int = 0
    broken: list[str] = field(default_factory=list)


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8", errors="replace"))
    return page


def check_links(site: Path) -> LinkReport:
    """Every internal href/src of every HTML page of `site`; external URLs are not fetched."""
    report, parsed = LinkReport(), {}
    pages = [p for p in sorted(site.rglob("*.html")) if p.relative_to(site).parts[0] != "_static"]
    for path in pages:
        parsed[path] = _parse(path)
    report.pages = len(pages)
    for path, page in parsed.items():
        for ref in page.refs:
            url = urlsplit(ref)
            if url.scheme or ref.startswith("//") or ref.startswith("mailto:"):
                continue
            report.checked += 1
            target = (path.parent / unquote(url.path)).resolve() if url.path else path
            if target.is_dir():
                target = target / "index.html"
            where = f"{path.relative_to(site)}: {ref}"
            if not target.is_file():
                report.broken.append(f"{where} (no such file)")
            elif url.fragment and target.suffix == ".html":
                ids = parsed[target].ids if target in parsed else _parse(target).ids
                if url.fragment not in ids:
                    report.broken.append(f"{where} (no element with id {url.fragment!r})")
    return report
