"""Job mode against the real Job controller (kube-controller-manager): a Job of ours
holds its devices until it is gone, because the Job controller makes its pod at a
moment of its own. A ResourceQuota of zero pods holds the Job controller back, so
"the Job exists, its pod does not yet" lasts as long as the test needs; a watcher
of every live pod (HolderWatch) fails the test on any device two workloads' pods
hold at once."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from api.v1alpha1.types import API_VERSION, GPUWorkload
from hack.testenv import ControlPlane
from runtime import Client, NotFound
from tests.integration.controller.conftest import (
    NodeGroup,
    Running,
    drop_finalizers,
    get_workload,
    pods_of,
    wait_condition,
    wait_phase,
    workload,
)
from tests.integration.controller.holders import HolderWatch
from tests.waiting import eventually

GRACE = 3
HOLD = "test.gpu-orchestrator.dev/hold"  # a finalizer of the test's: the Job stays


def tpl() -> dict:
    return {"spec": {"terminationGracePeriodSeconds": GRACE,
                     "containers": [{"name": "main", "image": "busybox:1.36"}]}}


@pytest.fixture
def other(installed: ControlPlane) -> Iterator[str]:
    """A second namespace, without the quota, for the workload that must wait."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    code, body = installed.api("POST", "/api/v1/namespaces", {
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    assert code == 201, body
    yield name
    installed.api("DELETE", f"/api/v1/namespaces/{name}")


@pytest.fixture
def admins_high(controller: Running, admin: Client) -> Iterator[str]:
    """A PriorityClass of value 100 (``high``), seen by the controller: a workload of
    another namespace preempts only with a priority an admin controls."""
    name = f"high-{uuid.uuid4().hex[:6]}"
    admin.create({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                  "metadata": {"name": name}, "value": 100})
    probe = GPUWorkload.model_validate({"metadata": {"name": "p", "namespace": "x"},
                                        "spec": {"priority": 100, "priorityClassName": name}})
    eventually(lambda: controller.reconciler.ensure_state().admin_priority(probe),
               what="the controller sees the PriorityClass")
    yield name
    admin.delete("scheduling.k8s.io/v1", "PriorityClass", name)


def no_pods_quota(c: Client, ns: str) -> None:
    """The Job controller cannot make a pod in ``ns`` until ``lift_quota``."""
    c.create({"apiVersion": "v1", "kind": "ResourceQuota",
              "metadata": {"name": "no-pods", "namespace": ns},
              "spec": {"hard": {"pods": "0"}}})
    eventually(lambda: (c.get("v1", "ResourceQuota", "no-pods", ns).get("status") or {}).get(
        "hard"), what="the quota counted")


def lift_quota(c: Client, ns: str) -> None:
    c.delete("v1", "ResourceQuota", "no-pods", namespace=ns)


def job(c: Client, ns: str, name: str) -> dict | None:
    try:
        return c.get("batch/v1", "Job", name, ns)
    except NotFound:
        return None


def job_pods(c: Client, ns: str, job_name: str) -> list[dict]:
    return c.list("v1", "Pod", namespace=ns, label_selector=f"job-name={job_name}")["items"]


