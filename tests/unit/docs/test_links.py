"""Links in README.md and docs/*.md lead to files of the repository (a reader of a
clone or of the repository's web page cannot follow a link out of it)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
PAGES = [ROOT / "README.md", ROOT / "bench" / "README.md",
         *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve_inside_the_repository(page: Path) -> None:
    bad = []
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue  # http(s), mailto; anchors within the page
        path = (page.parent / target.split("#", 1)[0]).resolve()
        if not path.is_relative_to(ROOT) or not path.exists():
            bad.append(target)
    assert not bad, f"{page.relative_to(ROOT)} links outside the repository or to nothing: {bad}"
