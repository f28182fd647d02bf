"""`python main.py --help`: what a newcomer types first shows every subcommand, and
each subcommand's help shows every flag's default."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _help(*args: str) -> str:
    r = subprocess.run([sys.executable, "main.py", *args, "--help"], cwd=ROOT,
                       capture_output=True, text=True, timeout=60, check=True)
    return r.stdout


def test_top_level_help_lists_the_subcommands() -> None:
    out = _help()
    assert "usage: gpu-orchestrator [-h] {manager,agent,webhook}" in out
    for sub in ("manager", "agent", "webhook"):
        assert f"    {sub} " in out, out


def _flag_blocks(text: str) -> dict[str, str]:
    """'--flag' -> its help text, from the options section of a --help output."""
    blocks: dict[str, str] = {}
    current = None
    for line in text.split("options:", 1)[1].splitlines():
        if line.startswith("  -"):
            current = next(w for w in line.split() if w.startswith("--")).rstrip(",")
            blocks[current] = line
        elif current is not None and line.startswith("    "):
            blocks[current] += " " + line.strip()
    return blocks


# flags whose unset default (None or "") is explained in words instead
UNSET = {"--kubeconfig", "--namespace", "--leader-election-namespace", "--node-name",
         "--cert-dir", "--host"}


@pytest.mark.parametrize("command", ["manager", "agent", "webhook"])
def test_every_flag_shows_its_default(command: str) -> None:
    blocks = _flag_blocks(_help(command))
    assert "--log-level" in blocks and len(blocks) >= 6
    hidden = [f for f, text in blocks.items()
              if f not in UNSET | {"--help"} and "default" not in text]
    assert not hidden, f"main.py {command} --help hides the defaults of {hidden}"


def test_manager_help_shows_values_a_user_needs() -> None:
    out = " ".join(_help("manager").split())
    assert "(default: :8080)" in out and "(default: 90.0)" in out
    assert "(default: info)" in out
