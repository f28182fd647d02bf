"""``--enable-dra`` on a cluster that does not serve resource.k8s.io/v1: a kube-apiserver
of its own, started with ``--runtime-config=resource.k8s.io/v1=false`` (etcd and
kube-apiserver alone, a few seconds), and the manager run as a user runs it
(``python main.py manager``).

Without the discovery check the ResourceSlice and ResourceClaim informers never sync:
a relist error every few seconds, no controller started, and an exit at the
cache-sync timeout (a crash loop). With it: one log line says DRA is unavailable, the
manager runs, and a ``deviceExposure: dra`` workload is told so."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from hack.testenv import ControlPlane
from runtime import Client, RestConfig
from tests.integration.controller.conftest import (
    ROOT,
    events_for,
    get_workload,
    wait_condition,
    workload,
)
from tests.integration.manager_process import ManagerProcess
from tests.waiting import eventually

NAMESPACE = "dra-off"


@pytest.fixture(scope="module")
def no_dra(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    cp = ControlPlane(tmp_path_factory.mktemp("no-dra"), api_only=True,
                      apiserver_flags=("--runtime-config=resource.k8s.io/v1=false",))
    cp.start()
    try:
        cp.kubectl("apply", "-k", str(Path(ROOT) / "config" / "crd"))
        cp.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                   "crd/gpuworkloads.gpu.orchestrator.dev")
        cp.kubectl("create", "namespace", NAMESPACE)
        yield cp
    finally:
        cp.stop()


def log_lines(m: ManagerProcess) -> list[dict]:
    out = []
    for line in m.log.read_text(errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def test_enable_dra_without_the_api_says_so_once_and_runs(no_dra: ControlPlane,
                                                          tmp_path: Path) -> None:
    assert "resource.k8s.io/v1" not in no_dra.kubectl("api-versions").stdout
    admin = Client(RestConfig.from_kubeconfig(str(no_dra.kubeconfig)))
    m = ManagerProcess(no_dra, NAMESPACE, "dra-off", tmp_path, "dra-off", "--enable-dra")
    m.start()
    try:
        # The controllers run: every cache synced (the DRA ones were never made).
        eventually(lambda: m.probe("/readyz")[0] == 200, timeout=60,
                   what=f"manager ready; log tail: {m.log}")
        admin.create(workload("wants-dra", NAMESPACE, deviceExposure="dra"))
        message = ("deviceExposure dra is unavailable: the API server does not serve "
                   "resource.k8s.io/v1")
        cond = wait_condition(admin, NAMESPACE, "wants-dra", "Scheduled", "DRAUnavailable")
        assert cond["status"] == "False" and cond["message"].startswith(message), cond
        assert get_workload(admin, NAMESPACE, "wants-dra")["status"]["phase"] == "Pending"
        event = eventually(
            lambda: next((e for e in events_for(admin, NAMESPACE, "wants-dra")
                          if e["reason"] == "DRAUnavailable"), None),
            timeout=30, what="DRAUnavailable Event on wants-dra")
        assert event["type"] == "Warning" and event["message"].startswith(message)
        assert m.proc is not None and m.proc.poll() is None, "the manager exited"
    finally:
        m.stop()
    lines = log_lines(m)
    said = [ln for ln in lines if ln.get("event") == "dra.unavailable"]
    assert len(said) == 1, said
    assert "does not serve resource.k8s.io/v1" in said[0]["reason"]
    # No informer of the missing API, so no relist errors about it.
    assert not [ln for ln in lines if ln.get("event") == "reflector.error"
                and "resource.k8s.io" in json.dumps(ln)]
