"""Tiny shares and small devices, as a user sees them: the API refuses a one-byte
share, the manager places no share below its floors (ShareBelowMinimum, no retry
spent), a GPUQueue of one GPU never counts below what its shares can take (each
device a workload's shares touch costs at least the fraction floor), and
minGPUMemoryMiB holds for shares and MIG instances, with the reason per node."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from api.v1alpha1.types import API_VERSION
from runtime import Client, errors
from tests.integration.controller.conftest import (
    NodeGroup,
    Running,
    cleanup_gpunodes,
    get_workload,
    namespace_queue,
    pods_of,
    wait_condition,
    wait_phase,
    workload,
)
from tests.waiting import eventually

GI = 1024
RETRY = {"maxRetries": 50, "backoffSeconds": 1, "maxBackoffSeconds": 2}


def _report(admin: Client, name: str, devices: list[dict[str, Any]]) -> None:
    """Writes the GPUNode of ``name`` as the agent would (a fresh heartbeat)."""
    admin.create({"apiVersion": API_VERSION, "kind": "GPUNode", "metadata": {"name": name},
                  "spec": {"nodeName": name}})
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    admin.patch(API_VERSION, "GPUNode", name, {"status": {
        "devices": devices, "deviceCount": len(devices), "healthyCount": len(devices),
        "lastHeartbeatTime": now}}, subresource="status")


def _device(node: str, i: int, memory_mib: int = 80 * GI, **extra: Any) -> dict[str, Any]:
    return {"index": i, "uuid": f"GPU-{node}-{i}", "model": "NVIDIA H100 80GB HBM3",
            "memoryTotalMiB": memory_mib, "healthy": True, **extra}


@pytest.fixture
def one_gpu_queue(admin: Client, namespace: str) -> Iterator[str]:
    """A GPUQueue of nominalGPUs 1 (no cohort) that selects ``namespace``."""
    with namespace_queue(admin, namespace, 1, name=f"one-{namespace}") as name:
        yield name


def _used(admin: Client, queue: str) -> float:
    return (admin.get(API_VERSION, "GPUQueue", queue).get("status") or {}).get("usedGPUs", 0)


@pytest.mark.parametrize("memory", ["1", "1k", "1000Ki", "0Gi"])
def test_the_api_refuses_a_memory_share_below_one_mib(
        admin: Client, namespace: str, memory: str) -> None:
    with pytest.raises(errors.Invalid, match="memory must be at least 1Mi"):
        admin.create(workload("tiny", namespace, replicas=200, gpuShare={"memory": memory}))
    admin.create(workload("mib", namespace, gpuShare={"memory": "1Mi"}))  # the API's floor
    admin.delete(API_VERSION, "GPUWorkload", "mib", namespace)


def test_tiny_shares_never_take_a_one_gpu_queue_past_one_gpu(
        controller: Running, admin: Client, namespace: str, group: NodeGroup,
        one_gpu_queue: str) -> None:
    nodes = controller.wait_nodes(group.add(3, gpus=8))
    with cleanup_gpunodes(admin, *nodes):
        for n in nodes:
            _report(admin, n, [_device(n, i) for i in range(8)])
            controller.sees(n, lambda i: i.has_gpunode and len(i.usable) == 8, "8 devices")

        # 12 x 0.001: below the manager's floor; waits saying so, spends no retry
        admin.create(workload("thousandths", namespace, replicas=12, retryPolicy=RETRY,
                              gpuShare={"fraction": "0.001"}, nodeSelector=group.selector))
        cond = wait_condition(admin, namespace, "thousandths", "Scheduled", "ShareBelowMinimum")
        assert cond["message"] == (
            "gpuShare fraction 0.001 is below this cluster's smallest share, 0.05 (the "
            "manager's --min-share-fraction); delete the workload and create it with a "
            "larger share")

        # 24 x 1Gi spread over 24 devices (leastLoaded): 0.05 each, 1.2 > 1: waits
        admin.create(workload("spread", namespace, replicas=24, retryPolicy=RETRY,
                              gpuShare={"memory": "1Gi"}, nodeSelector=group.selector))
        cond = wait_condition(admin, namespace, "spread", "Scheduled", "WaitingForQuota")
        assert cond["message"].startswith(f"queue {one_gpu_queue}: 0 of 1 GPUs used; needs 1.2 "
                                          "(24 shared devices, each counts at least 0.05)"), \
            cond["message"]

        # the same packed on one device (bestFit): their sum, 24/80 = 0.3 GPU
        admin.create(workload("packed", namespace, replicas=24, schedulingStrategy="bestFit",
                              gpuShare={"memory": "1Gi"}, nodeSelector=group.selector))
        w = wait_phase(admin, namespace, "packed", "Running", timeout=60)
        assert len({(p["node"], p["devices"][0]) for p in w["status"]["placements"]}) == 1
        eventually(lambda: _used(admin, one_gpu_queue) == 0.3, timeout=30,
                   what="the queue counts the packed shares as 0.3 GPU")

        time.sleep(2)  # the refused ones stayed refused: nothing of theirs placed
        for name in ("thousandths", "spread"):
            st = get_workload(admin, namespace, name)["status"]
            assert st["phase"] == "Pending" and not st.get("retries"), st
            assert pods_of(admin, namespace, name) == []
        assert _used(admin, one_gpu_queue) == 0.3


def test_min_gpu_memory_holds_for_mig_instances_and_shares(
        controller: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    """Device 0: MIG-enabled, seven 1g.10gb instances of 9,984 MiB; device 1: 16 GiB."""
    node, = controller.wait_nodes(group.add(1, gpus=2))
    mig = [{"uuid": f"MIG-{i:08x}-0000-4000-8000-00000000000{i}", "profile": "1g.10gb",
            "memoryTotalMiB": 9984, "placement": f"{i}:1"} for i in range(7)]
    with cleanup_gpunodes(admin, node):
        _report(admin, node, [_device(node, 0, migMode=True, migInstances=mig),
                              _device(node, 1, memory_mib=16 * GI)])
        controller.sees(node, lambda i: i.has_gpunode and i.usable == frozenset({1}),
                        "device 0 MIG-enabled")
        admin.create(workload("mig", namespace, migProfile="1g.10gb", minGPUMemoryMiB=20000,
                              nodeSelector=group.selector, retryPolicy=RETRY))
        cond = wait_condition(admin, namespace, "mig", "Scheduled", "Unschedulable")
        assert f"{node}: no free MIG instance 1g.10gb (7 below 20000 MiB)" in cond["message"]
        admin.create(workload("share", namespace, gpuShare={"fraction": "0.25"},
                              minGPUMemoryMiB=20000, nodeSelector=group.selector,
                              retryPolicy=RETRY))
        cond = wait_condition(admin, namespace, "share", "Scheduled", "Unschedulable")
        assert (f"{node}: no shared device with 0.25 free; 1 device below 20000 MiB"
                in cond["message"]), cond["message"]
        assert pods_of(admin, namespace, "mig") == pods_of(admin, namespace, "share") == []
        # what fits the minimum is placed as before
        admin.create(workload("mig-ok", namespace, migProfile="1g.10gb", minGPUMemoryMiB=9984,
                              nodeSelector=group.selector))
        wait_phase(admin, namespace, "mig-ok", "Running")
        admin.create(workload("share-ok", namespace, gpuShare={"fraction": "0.25"},
                              minGPUMemoryMiB=16 * GI, nodeSelector=group.selector))
        wait_phase(admin, namespace, "share-ok", "Running")


def test_a_share_below_the_memory_floor_waits_outside_any_queue(
        controller: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    """512Mi: the API takes it (above 1Mi), the manager's --min-share-memory (1Gi)
    does not; no queue selects the namespace, and still no retry is spent."""
    node, = controller.wait_nodes(group.add(1, gpus=1))
    with cleanup_gpunodes(admin, node):
        _report(admin, node, [_device(node, 0)])
        controller.sees(node, lambda i: i.has_gpunode and len(i.usable) == 1, "1 device")
        admin.create(workload("half", namespace, gpuShare={"memory": "512Mi"},
                              nodeSelector=group.selector, retryPolicy={"maxRetries": 0}))
        cond = wait_condition(admin, namespace, "half", "Scheduled", "ShareBelowMinimum")
        assert cond["message"].startswith(
            "gpuShare memory 512Mi is below this cluster's smallest share, 1Gi (the "
            "manager's --min-share-memory)"), cond["message"]
        time.sleep(2)
        st = get_workload(admin, namespace, "half")["status"]
        assert st["phase"] == "Pending" and not st.get("retries"), st
        admin.create(workload("one", namespace, gpuShare={"memory": "1Gi"},
                              nodeSelector=group.selector))
        wait_phase(admin, namespace, "one", "Running")
