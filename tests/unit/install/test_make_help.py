"""`make help` names every target of the Makefile, each with what it does: a target
added without its `## text` is missing from the list a user reads first."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def makefile_targets() -> set[str]:
    """The targets a user types: rules with a plain name (not the file targets the
    Makefile uses internally, whose names are variables)."""
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([a-z][a-z0-9_-]*):(?!=)", text, re.M))


def test_make_help_lists_every_target_with_a_description() -> None:
    out = subprocess.run(["make", "--no-print-directory", "help"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    listed = {}
    for line in out.splitlines():
        m = re.match(r"make (\S+)\s+(.*)$", line)
        assert m, f"not a `make TARGET  text` line: {line!r}"
        listed[m.group(1)] = m.group(2).strip()
    targets = makefile_targets()
    assert len(targets) > 20
    assert set(listed) == targets, (
        f"missing from `make help`: {sorted(targets - set(listed))}; "
        f"listed but no such target: {sorted(set(listed) - targets)}")
    assert all(listed.values()), [t for t, d in listed.items() if not d]


def test_every_target_is_phony() -> None:
    phony = re.search(r"^\.PHONY:(.*)$", (ROOT / "Makefile").read_text(), re.M)
    assert phony and set(phony.group(1).split()) == makefile_targets()
