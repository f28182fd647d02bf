"""The check pod's probes (``python -m internal.check --probe ready|live``): ready once
it has the GPUs the webhook injects, live while its loop writes its heartbeat."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from internal.check.service import probe, run

ROOT = Path(__file__).resolve().parents[3]


def test_ready_only_with_the_devices_the_webhook_injects() -> None:
    ok, why = probe("ready", {"NODE_NAME": "node4", "CUDA_VISIBLE_DEVICES": "3"})
    assert ok and why == "node4: CUDA_VISIBLE_DEVICES=3"
    ok, why = probe("ready", {"NODE_NAME": "node4"})
    assert not ok
    assert "no CUDA_VISIBLE_DEVICES" in why
    assert "spec.template.metadata.annotations" in why  # where the map belongs


def test_live_while_the_loop_writes_its_heartbeat(tmp_path: Path) -> None:
    beat = tmp_path / "heartbeat"
    env = {"CHECK_HEARTBEAT": str(beat)}
    assert probe("live", env, max_age=5)[0] is False  # no line written yet
    run(0.01, threading.Event(), io.StringIO(), env, max_count=1)
    assert beat.exists()
    assert probe("live", env, max_age=5) == (True, "last line 0s ago")
    old = time.time() - 60
    os.utime(beat, (old, old))
    ok, why = probe("live", env, max_age=30)
    assert not ok and why == "no line for 60s (more than 30s)"


def test_the_probe_command_exits_by_its_answer() -> None:
    env = {**os.environ, "NODE_NAME": "node1", "PYTHONPATH": str(ROOT)}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    p = subprocess.run([sys.executable, "-m", "internal.check", "--probe=ready"], env=env,
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 1 and "no CUDA_VISIBLE_DEVICES" in p.stdout
    env["CUDA_VISIBLE_DEVICES"] = "0,1"
    p = subprocess.run([sys.executable, "-m", "internal.check", "--probe=ready"], env=env,
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stdout + p.stderr
