"""``python -m bench --profile --profile-rate HZ``: py-spy records the controller at
that many samples a second (a burst of 400 units is about 100 busy samples at the
default 100, too few for single lines)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench import profile
from bench.__main__ import parse


def _recorded_rate(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *rate: int) -> str:
    seen: list[list[str]] = []

    def popen(cmd: list[str], **kw: Any) -> Any:
        seen.append(cmd)
        return None

    monkeypatch.setattr(profile.subprocess, "Popen", popen)
    profile.PySpy("py-spy", tmp_path, *rate).start(4242, "burst")
    cmd = seen[0]
    assert cmd[cmd.index("--pid") + 1] == "4242"
    return cmd[cmd.index("--rate") + 1]


def test_py_spy_samples_at_the_rate_asked(monkeypatch: pytest.MonkeyPatch,
                                          tmp_path: Path) -> None:
    assert _recorded_rate(monkeypatch, tmp_path) == "100"
    assert _recorded_rate(monkeypatch, tmp_path, 1000) == "1000"


def test_the_rate_is_an_option_of_the_benchmark() -> None:
    assert parse(["--profile"]).profile_rate == 100
    assert parse(["--profile", "--profile-rate", "1000"]).profile_rate == 1000
    with pytest.raises(SystemExit):
        parse(["--profile", "--profile-rate", "0"])
