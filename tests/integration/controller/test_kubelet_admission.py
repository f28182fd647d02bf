"""A kubelet's admission as a user meets it: the local control plane's fake nodes
admit a bound pod as a kubelet does (hack/testenv/admitter.py), so a pod that does
not fit ends Failed with the kubelet's reason; a workload whose pod is rejected
anyway (its node changed after the placement) says so and goes elsewhere."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from hack.testenv import ControlPlane
from runtime import Client
from tests.integration.controller.conftest import (
    NodeGroup,
    Running,
    delete_workload,
    get_workload,
    wait_condition,
    wait_events,
    wait_phase,
    workload,
)
from tests.waiting import eventually

HOSTNAME = "kubernetes.io/hostname"


@pytest.fixture(scope="module")
def controller(installed: ControlPlane) -> Iterator[Running]:
    run = Running(installed).start()
    yield run
    run.stop()


def bare_pod(name: str, node: str, cpu: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "c", "image": "busybox:1.36",
                                     "resources": {"requests": {"cpu": cpu}}}], **spec}}


def settled(admin: Client, ns: str, name: str) -> dict[str, Any]:
    def phase() -> dict[str, Any] | None:
        pod = admin.get("v1", "Pod", name, ns)
        return pod if (pod.get("status") or {}).get("phase") in ("Running", "Failed") \
            else None
    return eventually(phase, what=f"pod {name} Running or Failed")


def set_cpu(cluster: ControlPlane, node: str, cpu: str) -> None:
    code, body = cluster.api("PATCH", f"/api/v1/nodes/{node}/status",
                             {"status": {"capacity": {"cpu": cpu}, "allocatable": {"cpu": cpu}}},
                             content_type="application/merge-patch+json")
    assert code == 200, body


def test_a_bound_pod_that_does_not_fit_is_rejected_in_the_kubelets_words(
        installed: ControlPlane, admin: Client, namespace: str, group: NodeGroup) -> None:
    node, = group.add(1, gpus=1)
    admin.create(bare_pod("fits", node, "60"), namespace=namespace)
    assert settled(admin, namespace, "fits")["status"]["phase"] == "Running"
    admin.create(bare_pod("too-big", node, "8"), namespace=namespace)
    admin.create(bare_pod("elsewhere", node, "1", nodeSelector={HOSTNAME: "node-x"}),
                 namespace=namespace)
    big = settled(admin, namespace, "too-big")["status"]
    assert (big["phase"], big["reason"]) == ("Failed", "OutOfcpu")
    assert big["message"] == ("Pod was rejected: Node didn't have enough resource: cpu, "
                              "requested: 8000, used: 60000, capacity: 64000")
    other = settled(admin, namespace, "elsewhere")["status"]
    assert (other["phase"], other["reason"]) == ("Failed", "NodeAffinity")
    assert other["message"] == ("Pod was rejected: Predicate NodeAffinity failed: node(s) "
                                "didn't match Pod's node affinity/selector")
    events = wait_events(admin, namespace, "too-big", "OutOfcpu")
    assert any(e["source"].get("component") == "kubelet" for e in events)
    # the admitter records a rejection after its status write and Event, and its
    # nodes' writes go out concurrently: the record is waited for
    eventually(lambda: sorted((r["name"], r["reason"])
                              for r in installed.admission_rejections(namespace))
               == [("elsewhere", "NodeAffinity"), ("too-big", "OutOfcpu")],
               timeout=15, what="both rejections recorded")


def test_a_pod_rejected_after_its_node_shrank_ends_the_attempt_and_the_next_goes_elsewhere(
        controller: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    cluster = controller.cluster
    shrunk, = controller.wait_nodes(group.add(1, gpus=2))
    slow = {"spec": {"terminationGracePeriodSeconds": 5,
                     "containers": [{"name": "main", "image": "busybox:1.36"}]}}
    admin.create(workload("low", namespace, gpusPerReplica=2, nodeSelector=group.selector,
                          priority="low", template=slow))
    wait_phase(admin, namespace, "low", "Running")
    # placed by preemption: its pod waits until the victim's pod is gone (5 s), and
    # meanwhile the node shrinks under the placement
    wanting = {"spec": {"terminationGracePeriodSeconds": 1, "containers": [
        {"name": "main", "image": "busybox:1.36", "resources": {"requests": {"cpu": "2"}}}]}}
    admin.create(workload("high", namespace, gpusPerReplica=1, nodeSelector=group.selector,
                          priority="high", schedulingStrategy="priority", template=wanting,
                          retryPolicy={"maxRetries": 10, "backoffSeconds": 1,
                                       "maxBackoffSeconds": 1}))
    wait_condition(admin, namespace, "high", "Scheduled", "WaitingForPreemption")
    delete_workload(admin, namespace, "low")  # it would take its node back otherwise
    set_cpu(cluster, shrunk, "1")
    other, = controller.wait_nodes(group.add(1, gpus=1))

    cond = wait_condition(admin, namespace, "high", "Scheduled", "PodRejected", timeout=60)
    set_cpu(cluster, shrunk, "64")  # back as it was: node fit alone would take it again
    assert cond["message"].startswith(
        f"replica 0's pod was rejected by the kubelet on {shrunk}: OutOfcpu: Node didn't "
        f"have enough resource: cpu, requested: 2000, used: 0, capacity: 1000; ")
    rejections = get_workload(admin, namespace, "high")["status"]["rejections"]
    assert [(r["node"], r["reason"]) for r in rejections] == [(shrunk, "OutOfcpu")]
    events = wait_events(admin, namespace, "high", "PodRejected")
    assert any("OutOfcpu" in e["message"] for e in events)

    # leastLoaded (the priority strategy's order) prefers the node with more free
    # GPUs: the shrunk one, were it not avoided
    placed = wait_phase(admin, namespace, "high", "Running", timeout=60)
    assert [p["node"] for p in placed["status"]["placements"]] == [other]
    # the rejected pod held nothing: the shrunk node's GPUs are free for another
    admin.create(workload("after", namespace, gpusPerReplica=2, nodeSelector=group.selector,
                          template={"spec": {"nodeSelector": {HOSTNAME: shrunk}}}))
    after = wait_phase(admin, namespace, "after", "Running", timeout=60)
    assert [p["node"] for p in after["status"]["placements"]] == [shrunk]
