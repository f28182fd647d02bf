"""Issue 23: a second manager, webhook or agent on a port already bound exits with
one line saying so, not an OSError traceback."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.httpserver import AddressInUse, HTTPServer

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def taken() -> Iterator[int]:
    with contextlib.closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def test_a_bound_port_is_named_in_one_sentence(taken: int) -> None:
    with pytest.raises(AddressInUse, match=f"cannot listen on 127.0.0.1:{taken} "
                                           r"\(metrics\): the address is already in use"):
        HTTPServer(f"127.0.0.1:{taken}", {}, name="metrics")


def test_a_second_webhook_exits_with_one_line(taken: int, tmp_path: Path) -> None:
    # its own process: main() configures logging for the whole interpreter
    out = subprocess.run(
        [sys.executable, "main.py", "webhook", "--bind-address", "127.0.0.1",
         "--port", str(taken), "--cert-dir", str(tmp_path), "--no-patch-ca-bundle"],
        cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert (f"gpu-orchestrator webhook: cannot listen on 127.0.0.1:{taken} (webhook): the "
            "address is already in use") in out.stderr
    assert "Traceback" not in out.stderr
