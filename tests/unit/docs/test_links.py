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


def test_every_make_target_the_readme_names_exists() -> None:
    """A newcomer runs what the README says: each ``make <target>`` it names is a
    target of the Makefile."""
    targets = set(re.findall(r"^([A-Za-z0-9_.-]+)\s*:", (ROOT / "Makefile").read_text(),
                             re.MULTILINE))
    named = set(re.findall(r"\bmake ([a-z][a-z0-9-]*)", (ROOT / "README.md").read_text()))
    assert named, "the README names no make target"
    assert not named - targets, f"the README names make targets that do not exist: " \
                                f"{sorted(named - targets)}"


def test_the_readme_is_a_first_screen_then_a_page() -> None:
    """``make demo`` within the first 30 lines, and the page under 400 lines (the
    measurements and their history live in bench/README.md and docs/testing.md)."""
    lines = (ROOT / "README.md").read_text().splitlines()
    first = next(i for i, line in enumerate(lines, 1) if "make demo" in line)
    assert first <= 30 and len(lines) <= 400, (first, len(lines))


def test_the_readme_lists_every_docs_page() -> None:
    text = (ROOT / "README.md").read_text()
    missing = [p.name for p in sorted((ROOT / "docs").glob("*.md"))
               if f"(docs/{p.name})" not in text]
    assert not missing, f"README.md's docs list lacks {missing}"
