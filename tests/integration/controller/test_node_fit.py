"""Node fit as a user sees it: a pod is placed only where the kubelet will admit it
(the template's nodeSelector and required node affinity, CPU, host ports, the
node's pod limit), and a workload that fits nowhere waits with each node's
reason. kwok nodes of the test environment have 64 CPUs and 110 pods unless a
test makes them smaller here."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from hack.testenv import ControlPlane
from runtime import Client
from tests.integration.controller.conftest import (
    NodeGroup,
    Running,
    get_workload,
    pods_of,
    wait_condition,
    wait_phase,
    workload,
)
from tests.integration.controller.test_podbinding import create, pod, wait_event
from tests.waiting import eventually

HOSTNAME = "kubernetes.io/hostname"


@pytest.fixture(scope="module")
def controller(installed: ControlPlane) -> Iterator[Running]:
    """Both controllers on one ledger: GPUWorkloads and the seed path's pods."""
    run = Running(installed, pod_binding=True).start()
    yield run
    run.stop()


def add_nodes(group: NodeGroup, count: int, gpus: int, *, cpu: str = "64",
              pods: str = "110", labels: dict[str, str] | None = None) -> list[str]:
    """``count`` kwok nodes of ``group`` with ``cpu`` CPUs and room for ``pods`` pods."""
    cluster = group.cluster
    names = [f"{group.id}-{len(group.names) + i}" for i in range(count)]
    labels = {**group.selector, **(labels or {})}
    for name in names:
        manifest = cluster.node_manifest(name, gpus, labels)
        for key in ("capacity", "allocatable"):
            manifest["status"][key].update({"cpu": cpu, "pods": pods})
        code, body = cluster.api("POST", "/api/v1/nodes", manifest)
        assert code == 201, body
    cluster.create_nodes(names, gpus, labels)  # waits until they are Ready
    group.names += names
    return names


def template(*, cpu: str | None = None, host_port: int | None = None,
             **spec: Any) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "main", "image": "trainer:v1"}
    if cpu is not None:
        c["resources"] = {"requests": {"cpu": cpu}}
    if host_port is not None:
        c["ports"] = [{"containerPort": 80, "hostPort": host_port}]
    return {"spec": {"terminationGracePeriodSeconds": 1, "containers": [c], **spec}}


def node_of(admin: Client, ns: str, name: str) -> list[str]:
    return [p["node"] for p in wait_phase(admin, ns, name, "Running")["status"]["placements"]]


def test_the_templates_node_selector_is_honoured(
        controller: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    # leastLoaded would take the emptier node; the template names the other
    big, = controller.wait_nodes(group.add(1, gpus=2))
    small, = controller.wait_nodes(group.add(1, gpus=1))
    admin.create(workload("pinned", namespace, gpusPerReplica=1, nodeSelector=group.selector,
                          template=template(nodeSelector={HOSTNAME: small})))
    assert node_of(admin, namespace, "pinned") == [small]
    assert [p["spec"]["nodeName"] for p in pods_of(admin, namespace, "pinned")] == [small]
    assert big != small


def test_a_jobs_pod_goes_where_its_template_says(
        controller: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    controller.wait_nodes(group.add(1, gpus=2))
    small, = controller.wait_nodes(group.add(1, gpus=1))
    admin.create(workload("job", namespace, gpusPerReplica=1, workloadKind="Job",
                          nodeSelector=group.selector,
                          template=template(nodeSelector={HOSTNAME: small},
                                            restartPolicy="Never")))
    assert node_of(admin, namespace, "job") == [small]

    def bound() -> list[str] | None:
        pods = admin.list("v1", "Pod", namespace)["items"]
        nodes = [p["spec"].get("nodeName") for p in pods
                 if p["metadata"]["name"].startswith("job-")]
        return nodes if nodes and all(nodes) else None

    assert eventually(bound, what="the Job's pod bound") == [small]


def test_required_node_affinity_is_honoured(
        controller: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    controller.wait_nodes(group.add(1, gpus=2, labels={"zone": "a"}))
    zone_b, = controller.wait_nodes(group.add(1, gpus=1, labels={"zone": "b"}))
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "zone", "operator": "In", "values": ["b"]}]}]}}}
    admin.create(workload("zoned", namespace, gpusPerReplica=1, nodeSelector=group.selector,
                          template=template(affinity=affinity)))
    assert node_of(admin, namespace, "zoned") == [zone_b]


def test_a_replica_asking_more_cpu_than_a_node_has_waits_with_the_reason(
        controller: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    names = controller.wait_nodes(add_nodes(group, 2, gpus=2, cpu="16"))
    admin.create(workload("hungry", namespace, gpusPerReplica=1, nodeSelector=group.selector,
                          template=template(cpu="64")))
    cond = wait_condition(admin, namespace, "hungry", "Scheduled", "Unschedulable")
    assert f"{', '.join(sorted(names))}: 16 CPU free, needs 64" in cond["message"]
    assert pods_of(admin, namespace, "hungry") == []


def test_two_workloads_with_the_same_host_port_never_share_a_node(
        controller: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    node, = controller.wait_nodes(group.add(1, gpus=4))
    names = ["port-a", "port-b"]
    threads = [threading.Thread(target=admin.create, args=(workload(
        n, namespace, gpusPerReplica=1, nodeSelector=group.selector,
        template=template(host_port=8080)),)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    def settled() -> list[dict] | None:
        ws = [get_workload(admin, namespace, n) for n in names]
        placed = [w for w in ws if (w.get("status") or {}).get("placements")]
        waiting = [w for w in ws if any(c.get("reason") == "Unschedulable" for c in
                                        (w.get("status") or {}).get("conditions") or ())]
        return waiting if len(placed) == 1 and len(waiting) == 1 else None

    waiting, = eventually(settled, what="one placed, one waiting for the host port")
    cond = next(c for c in waiting["status"]["conditions"] if c["type"] == "Scheduled")
    assert f"{node}: host port 0.0.0.0:8080/TCP in use" in cond["message"]


def test_a_node_at_its_pod_limit_is_skipped(
        controller: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    full, = controller.wait_nodes(add_nodes(group, 1, gpus=2, pods="1"))
    other, = controller.wait_nodes(group.add(1, gpus=1))
    admin.create({"apiVersion": "v1", "kind": "Pod",
                  "metadata": {"name": "squatter", "namespace": namespace},
                  "spec": {"nodeName": full, "terminationGracePeriodSeconds": 0,
                           "containers": [{"name": "c", "image": "busybox"}]}})
    def counted() -> bool:
        pod = admin.get("v1", "Pod", "squatter", namespace)
        return (pod.get("status") or {}).get("phase") == "Running"

    eventually(counted, what="the squatter pod running on the full node")
    admin.create(workload("limited", namespace, gpusPerReplica=1, nodeSelector=group.selector,
                          template=template()))
    assert node_of(admin, namespace, "limited") == [other]


def test_a_seed_pod_asking_more_cpu_than_any_node_has_stays_pending(
        controller: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    node, = controller.wait_nodes(add_nodes(group, 1, gpus=2, cpu="16"))
    p = pod("seed-hungry", gpus=1, node_selector=group.selector)
    p["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "64"}
    create(admin, namespace, p)
    wait_event(admin, namespace, "seed-hungry", "FailedScheduling",
               f"{node}: 16 CPU free, needs 64")
    assert not admin.get("v1", "Pod", "seed-hungry", namespace)["spec"].get("nodeName")
