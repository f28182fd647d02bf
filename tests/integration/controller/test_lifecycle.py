"""Workload lifecycle: Job mode, exposure modes, node loss with retries, foreign GPU
pods."""

from __future__ import annotations

from api.v1alpha1.types import API_VERSION
from hack.testenv import ControlPlane
from runtime import Client
from tests.integration.controller.conftest import (
    NodeGroup,
    Running,
    env_of,
    get_workload,
    pods_of,
    wait_condition,
    wait_phase,
    workload,
)
from tests.waiting import eventually


def test_job_mode_runs_a_bound_job_and_succeeds(
        controller: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    node, = controller.wait_nodes(group.add(1, gpus=4))
    admin.create(workload("train", namespace, workloadKind="Job", gpusPerReplica=2,
                          nodeSelector=group.selector))
    w = wait_phase(admin, namespace, "train", "Running")
    job = admin.get("batch/v1", "Job", "train-0", namespace)
    tpl = job["spec"]["template"]["spec"]
    assert tpl["nodeName"] == node
    assert {e["name"]: e["value"] for e in tpl["containers"][0]["env"]}[
        "CUDA_VISIBLE_DEVICES"] == ",".join(map(str, w["status"]["placements"][0]["devices"]))
    pod, = pods_of(admin, namespace, "train")  # created by kube-controller-manager
    assert pod["spec"]["nodeName"] == node
    controller.cluster.set_pod_phase(namespace, pod["metadata"]["name"], "Succeeded")
    wait_phase(admin, namespace, "train", "Succeeded")


def test_exposure_modes(controller: Running, admin: Client, namespace: str,
                        group: NodeGroup) -> None:
    controller.wait_nodes(group.add(2, gpus=8))
    admin.create(workload("nv", namespace, gpusPerReplica=2, nodeSelector=group.selector,
                          deviceExposure="nvidia-visible-devices"))
    nv = wait_phase(admin, namespace, "nv", "Running")
    admin.create(workload("dp", namespace, gpusPerReplica=3, nodeSelector=group.selector,
                          deviceExposure="device-plugin"))
    pod, = pods_of(admin, namespace, "nv")
    devices = nv["status"]["placements"][0]["devices"]
    assert env_of(pod, "NVIDIA_VISIBLE_DEVICES") == ",".join(map(str, devices))
    assert env_of(pod, "CUDA_VISIBLE_DEVICES") == "0,1"
    assert "nvidia.com/gpu" not in (pod["spec"]["containers"][0].get("resources") or {}).get(
        "limits", {})

    dp = wait_phase(admin, namespace, "dp", "Running")
    pod, = pods_of(admin, namespace, "dp")
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "3"
    assert env_of(pod, "CUDA_VISIBLE_DEVICES") is None  # the device plugin decides
    # one authority per node: the counted workload went where nothing is named
    named_node, counted_node = nv["status"]["placements"][0]["node"], \
        dp["status"]["placements"][0]["node"]
    assert named_node != counted_node
    # 6 free beside nv take a named workload of 6; the counted node none of 3
    admin.create(workload("six", namespace, gpusPerReplica=6, nodeSelector=group.selector))
    assert wait_phase(admin, namespace, "six", "Running")["status"]["placements"][0][
        "node"] == named_node
    admin.create(workload("three", namespace, gpusPerReplica=3, nodeSelector=group.selector))
    cond = wait_condition(admin, namespace, "three", "Scheduled", "Unschedulable")
    assert f"{counted_node}: GPUs held by the device plugin" in cond["message"], \
        cond["message"]


def test_foreign_gpu_pods_take_capacity(
        controller: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    node, = controller.wait_nodes(group.add(1, gpus=4))
    admin.create({"apiVersion": "v1", "kind": "Pod",
                  "metadata": {"name": "someone-else", "namespace": namespace},
                  "spec": {"nodeName": node, "containers": [{
                      "name": "c", "image": "busybox",
                      "resources": {"limits": {"nvidia.com/gpu": "3"}}}]}})
    admin.create(workload("two", namespace, gpusPerReplica=2, nodeSelector=group.selector,
                          deviceExposure="device-plugin"))
    cond = wait_condition(admin, namespace, "two", "Scheduled", "Unschedulable")
    assert f"{node}: 1 free GPU, needs 2" in cond["message"]
    # named devices never go where the device plugin counts (one authority per node)
    admin.create(workload("named", namespace, gpusPerReplica=1, nodeSelector=group.selector))
    cond = wait_condition(admin, namespace, "named", "Scheduled", "Unschedulable")
    assert f"{node}: GPUs held by the device plugin" in cond["message"], cond["message"]
    admin.create(workload("one", namespace, gpusPerReplica=1, nodeSelector=group.selector,
                          deviceExposure="device-plugin"))
    wait_phase(admin, namespace, "one", "Running")


def test_lost_node_fails_the_replica_and_the_retry_places_it_elsewhere(
        controller: Running, admin: Client, namespace: str, group: NodeGroup,
        cluster: ControlPlane) -> None:
    first, = controller.wait_nodes(group.add(1, gpus=2))
    admin.create(workload("survivor", namespace, gpusPerReplica=2, nodeSelector=group.selector,
                          retryPolicy={"maxRetries": 3, "backoffSeconds": 1,
                                       "maxBackoffSeconds": 2}))
    w = wait_phase(admin, namespace, "survivor", "Running")
    assert w["status"]["placements"][0]["node"] == first
    second, = controller.wait_nodes(group.add(1, gpus=2))
    cluster.api("DELETE", f"/api/v1/nodes/{first}")
    cond = wait_condition(admin, namespace, "survivor", "Scheduled", "Scheduled", timeout=30)

    def moved() -> dict | None:
        w = get_workload(admin, namespace, "survivor")
        pls = w["status"].get("placements") or []
        ok = pls and pls[0]["node"] == second and w["status"]["phase"] == "Running"
        return w if ok else None

    w = eventually(moved, timeout=30, what="placed again on the second node")
    assert w["status"]["retries"] == 1
    assert cond is not None
    reasons = [e["reason"] for e in admin.list("v1", "Event", namespace=namespace,
               field_selector="involvedObject.name=survivor")["items"]]
    assert "NodeLost" in reasons


def test_failed_replica_without_retries_fails_the_workload(
        controller: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    controller.wait_nodes(group.add(1, gpus=2))
    admin.create(workload("fragile", namespace, nodeSelector=group.selector,
                          retryPolicy={"maxRetries": 0}))
    wait_phase(admin, namespace, "fragile", "Running")
    controller.cluster.set_pod_phase(namespace, "fragile-0", "Failed")
    w = wait_phase(admin, namespace, "fragile", "Failed")
    failed = [c for c in w["status"]["conditions"] if c["type"] == "Failed"]
    assert failed and failed[0]["reason"] == "ReplicaFailed"
    assert not controller.reconciler.ensure_state().held_by(f"{namespace}/fragile")


def test_workload_api_object_round_trips(admin: Client, namespace: str) -> None:
    obj = admin.create(workload("plain", namespace, gpuCount=2, priority="medium"))
    assert obj["spec"]["gpuCount"] == 2
    got = admin.get(API_VERSION, "GPUWorkload", "plain", namespace)
    assert got["spec"]["priority"] in ("medium", 50)
