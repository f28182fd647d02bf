"""Devices are held by pods: a deleted, retried or preempted workload's GPUs come
back only when its pods are gone, and whatever waits for them is placed right
after. kwok keeps a deleted pod Running for its grace period here, as a kubelet
would, so a terminating pod is visible."""

from __future__ import annotations

import time

from api.v1alpha1.types import API_VERSION
from runtime import Client, NotFound
from tests.integration.controller.conftest import (
    NodeGroup,
    Running,
    get_workload,
    pods_of,
    wait_condition,
    wait_phase,
    workload,
)
from tests.integration.controller.holders import HolderWatch
from tests.waiting import eventually

GRACE = 3  # seconds a deleted pod of these tests keeps running


def tpl(grace: int = GRACE) -> dict:
    return {"spec": {"terminationGracePeriodSeconds": grace,
                     "containers": [{"name": "main", "image": "busybox:1.36"}]}}


def gone(c: Client, ns: str, name: str) -> bool:
    try:
        c.get(API_VERSION, "GPUWorkload", name, ns)
        return False
    except NotFound:
        return True


def test_a_deleted_workloads_gpus_go_to_the_waiter_only_when_its_pod_is_gone(
        controller: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    node, = controller.wait_nodes(group.add(1, gpus=4))
    watch = HolderWatch(admin).start()
    try:
        admin.create(workload("a1", namespace, gpusPerReplica=4, nodeSelector=group.selector,
                              template=tpl()))
        wait_phase(admin, namespace, "a1", "Running")
        admin.create(workload("waiter", namespace, gpusPerReplica=4,
                              nodeSelector=group.selector, template=tpl(),
                              retryPolicy={"maxRetries": 10, "backoffSeconds": 60}))
        wait_condition(admin, namespace, "waiter", "Scheduled", "Unschedulable")
        deleted_at = time.monotonic()
        admin.delete(API_VERSION, "GPUWorkload", "a1", namespace=namespace)
        # The workload stays (our finalizer) while its pod terminates: kubectl delete
        # returns when the pod is gone.
        a1 = get_workload(admin, namespace, "a1")
        assert a1["metadata"].get("deletionTimestamp")
        assert "gpu.orchestrator.dev/children" in a1["metadata"]["finalizers"]
        w = wait_phase(admin, namespace, "waiter", "Running", timeout=60)
        eventually(lambda: gone(admin, namespace, "a1"), timeout=30, what="a1 deleted")
    finally:
        watch.stop()
    assert w["status"]["placements"] == [{"index": 0, "node": node, "devices": [0, 1, 2, 3]}]
    pod_gone = watch.first("DELETED", f"{namespace}/a1-0")
    waiter_made = watch.first("ADDED", f"{namespace}/waiter-0")
    assert pod_gone is not None and waiter_made is not None
    assert waiter_made > pod_gone, "waiter-0 was created while a1-0 still held the GPUs"
    print(f"\na1-0 gone {pod_gone - deleted_at:.2f}s after the delete (grace {GRACE}s); "
          f"waiter-0 created {waiter_made - pod_gone:.2f}s after that; "
          f"{watch.samples} samples, {len(watch.overlaps)} overlaps")
    assert watch.overlaps == []


def test_an_orphaned_pod_keeps_its_gpus(
        controller: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    controller.wait_nodes(group.add(1, gpus=2))
    admin.create(workload("g1", namespace, gpusPerReplica=2, nodeSelector=group.selector,
                          template=tpl()))
    wait_phase(admin, namespace, "g1", "Running")
    admin.delete(API_VERSION, "GPUWorkload", "g1", namespace=namespace,
                 propagation_policy="Orphan")
    eventually(lambda: gone(admin, namespace, "g1"), timeout=30, what="g1 deleted")
    pod, = pods_of(admin, namespace, "g1")
    assert not pod["metadata"].get("deletionTimestamp")  # the user asked to keep it
    admin.create(workload("next", namespace, gpusPerReplica=1, nodeSelector=group.selector,
                          retryPolicy={"maxRetries": 10, "backoffSeconds": 60}))
    cond = wait_condition(admin, namespace, "next", "Scheduled", "Unschedulable")
    assert "0 free GPUs" in cond["message"]
    admin.delete("v1", "Pod", "g1-0", namespace=namespace, grace_period_seconds=0)
    wait_phase(admin, namespace, "next", "Running", timeout=30)


def test_a_retry_waits_for_the_failed_attempts_pods(
        controller: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    controller.wait_nodes(group.add(1, gpus=2))
    watch = HolderWatch(admin).start()
    try:
        admin.create(workload("gang", namespace, replicas=2, gpusPerReplica=1,
                              nodeSelector=group.selector, template=tpl(),
                              retryPolicy={"maxRetries": 3, "backoffSeconds": 1}))
        wait_phase(admin, namespace, "gang", "Running")
        controller.cluster.set_pod_phase(namespace, "gang-1", "Failed")
        eventually(lambda: (get_workload(admin, namespace, "gang").get("status") or {}).get(
            "retries", 0) >= 1, what="gang's attempt ended")
        # gang-0 is asked to go and terminates for its grace period; the next attempt
        # needs both GPUs, so its pods come only after gang-0 is gone.
        w = wait_phase(admin, namespace, "gang", "Running", timeout=60)
        assert w["status"]["retries"] == 1  # waiting for its own pods spent no retry
    finally:
        watch.stop()
    assert watch.overlaps == []
    pods = pods_of(admin, namespace, "gang")
    assert {p["metadata"]["labels"]["gpu.orchestrator.dev/attempt"] for p in pods} == {"1"}


def test_preemption_waits_for_the_victims_pods(
        controller: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    node, = controller.wait_nodes(group.add(1, gpus=2))
    watch = HolderWatch(admin).start()
    try:
        admin.create(workload("low", namespace, gpusPerReplica=2, nodeSelector=group.selector,
                              priority="low", template=tpl(5),
                              retryPolicy={"maxRetries": 10, "backoffSeconds": 60}))
        wait_phase(admin, namespace, "low", "Running")
        admin.create(workload("high", namespace, gpusPerReplica=2,
                              nodeSelector=group.selector, priority="high",
                              schedulingStrategy="priority", template=tpl()))
        cond = wait_condition(admin, namespace, "high", "Scheduled", "WaitingForPreemption")
        assert cond["message"] == f"waiting for 1 preempted pod(s) to terminate on {node}"
        assert pods_of(admin, namespace, "high") == []
        low = wait_condition(admin, namespace, "low", "Preempted", "Preempted")
        assert f"preempted by {namespace}/high" in low["message"]
        wait_phase(admin, namespace, "high", "Running", timeout=60)
    finally:
        watch.stop()
    assert watch.overlaps == []
    gone_at = watch.first("DELETED", f"{namespace}/low-0")
    made_at = watch.first("ADDED", f"{namespace}/high-0")
    assert gone_at is not None and made_at is not None and made_at > gone_at
    # the victim waits for room again; nothing else took its old devices
    wait_condition(admin, namespace, "low", "Scheduled", "Unschedulable")
