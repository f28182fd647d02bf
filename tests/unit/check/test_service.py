"""gpu-scheduler-check: what it logs, and that SIGTERM ends it cleanly."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from internal.check.service import run

ROOT = Path(__file__).resolve().parents[3]


def test_logs_node_and_devices() -> None:
    out = io.StringIO()
    env = {"NODE_NAME": "node3", "CUDA_VISIBLE_DEVICES": "0,1,2", "POD_NAME": "check-2"}
    assert run(0.01, threading.Event(), out, env, max_count=2) == 0
    lines = out.getvalue().splitlines()
    assert len(lines) == 3
    assert "node=node3" in lines[0] and "CUDA_VISIBLE_DEVICES=0,1,2" in lines[0]
    assert "pod=check-2" in lines[1] and "count=2" in lines[1]


def test_unset_values_are_visible() -> None:
    out = io.StringIO()
    run(0.01, threading.Event(), out, {}, max_count=1)
    assert "node=<unset>" in out.getvalue() and "CUDA_VISIBLE_DEVICES=<unset>" in out.getvalue()


def test_sigterm_exits_cleanly() -> None:
    env = {**os.environ, "NODE_NAME": "node1", "CUDA_VISIBLE_DEVICES": "0,1"}
    proc = subprocess.Popen([sys.executable, "-m", "internal.check", "--interval=60"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()  # the first line comes at once
        assert "node=node1" in first and "CUDA_VISIBLE_DEVICES=0,1" in first
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0  # does not wait out the 60 s interval
        assert "gpu_check_stopped" in proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
