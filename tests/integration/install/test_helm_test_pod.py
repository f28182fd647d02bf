"""`helm test`'s pod (charts/gpu-orchestrator/templates/tests): its script, as the
chart renders it, run with a real token of its own ServiceAccount against a kube-apiserver
that holds the chart's test RBAC. The local control plane runs no containers, so the
script runs as a local process, seeing what the pod would see: its lines, and its exit
code, for a working release and for one whose manager is not ready or has no leader."""

from __future__ import annotations

import datetime
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from hack.testenv import ControlPlane, signals_stop
from tests.integration.install.conftest import NS, ROOT, render
from tests.integration.install.helm_test_pod import account_dir, run_script

CRDS = ("gpuworkloads.gpu.orchestrator.dev", "gpunodes.gpu.orchestrator.dev",
        "gpuqueues.gpu.orchestrator.dev")


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    cp = ControlPlane(tmp_path_factory.mktemp("helm-test-pod"), api_only=True)
    with signals_stop():
        cp.start()
        try:
            cp.kubectl("apply", "-k", str(ROOT / "config" / "crd"))
            cp.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                       *(f"crd/{c}" for c in CRDS))
            cp.kubectl("create", "namespace", NS)
            yield cp
        finally:
            cp.stop()


@pytest.fixture(scope="module")
def hooks(helm: Path) -> list[dict]:
    objs = render(helm, "gpu-orchestrator", "--show-only", "templates/tests/install-test.yaml")
    assert all(o["metadata"]["annotations"]["helm.sh/hook"] == "test" for o in objs)
    return objs


@pytest.fixture(scope="module")
def sa_dir(plane: ControlPlane, hooks: list[dict],
           tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test's ServiceAccount and RBAC from the chart, and a token of that account
    where the pod would find it."""
    rbac = [o for o in hooks if o["kind"] != "Pod"]
    plane.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                          "items": rbac}))
    return account_dir(plane, NS, "gpu-orchestrator-test", tmp_path_factory.mktemp("sa"))


def run_test_pod(plane: ControlPlane, hooks: list[dict], sa_dir: Path,
                 leader_elect: str = "true") -> subprocess.CompletedProcess[str]:
    pod = next(o for o in hooks if o["kind"] == "Pod")
    return run_script(plane, pod, sa_dir, {"LEADER_ELECT": leader_elect})


def manager(plane: ControlPlane, ready: int) -> None:
    """config/'s manager Deployment, with ``ready`` of its 2 replicas ready."""
    dep = yaml.safe_load((ROOT / "config" / "manager" / "manager.yaml").read_text())
    plane.kubectl("apply", "-f", "-", input=json.dumps(dep))
    plane.kubectl("patch", "deployment", "gpu-orchestrator-manager", "-n", NS,
                  "--subresource=status", "--type=merge",
                  "-p", json.dumps({"status": {"replicas": 2, "readyReplicas": ready}}))


def lease(plane: ControlPlane, age_s: int) -> None:
    renew = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=age_s)
    plane.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "gpu-orchestrator-leader", "namespace": NS},
        "spec": {"holderIdentity": "manager-0_abc", "leaseDurationSeconds": 15,
                 "renewTime": renew.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}}))


def test_a_working_release_passes(plane: ControlPlane, hooks: list[dict], sa_dir: Path) -> None:
    manager(plane, ready=2)
    lease(plane, age_s=2)
    proc = run_test_pod(plane, hooks, sa_dir)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:3] == [f"ok   CRD {c} Established" for c in CRDS]
    assert lines[3] == "ok   manager: 2 of 2 replicas ready (/readyz)"
    assert lines[4].startswith("ok   leader: manager-0_abc, renewed ")


def test_no_ready_manager_and_a_stale_lease_fail(plane: ControlPlane, hooks: list[dict],
                                                 sa_dir: Path) -> None:
    manager(plane, ready=0)
    lease(plane, age_s=120)
    proc = run_test_pod(plane, hooks, sa_dir)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAIL manager: 0 of 2 replicas ready (/readyz)" in proc.stdout
    assert re.search(r"^FAIL leader: manager-0_abc, renewed 1[23]\ds ago$", proc.stdout, re.M), \
        proc.stdout
    # Without leader election there is no Lease to ask for.
    manager(plane, ready=1)
    proc = run_test_pod(plane, hooks, sa_dir, leader_elect="false")
    assert proc.returncode == 0 and "leader" not in proc.stdout, proc.stdout


def test_its_account_reads_nothing_else(plane: ControlPlane, sa_dir: Path) -> None:
    token = (sa_dir / "token").read_text()
    for path in (f"/api/v1/namespaces/{NS}/secrets",
                 f"/apis/apps/v1/namespaces/{NS}/deployments",
                 "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"):
        status, _ = plane.api("GET", path, headers={"Authorization": f"Bearer {token}"},
                              client_cert=False)
        assert status == 403, path
