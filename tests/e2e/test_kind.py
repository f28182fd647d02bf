"""The seed's StatefulSet on a real kind cluster: hack/kind-e2e.sh builds the
images, deploys, and checks each replica's node and CUDA_VISIBLE_DEVICES. Runs where
a Docker engine and kind exist; skipped, saying which is missing, elsewhere."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _missing() -> str | None:
    if shutil.which("kind") is None:
        return "kind is not installed"
    if shutil.which("docker") is None:
        return "docker CLI is not installed"
    try:
        info = subprocess.run(["docker", "info"], capture_output=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"docker info failed: {exc}"
    if info.returncode != 0:
        return "no Docker engine (docker info failed)"
    return None


@pytest.mark.timeout(1800)
def test_seed_statefulset_on_kind() -> None:
    reason = _missing()
    if reason:
        pytest.skip(reason)
    artifacts = ROOT / "tests" / "artifacts" / "kind"
    env = {**os.environ, "ARTIFACTS": str(artifacts)}
    proc = subprocess.run(["bash", str(ROOT / "hack" / "kind-e2e.sh")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1700)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (artifacts / "pods-wide.txt").is_file()
    placements = (artifacts / "placements.txt").read_text()
    for i, (node, devs) in enumerate([("node1", "0,1"), ("node2", "2"), ("node3", "0,1,2"),
                                      ("node4", "3"), ("node4", "3")]):
        assert f"gpu-scheduler-check-{i} node={node} CUDA_VISIBLE_DEVICES={devs}\n" in (
            placements)
    assert list(artifacts.glob("node3_*.log")) and list(artifacts.glob("node4_*.log"))
