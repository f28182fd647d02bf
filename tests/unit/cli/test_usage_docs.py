"""docs/usage.md's error examples are what the plugin prints: each `$ kubectl gpu
...` line of the block is run, and its stderr is the `error:` line that follows."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from internal.cli.main import main

USAGE = Path(__file__).resolve().parents[3] / "docs" / "usage.md"


def examples() -> list[tuple[str, str]]:
    text = USAGE.read_text()
    block = text.split("starting with `error:`, for example:\n\n```\n", 1)[1].split("```", 1)[0]
    lines = block.splitlines()
    return [(cmd.removeprefix("$ kubectl gpu "), err)
            for cmd, err in zip(lines[::2], lines[1::2], strict=True)]


def test_the_docs_show_examples() -> None:
    assert len(examples()) >= 3


@pytest.mark.parametrize(("argv", "expected"), examples())
def test_the_documented_error_is_printed(argv: str, expected: str,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main(shlex.split(argv)) != 0
    out, err = capsys.readouterr()
    assert out == "" and err == expected + "\n"
