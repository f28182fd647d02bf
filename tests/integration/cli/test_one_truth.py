"""`kubectl gpu nodes` and the placing controller agree, as a user sees them: on a
node with an unhealthy device and a node whose GPU agent went silent, the plugin's
free counts are what the controller offers, and the controller's why-pending
message names the unhealthy and stale devices.

This module runs its own placing controller (module scope); its workloads select
only its own kwok nodes."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from hack.testenv import ControlPlane
from internal.cli.main import main
from internal.scheduling.framework import STALE_REASON
from runtime import Client, RestConfig
from tests.integration.controller.conftest import (
    ROOT,
    NodeGroup,
    Running,
    get_workload,
    wait_phase,
    workload,
)
from tests.waiting import eventually

API = "/apis/gpu.orchestrator.dev/v1alpha1"
STALE_AFTER = 600.0  # seconds: the fresh node stays fresh for the whole test


def stamp(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture(scope="module")
def installed(cluster: ControlPlane) -> ControlPlane:
    cluster.kubectl("apply", "-k", str(ROOT) + "/config")
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                    "crd/gpuworkloads.gpu.orchestrator.dev", "crd/gpunodes.gpu.orchestrator.dev",
                    "crd/gpuqueues.gpu.orchestrator.dev")
    return cluster


@pytest.fixture(scope="module")
def placing(installed: ControlPlane) -> Iterator[Running]:
    run = Running(installed, stale_after=STALE_AFTER).start()
    yield run
    run.stop()


@pytest.fixture
def nodes(installed: ControlPlane) -> Iterator[tuple[NodeGroup, str, str]]:
    """Two kwok nodes of 4 GPUs: `sick` reports device 2 unhealthy, `silent`'s agent
    last reported an hour ago."""
    group = NodeGroup(installed)
    sick, silent = group.add(2, 4)
    now = datetime.now(UTC)
    for name, unhealthy, beat in ((sick, {2}, now), (silent, set(), now - timedelta(hours=1))):
        code, body = installed.api("POST", f"{API}/gpunodes", {
            "apiVersion": "gpu.orchestrator.dev/v1alpha1", "kind": "GPUNode",
            "metadata": {"name": name}, "spec": {"nodeName": name}})
        assert code == 201, body
        devices = [{"index": i, "uuid": f"GPU-{name}-{i}", "model": "NVIDIA A100",
                    "memoryTotalMiB": 40960, "healthy": i not in unhealthy}
                   for i in range(4)]
        code, body = installed.api(
            "PATCH", f"{API}/gpunodes/{name}/status",
            {"status": {"devices": devices, "deviceCount": 4, "healthyCount": 4 - len(unhealthy),
                        "lastHeartbeatTime": stamp(beat)}},
            content_type="application/merge-patch+json")
        assert code == 200, body
    try:
        yield group, sick, silent
    finally:
        for name in (sick, silent):
            installed.api("DELETE", f"{API}/gpunodes/{name}")
        group.delete()


@pytest.fixture
def group(installed: ControlPlane) -> Iterator[NodeGroup]:
    g = NodeGroup(installed)
    yield g
    g.delete()


def gpu_nodes(cluster: ControlPlane, capsys: pytest.CaptureFixture[str],
              *names: str) -> dict[str, dict]:
    capsys.readouterr()
    code = main(["nodes", *names, "-o", "json", "--gpunode-stale-after", str(STALE_AFTER),
                 "--kubeconfig", str(cluster.kubeconfig)])
    out, err = capsys.readouterr()
    assert code == 0, err
    return {n["name"]: n for n in json.loads(out)["nodes"]}


def test_kubectl_gpu_nodes_agrees_with_the_controller(
        placing: Running, nodes: tuple[NodeGroup, str, str], namespace: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    group, sick, silent = nodes
    admin = Client(RestConfig.from_kubeconfig(str(placing.cluster.kubeconfig)))
    placing.wait_nodes([sick, silent])
    # the reports the plugin reads from the API reach the controller's cache a moment
    # later (longer while a watch re-opens): what follows compares the two
    placing.sees(sick, lambda i: i.has_gpunode and i.unhealthy == {2}, "device 2 unhealthy")
    placing.sees(silent, lambda i: i.has_gpunode and i.stale, "its agent silent")

    view = gpu_nodes(placing.cluster, capsys, sick, silent)
    assert (view[sick]["free"], view[sick]["unhealthy"], view[sick]["stale"]) == (3, 1, 0)
    assert [d["health"] for d in view[sick]["devices"]] == [
        "Healthy", "Healthy", "Unhealthy", "Healthy"]
    assert (view[silent]["free"], view[silent]["stale"]) == (0, 4)
    assert {d["health"] for d in view[silent]["devices"]} == {"Stale"}

    # 4 GPUs: the plugin says no node has 4 free; the controller says why, per node
    admin.create(workload("four", namespace, gpusPerReplica=4, nodeSelector=group.selector))

    def why() -> str | None:
        for c in (get_workload(admin, namespace, "four").get("status") or {}).get(
                "conditions") or ():
            if c["type"] == "Scheduled" and c["status"] == "False" and sick in c["message"]:
                return c["message"]
        return None

    message = eventually(why, timeout=60, what="four is unschedulable, with reasons")
    assert f"{sick}: 3 free GPUs (1 unhealthy), needs 4" in message
    assert f"{silent}: {STALE_REASON}" in message

    # 3 GPUs: exactly the free ones the plugin showed
    admin.create(workload("three", namespace, gpusPerReplica=3, nodeSelector=group.selector))
    placed = wait_phase(admin, namespace, "three", "Scheduled", "Running", timeout=60)
    (p,) = placed["status"]["placements"]
    free_before = [d["index"] for d in view[sick]["devices"] if d["free"]
                   and d["health"] == "Healthy"]
    assert p["node"] == sick and sorted(p["devices"]) == free_before == [0, 1, 3]
    after = gpu_nodes(placing.cluster, capsys, sick)[sick]
    assert after["free"] == 0
    held = {d["index"]: d.get("holder") for d in after["devices"]}
    assert all(held[i] == f"{namespace}/three[0]" for i in (0, 1, 3)) and held[2] is None


def test_submit_into_a_missing_namespace_says_so(installed: ControlPlane, tmp_path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    ns = f"missing-{uuid.uuid4().hex[:6]}"
    f = tmp_path / "train.yaml"
    f.write_text("apiVersion: gpu.orchestrator.dev/v1alpha1\nkind: GPUWorkload\n"
                 "metadata: {name: train}\nspec: {gpusPerReplica: 1}\n")
    code = main(["submit", str(f), "-n", ns, "--kubeconfig", str(installed.kubeconfig)])
    _, err = capsys.readouterr()
    assert code == 5
    assert err == (f"error: namespace {ns} not found; create it with: "
                   f"kubectl create namespace {ns}\n")


def test_a_bad_devices_annotation_is_counted_as_the_controller_counts_it(
        placing: Running, group: NodeGroup, namespace: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A pod bound with devices annotation '0,x' and one requested GPU: the controller
    cannot tell which device it uses, so it counts one GPU of the node, unnamed. The
    plugin shows exactly that (never device 0 as held by it, never FREE 3) and names
    the problem; the controller then refuses 3 GPUs and places 2."""
    admin = Client(RestConfig.from_kubeconfig(str(placing.cluster.kubeconfig)))
    (node,) = group.add(1, 4)
    placing.wait_nodes([node])
    admin.create({"apiVersion": "v1", "kind": "Pod",
                  "metadata": {"name": "bad", "namespace": namespace,
                               "annotations": {"gpu.orchestrator.dev/devices": "0,x"}},
                  "spec": {"nodeName": node, "containers": [{
                      "name": "main", "image": "x",
                      "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}})
    capsys.readouterr()
    code = main(["nodes", node, "-o", "json", "--kubeconfig", str(placing.cluster.kubeconfig)])
    out, err = capsys.readouterr()
    assert code == 0, err
    data = json.loads(out)
    (view,) = data["nodes"]
    assert view["counted"] == {f"{namespace}/pod/bad": 1} and view["free"] == 3
    # one of the four is the pod's, but which is unknown: none is shown free
    assert all("holder" not in d and not d["free"] and d["maybe_counted"] for d in view["devices"])
    assert any(f"pod {namespace}/bad: annotation gpu.orchestrator.dev/devices='0,x'" in p
               for p in data["problems"])

    # the node counts GPUs (the device plugin's): counted placements only
    admin.create(workload("four", namespace, gpusPerReplica=4, nodeSelector=group.selector,
                          deviceExposure="device-plugin"))

    def why() -> str | None:
        for c in (get_workload(admin, namespace, "four").get("status") or {}).get(
                "conditions") or ():
            if c["type"] == "Scheduled" and c["status"] == "False" and node in c["message"]:
                return c["message"]
        return None

    assert f"{node}: 3 free GPUs, needs 4" in eventually(why, timeout=60, what="four waits")
    admin.create(workload("three", namespace, gpusPerReplica=3, nodeSelector=group.selector,
                          deviceExposure="device-plugin"))
    wait_phase(admin, namespace, "three", "Scheduled", "Running", timeout=60)
    capsys.readouterr()
    assert main(["nodes", node, "-o", "json",
                 "--kubeconfig", str(placing.cluster.kubeconfig)]) == 0
    (after,) = json.loads(capsys.readouterr()[0])["nodes"]
    assert after["free"] == 0 and after["counted"][f"{namespace}/pod/bad"] == 1
    assert sum(after["counted"].values()) == 4 and not after["overcommitted"]