def test_an_orphaned_job_without_its_pod_yet_keeps_its_gpus(
        controller: Running, admin: Client, namespace: str, other: str,
        group: NodeGroup) -> None:
    """``kubectl delete gw w --cascade=orphan`` while its Job has no pod yet: the Job
    stays and makes the pod later, on the devices its template names. Before, the
    devices went to the next workload at once and both pods ran on them."""
    node, = controller.wait_nodes(group.add(1, gpus=4))
    no_pods_quota(admin, namespace)
    watch = HolderWatch(admin, jobs=True).start()
    try:
        admin.create(workload("w", namespace, gpusPerReplica=4, workloadKind="Job",
                              nodeSelector=group.selector, template=tpl()))
        eventually(lambda: job(admin, namespace, "w-0"), what="w's Job created")
        assert job_pods(admin, namespace, "w-0") == []  # the quota holds its pod back
        admin.delete(API_VERSION, "GPUWorkload", "w", namespace=namespace,
                     propagation_policy="Orphan")
        eventually(lambda: not (job(admin, namespace, "w-0") or {}).get(
            "metadata", {}).get("ownerReferences"), what="w's Job orphaned")

        admin.create(workload("next", other, gpusPerReplica=1, nodeSelector=group.selector,
                              template=tpl(),
                              retryPolicy={"maxRetries": 10, "backoffSeconds": 60}))
        cond = wait_condition(admin, other, "next", "Scheduled", "Unschedulable")
        assert "0 free GPUs" in cond["message"], cond
        assert pods_of(admin, other, "next") == []

        lift_quota(admin, namespace)  # now the Job controller makes w-0's pod
        pod, = eventually(lambda: job_pods(admin, namespace, "w-0"), timeout=120,
                          what="the Job controller made w-0's pod")
        assert pod["spec"]["nodeName"] == node
        assert pod["metadata"]["annotations"]["gpu.orchestrator.dev/devices"] == "0,1,2,3"
        admin.delete("batch/v1", "Job", "w-0", namespace=namespace,
                     propagation_policy="Foreground")
        wait_phase(admin, other, "next", "Running", timeout=60)
    finally:
        watch.stop()
    assert watch.overlaps == []
    # ordered by the API server's revisions (two watches' receipt times are not)
    w_pod, = watch.pods_named(f"{namespace}/w-0-")
    pod_gone = watch.first_rv("DELETED", w_pod)
    job_gone = watch.first_rv("DELETED", f"job:{namespace}/w-0")
    next_made = watch.first_rv("ADDED", f"{other}/next-0")
    assert pod_gone is not None and job_gone is not None and next_made is not None
    assert next_made > job_gone > pod_gone


def test_a_preemptor_waits_for_its_job_mode_victims_job_not_only_its_pods(
        controller: Running, admin: Client, namespace: str, other: str,
        group: NodeGroup, admins_high: str) -> None:
    """A Job-mode victim whose pod is not made yet when a preemptor arrives: no pod
    of the victim's is there to wait for, but its Job may still make one until the
    Job is gone. The preemptor's pod comes only after the Job's DELETED event (a
    finalizer of the test keeps the deleted Job a while, as a slow garbage collector
    would). Before, high-0 was created at once."""
    node, = controller.wait_nodes(group.add(1, gpus=2))
    no_pods_quota(admin, namespace)
    watch = HolderWatch(admin, jobs=True).start()
    try:
        admin.create(workload("low", namespace, gpusPerReplica=2, workloadKind="Job",
                              priority="low", nodeSelector=group.selector, template=tpl(),
                              retryPolicy={"maxRetries": 10, "backoffSeconds": 60}))
        eventually(lambda: job(admin, namespace, "low-0"), what="low's Job created")
        admin.patch("batch/v1", "Job", "low-0", {"metadata": {"finalizers": [HOLD]}},
                    namespace=namespace, patch_type="merge")
        admin.create(workload("high", other, gpusPerReplica=2, priority=100,
                              priorityClassName=admins_high,
                              schedulingStrategy="priority", nodeSelector=group.selector,
                              template=tpl()))
        wait_condition(admin, namespace, "low", "Preempted", "Preempted")
        eventually(lambda: (job(admin, namespace, "low-0") or {}).get("metadata", {}).get(
            "deletionTimestamp"), what="low's Job deleted")

        def waiting_for_the_job() -> dict | None:
            w = get_workload(admin, other, "high")
            cond = next((c for c in (w.get("status") or {}).get("conditions") or ()
                         if c["type"] == "Scheduled"), {})
            return w if cond.get("message") == \
                f"waiting for 1 preempted Job(s) to terminate on {node}" else None
        high = eventually(waiting_for_the_job, what="high waits for low's Job")
        low_uid = get_workload(admin, namespace, "low")["metadata"]["uid"]
        assert high["status"]["nominatedOver"] == [f"{low_uid}#0"]
        assert pods_of(admin, other, "high") == []

        drop_finalizers(admin, "batch/v1", "Job", "low-0", namespace)
        high = wait_phase(admin, other, "high", "Running", timeout=60)
    finally:
        watch.stop()
        drop_finalizers(admin, "batch/v1", "Job", "low-0", namespace, missing_ok=True)
    assert watch.overlaps == []
    job_gone = watch.first_rv("DELETED", f"job:{namespace}/low-0")
    high_made = watch.first_rv("ADDED", f"{other}/high-0")
    assert job_gone is not None and high_made is not None and high_made > job_gone
    assert high["status"].get("retries", 0) == 0
    assert not high["status"].get("nominatedOver")
    assert watch.pods_named(f"{namespace}/low-0") == []  # its pod was never made
