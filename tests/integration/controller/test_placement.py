"""Placement end to end: the seed's annotation map, gangs, races and freeing."""

from __future__ import annotations

import threading

from runtime import Client
from tests.integration.controller.conftest import (
    NodeGroup,
    Running,
    delete_workload,
    env_of,
    get_workload,
    pods_of,
    wait_condition,
    wait_events,
    wait_phase,
    workload,
)
from tests.waiting import eventually

SEED_MAP = "0=node1:0,1\n1=node2:2\n2=node3:0,1,2\n3=node4:3\n4=node4:3\n"


def test_seed_annotation_map_places_exactly_as_written(
        controller: Running, admin: Client, namespace: str) -> None:
    admin.create(workload("seed", namespace, annotations={"gpu-scheduling-map": SEED_MAP},
                          replicas=5, gpuCount=1, schedulingStrategy="annotationMap"))
    w = wait_phase(admin, namespace, "seed", "Running")
    placed = {p["index"]: (p["node"], p["devices"]) for p in w["status"]["placements"]}
    assert placed == {0: ("node1", [0, 1]), 1: ("node2", [2]), 2: ("node3", [0, 1, 2]),
                      3: ("node4", [3]), 4: ("node4", [3])}
    pods = pods_of(admin, namespace, "seed")
    got = [(p["metadata"]["name"], p["spec"]["nodeName"], env_of(p, "CUDA_VISIBLE_DEVICES"),
            p["status"]["phase"]) for p in pods]
    assert got == [("seed-0", "node1", "0,1", "Running"), ("seed-1", "node2", "2", "Running"),
                   ("seed-2", "node3", "0,1,2", "Running"), ("seed-3", "node4", "3", "Running"),
                   ("seed-4", "node4", "3", "Running")]
    # A gang: ranks and a headless Service for the rendezvous.
    assert [env_of(p, "RANK") for p in pods] == ["0", "1", "2", "3", "4"]
    assert {env_of(p, "WORLD_SIZE") for p in pods} == {"5"}
    svc = admin.get("v1", "Service", "seed", namespace)
    assert svc["spec"]["clusterIP"] == "None"
    assert w["status"]["nodes"] == "node1,node2,node3,node4"
    delete_workload(admin, namespace, "seed")


def test_gang_that_does_not_fit_places_nothing(
        controller: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    controller.wait_nodes(group.add(2, gpus=2))
    admin.create(workload("gang", namespace, replicas=3, gpusPerReplica=2,
                          nodeSelector=group.selector))
    cond = wait_condition(admin, namespace, "gang", "Scheduled", "Unschedulable")
    assert cond["status"] == "False"
    assert "gang of 3" in cond["message"]
    w = get_workload(admin, namespace, "gang")
    assert w["status"]["phase"] == "Pending"
    assert not w["status"].get("placements")
    assert pods_of(admin, namespace, "gang") == []
    wait_events(admin, namespace, "gang", "FailedScheduling")


def test_unschedulable_message_names_each_node(
        controller: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    small, = controller.wait_nodes(group.add(1, gpus=1))
    admin.create(workload("big", namespace, gpusPerReplica=2, nodeSelector=group.selector))
    cond = wait_condition(admin, namespace, "big", "Scheduled", "Unschedulable")
    assert f"{small}: 1 free GPU, needs 2" in cond["message"]


def test_racing_workloads_never_share_a_device(
        controller: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    controller.wait_nodes(group.add(1, gpus=2))
    names = [f"race-{i}" for i in range(4)]
    threads = [threading.Thread(target=admin.create, args=(workload(
        n, namespace, gpusPerReplica=1, nodeSelector=group.selector),)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    def settled() -> list[dict] | None:
        ws = [get_workload(admin, namespace, n) for n in names]
        for w in ws:
            w.setdefault("status", {})
        placed = [w for w in ws if w["status"].get("placements")]
        waiting = [w for w in ws if any(c.get("reason") == "Unschedulable"
                                        for c in w["status"].get("conditions") or ())]
        return ws if len(placed) == 2 and len(waiting) == 2 else None

    ws = eventually(settled, what="two placed, two unschedulable")
    devices = [(p["node"], d) for w in ws for p in w["status"].get("placements") or ()
               for d in p["devices"]]
    assert len(devices) == len(set(devices)) == 2


def test_finished_workload_frees_devices_and_succeeds(
        controller: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    controller.wait_nodes(group.add(1, gpus=1))
    admin.create(workload("once", namespace, nodeSelector=group.selector))
    wait_phase(admin, namespace, "once", "Running")
    admin.create(workload("next", namespace, nodeSelector=group.selector))
    wait_condition(admin, namespace, "next", "Scheduled", "Unschedulable")
    controller.cluster.set_pod_phase(namespace, "once-0", "Succeeded")
    w = wait_phase(admin, namespace, "once", "Succeeded")
    assert any(c["type"] == "Ready" and c["reason"] == "Succeeded"
               for c in w["status"]["conditions"])
    wait_phase(admin, namespace, "next", "Running", timeout=20)


def test_domain_metrics_describe_the_placements(
        controller: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    import urllib.request

    node, = controller.wait_nodes(group.add(1, gpus=4))
    admin.create(workload("metered", namespace, gpusPerReplica=3, nodeSelector=group.selector))
    wait_phase(admin, namespace, "metered", "Running")
    assert controller.mgr is not None

    def scrape() -> str:
        url = f"http://127.0.0.1:{controller.mgr.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.read().decode()

    def has_all() -> str | None:
        text = scrape()
        want = [f'gpu_orchestrator_node_gpus{{node="{node}"}} 4.0',
                f'gpu_orchestrator_node_gpus_allocated{{node="{node}"}} 3.0']
        return text if all(w in text for w in want) else None

    text = eventually(has_all, what="node GPU gauges")
    assert 'gpu_orchestrator_scheduling_attempts_total{result="scheduled",strategy="leastLoaded"}' \
        in text
    assert "gpu_orchestrator_scheduling_decision_seconds_bucket" in text
    assert "gpu_orchestrator_create_to_bound_seconds_count" in text
    running = [line for line in text.splitlines()
               if line.startswith('gpu_orchestrator_workloads{phase="Running"}')]
    assert running and float(running[0].split()[-1]) >= 1


def test_unschedulable_workload_fails_after_max_retries(
        controller: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    node, = controller.wait_nodes(group.add(1, gpus=1))
    admin.create(workload("hopeless", namespace, gpusPerReplica=2, nodeSelector=group.selector,
                          retryPolicy={"maxRetries": 2, "backoffSeconds": 1,
                                       "maxBackoffSeconds": 1}))
    w = wait_phase(admin, namespace, "hopeless", "Failed", timeout=30)
    assert w["status"]["retries"] == 2
    failed = next(c for c in w["status"]["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "Unschedulable"
    assert "gave up after 2 retries" in failed["message"]
    assert f"{node}: 1 free GPU, needs 2" in failed["message"]
    # it keeps Scheduled=False with the reasons, and its giving up is a FailedScheduling
    # Event too (what docs/alerts.md's field selector finds)
    scheduled = next(c for c in w["status"]["conditions"] if c["type"] == "Scheduled")
    assert (scheduled["status"], scheduled["reason"]) == ("False", "Unschedulable")
    assert scheduled["message"] == failed["message"]
    eventually(lambda: any("gave up after 2 retries" in e["message"] for e in wait_events(
        admin, namespace, "hopeless", "FailedScheduling")), what="the giving up's Event")
