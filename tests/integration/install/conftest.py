"""Helm and manifest fixtures: the pinned helm binary built by hack/testenv, chart
rendering, and ``kubectl kustomize`` of config/."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from hack.testenv import ControlPlane
from hack.testenv.controlplane import binaries

ROOT = Path(__file__).resolve().parents[3]
CHARTS = ROOT / "charts"
NS = "gpu-orchestrator-system"


@pytest.fixture(scope="session")
def helm() -> Path:
    """hack/testenv/build.sh builds it with the control plane (``make testenv``)."""
    path = binaries() / "helm"
    assert os.access(path, os.X_OK), f"{path} missing: run `make testenv`"
    return path


def run_helm(helm: Path, *args: str, kubeconfig: Path | None = None,
             check: bool = True) -> subprocess.CompletedProcess[str]:
    home = Path(tempfile.gettempdir()) / "gpu-orchestrator-helm"  # no user's helm config
    env = {**os.environ, "HELM_CACHE_HOME": str(home / "cache"),
           "HELM_CONFIG_HOME": str(home / "config"), "HELM_DATA_HOME": str(home / "data")}
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    proc = subprocess.run([str(helm), *args], capture_output=True, text=True, env=env)
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({proc.returncode}):\n"
                             f"{proc.stdout}{proc.stderr}")
    return proc


def docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def render(helm: Path, chart: str, *args: str, namespace: str = NS) -> list[dict[str, Any]]:
    """``helm template`` of charts/<chart> as release ``gpu`` into ``namespace``."""
    out = run_helm(helm, "template", "gpu", str(CHARTS / chart), "--namespace", namespace,
                   *args).stdout
    return docs(out)


def kustomize(path: Path | str) -> list[dict[str, Any]]:
    proc = subprocess.run(["kubectl", "kustomize", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, f"kubectl kustomize {path}:\n{proc.stderr}"
    return docs(proc.stdout)


def by_key(objs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): o for o in objs}


@pytest.fixture(scope="session")
def crds(cluster: ControlPlane) -> ControlPlane:
    """The session cluster with config/crd and the gpu-orchestrator-system namespace."""
    cluster.kubectl("apply", "-k", str(ROOT / "config" / "crd"))
    cluster.kubectl("apply", "-f", str(ROOT / "config" / "manager" / "namespace.yaml"))
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                    "crd/gpuworkloads.gpu.orchestrator.dev", "crd/gpunodes.gpu.orchestrator.dev",
                    "crd/gpuqueues.gpu.orchestrator.dev")
    return cluster
