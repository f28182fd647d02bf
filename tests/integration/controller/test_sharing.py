"""Sharing a GPU, as a user sees it: memory shares packed onto the fewest devices and
never beside a whole-GPU holder, a share held until its pod is gone, and MIG
instances handed out one per replica. GPUNodes of 4 x 80 GiB devices, written here
as an agent would."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from api.v1alpha1.types import API_VERSION
from hack.testenv import ControlPlane
from runtime import Client, errors
from tests.integration.controller.conftest import (
    NodeGroup,
    Running,
    cleanup_gpunodes,
    delete_workload,
    env_of,
    pods_of,
    wait_condition,
    wait_phase,
    workload,
)
from tests.waiting import eventually

GI = 1024
MIG_UUIDS = [f"MIG-{i:08x}-0000-4000-8000-00000000000{i}" for i in range(7)]


def gw_columns(cluster: ControlPlane, ns: str, name: str, *columns: str) -> list[str]:
    """``kubectl get gw NAME``: the cells of ``columns``, found by their header."""
    header, row = cluster.kubectl("get", "-n", ns, "gw", name).stdout.splitlines()[:2]
    cells = dict(zip(header.split(), row.split(), strict=True))
    return [cells[c] for c in columns]


def _report(admin: Client, name: str, devices: list[dict[str, Any]]) -> None:
    """Writes the GPUNode of ``name`` as the agent would (a fresh heartbeat)."""
    admin.create({"apiVersion": API_VERSION, "kind": "GPUNode", "metadata": {"name": name},
                  "spec": {"nodeName": name}})
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    admin.patch(API_VERSION, "GPUNode", name, {"status": {
        "devices": devices, "deviceCount": len(devices), "healthyCount": len(devices),
        "lastHeartbeatTime": now}}, subresource="status")


def _device(node: str, i: int, **extra: Any) -> dict[str, Any]:
    return {"index": i, "uuid": f"GPU-{node}-{i}", "model": "NVIDIA H100 80GB HBM3",
            "memoryTotalMiB": 80 * GI, "healthy": True, **extra}


def _held(admin: Client, ns: str, name: str) -> tuple[str, int, dict[str, Any]]:
    pod, = pods_of(admin, ns, name)
    ann = pod["metadata"]["annotations"]
    return pod["spec"]["nodeName"], int(ann["gpu.orchestrator.dev/devices"]), pod


RETRY = {"maxRetries": 50, "backoffSeconds": 1, "maxBackoffSeconds": 2}


def test_eight_memory_shares_fill_exactly_two_devices_and_never_meet_a_whole_gpu(
        controller: Running, admin: Client, namespace: str, group: NodeGroup,
        installed: ControlPlane) -> None:
    nodes = controller.wait_nodes(group.add(2, gpus=4))
    with cleanup_gpunodes(admin, *nodes):
        for n in nodes:
            _report(admin, n, [_device(n, i) for i in range(4)])
            controller.sees(n, lambda i: i.has_gpunode and len(i.usable) == 4, "4 devices")
        for i in range(8):
            admin.create(workload(f"s{i}", namespace, schedulingStrategy="bestFit",
                                  gpuShare={"memory": "20Gi"}, nodeSelector=group.selector))
            wait_phase(admin, namespace, f"s{i}", "Running")
        shared = {}
        for i in range(8):
            node, dev, pod = _held(admin, namespace, f"s{i}")
            assert pod["metadata"]["annotations"]["gpu.orchestrator.dev/share"] == \
                "memory=20480Mi"
            assert env_of(pod, "CUDA_VISIBLE_DEVICES") == str(dev)
            shared.setdefault((node, dev), []).append(f"s{i}")
        assert sorted(len(v) for v in shared.values()) == [4, 4], shared
        assert len({n for n, _ in shared}) == 1, "bestFit packs the shares on one node"
        assert gw_columns(installed, namespace, "s0", "PHASE", "STRATEGY", "GPUS") == \
            ["Running", "bestFit", "20Gi"]
        admin.create(workload("whole", namespace, schedulingStrategy="bestFit",
                              nodeSelector=group.selector, retryPolicy=RETRY))
        wait_phase(admin, namespace, "whole", "Running")
        node, dev, _ = _held(admin, namespace, "whole")
        assert (node, dev) not in shared, "a whole GPU never lands on a shared device"
        admin.create(workload("four", namespace, gpusPerReplica=4, nodeSelector=group.selector,
                              schedulingStrategy="bestFit", retryPolicy=RETRY))
        w = wait_phase(admin, namespace, "four", "Running")
        shared_node = next(iter(shared))[0]
        assert w["status"]["placements"][0]["node"] != shared_node, \
            "four whole GPUs fit only on the node with no shares"


def test_a_deleted_shares_device_is_free_only_when_its_pod_is_gone(
        controller: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    node, = controller.wait_nodes(group.add(1, gpus=1))
    with cleanup_gpunodes(admin, node):
        _report(admin, node, [_device(node, 0)])
        controller.sees(node, lambda i: i.has_gpunode and len(i.usable) == 1, "1 device")
        slow = {"spec": {"terminationGracePeriodSeconds": 5,
                         "containers": [{"name": "main", "image": "busybox:1.36"}]}}
        admin.create(workload("first", namespace, gpuShare={"memory": "60Gi"},
                              nodeSelector=group.selector, template=slow))
        wait_phase(admin, namespace, "first", "Running")
        admin.create(workload("second", namespace, gpuShare={"memory": "40Gi"},
                              nodeSelector=group.selector, retryPolicy=RETRY))
        cond = wait_condition(admin, namespace, "second", "Scheduled", "Unschedulable")
        assert f"{node}: no shared device with 40Gi free" in cond["message"]
        delete_workload(admin, namespace, "first")

        def first_gone() -> bool:
            left = pods_of(admin, namespace, "first")
            # while the first share's pod terminates, the second is not placed
            assert not pods_of(admin, namespace, "second") or not left, \
                "placed beside a terminating pod's share"
            return not left
        eventually(first_gone, timeout=30, what="the first share's pod is gone")
        wait_phase(admin, namespace, "second", "Running", timeout=30)


def test_mig_instances_one_per_replica_and_never_whole(
        controller: Running, admin: Client, namespace: str, group: NodeGroup,
        installed: ControlPlane) -> None:
    node, = controller.wait_nodes(group.add(1, gpus=2))
    mig = [{"uuid": u, "profile": "1g.10gb", "memoryTotalMiB": 9984, "placement": f"{i}:1"}
           for i, u in enumerate(MIG_UUIDS)]
    with cleanup_gpunodes(admin, node):
        _report(admin, node, [_device(node, 0, migMode=True, migInstances=mig),
                              _device(node, 1)])
        controller.sees(node, lambda i: i.has_gpunode and i.usable == frozenset({1}),
                        "device 0 MIG-enabled")
        for i in range(7):
            admin.create(workload(f"m{i}", namespace, migProfile="1g.10gb",
                                  nodeSelector=group.selector))
        seen = set()
        for i in range(7):
            wait_phase(admin, namespace, f"m{i}", "Running")
            _, dev, pod = _held(admin, namespace, f"m{i}")
            assert dev == 0
            seen.add(env_of(pod, "CUDA_VISIBLE_DEVICES"))
        assert seen == set(MIG_UUIDS), "seven workloads, seven distinct MIG instances"
        admin.create(workload("m7", namespace, migProfile="1g.10gb",
                              nodeSelector=group.selector, retryPolicy=RETRY))
        cond = wait_condition(admin, namespace, "m7", "Scheduled", "Unschedulable")
        assert "no free MIG instance 1g.10gb (7 held)" in cond["message"]
        assert gw_columns(installed, namespace, "m0", "GPUS") == ["1g.10gb"]
        admin.create(workload("two", namespace, gpusPerReplica=2, nodeSelector=group.selector,
                              retryPolicy=RETRY))
        cond = wait_condition(admin, namespace, "two", "Scheduled", "Unschedulable")
        assert "1 free GPU, needs 2" in cond["message"]
        admin.create(workload("one", namespace, nodeSelector=group.selector))
        wait_phase(admin, namespace, "one", "Running")
        assert _held(admin, namespace, "one")[1] == 1, "the MIG device is never given whole"


@pytest.mark.parametrize("spec, message", [
    ({"gpuShare": {"memory": "20Gi"}, "gpusPerReplica": 2}, "gpusPerReplica must be 1"),
    ({"gpuShare": {"memory": "20Gi", "fraction": "0.5"}}, "exactly one of memory and fraction"),
    ({"gpuShare": {"memory": "0Gi"}}, "memory must be at least 1Mi"),
    ({"gpuShare": {"fraction": "0.000"}}, "fraction must be above 0"),
    ({"gpuShare": {"fraction": "0.5"}, "migProfile": "1g.10gb"}, "cannot be set together"),
    ({"gpuShare": {"fraction": "0.5"}, "deviceExposure": "device-plugin"},
     "device-plugin and dra cannot express a share"),
    ({"migProfile": "1g.10gb", "schedulingStrategy": "annotationMap",
      "schedulingMap": "0=n:0"}, "cannot be placed by an annotation map"),
])
def test_admission_refuses_a_share_it_cannot_place(
        admin: Client, namespace: str, spec: dict[str, Any], message: str) -> None:
    with pytest.raises(errors.Invalid, match=message):
        admin.create(workload("bad", namespace, **spec))


def test_a_restarted_controller_reads_the_shares_back_from_the_pods(
        controller: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    """Two 20Gi shares on an 80Gi device, then a restart: the new ledger holds them as
    shares (a third 20Gi fits beside them), not as whole devices nor as nothing (a
    60Gi does not)."""
    node, = controller.wait_nodes(group.add(1, gpus=1))
    with cleanup_gpunodes(admin, node):
        _report(admin, node, [_device(node, 0)])
        controller.sees(node, lambda i: i.has_gpunode and len(i.usable) == 1, "1 device")
        for name in ("a", "b"):
            admin.create(workload(name, namespace, gpuShare={"memory": "20Gi"},
                                  nodeSelector=group.selector))
            wait_phase(admin, namespace, name, "Running")
        controller.stop()
        controller.start()
        controller.sees(node, lambda i: i.has_gpunode and len(i.usable) == 1, "1 device")
        admin.create(workload("big", namespace, gpuShare={"memory": "60Gi"},
                              nodeSelector=group.selector, retryPolicy=RETRY))
        cond = wait_condition(admin, namespace, "big", "Scheduled", "Unschedulable")
        assert f"{node}: no shared device with 60Gi free" in cond["message"]
        admin.create(workload("c", namespace, gpuShare={"memory": "20Gi"},
                              nodeSelector=group.selector))
        wait_phase(admin, namespace, "c", "Running")
        assert {_held(admin, namespace, n)[:2] for n in ("a", "b", "c")} == {(node, 0)}
