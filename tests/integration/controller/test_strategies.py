"""Each strategy's distinctive choice, on nodes only this test's workloads select."""

from __future__ import annotations

from internal.scheduling.snapshot import COST_LABEL as COST
from runtime import Client
from tests.integration.controller.conftest import (
    NodeGroup,
    Running,
    get_workload,
    wait_condition,
    wait_phase,
    workload,
)


def _node_of(admin: Client, ns: str, name: str) -> str:
    w = wait_phase(admin, ns, name, "Running", "Scheduled")
    return w["status"]["placements"][0]["node"]


def _fill(admin: Client, ns: str, name: str, group: NodeGroup, node: str, gpus: int) -> None:
    """Occupies ``gpus`` devices of ``node`` with a pinned workload."""
    devs = ",".join(str(i) for i in range(gpus))
    admin.create(workload(name, ns, replicas=1, gpusPerReplica=gpus,
                          schedulingStrategy="annotationMap", schedulingMap=f"0={node}:{devs}"))
    wait_phase(admin, ns, name, "Running")


def test_least_loaded_prefers_the_emptiest_node(
        controller: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    busy, empty = controller.wait_nodes(group.add(2, gpus=4))
    _fill(admin, namespace, "filler", group, busy, 2)
    admin.create(workload("w", namespace, schedulingStrategy="leastLoaded",
                          nodeSelector=group.selector))
    assert _node_of(admin, namespace, "w") == empty


def test_best_fit_packs_the_fullest_node_that_fits(
        controller: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    busy, _empty = controller.wait_nodes(group.add(2, gpus=4))
    _fill(admin, namespace, "filler", group, busy, 3)
    admin.create(workload("w", namespace, schedulingStrategy="bestFit",
                          nodeSelector=group.selector))
    w = wait_phase(admin, namespace, "w", "Running")
    assert w["status"]["placements"] == [{"index": 0, "node": busy, "devices": [3]}]


def test_round_robin_spreads_consecutive_workloads(
        controller: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    nodes = controller.wait_nodes(group.add(3, gpus=4))
    used = []
    for i in range(3):
        admin.create(workload(f"rr-{i}", namespace, schedulingStrategy="roundRobin",
                              nodeSelector=group.selector))
        used.append(_node_of(admin, namespace, f"rr-{i}"))
    assert sorted(used) == sorted(nodes)


def test_cost_optimized_prefers_the_cheap_node(
        controller: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    controller.wait_nodes(group.add(2, gpus=4, labels={COST: "expensive"}))
    cheap, = controller.wait_nodes(group.add(1, gpus=4, labels={COST: "cheap"}))
    admin.create(workload("w", namespace, schedulingStrategy="costOptimized",
                          nodeSelector=group.selector))
    assert _node_of(admin, namespace, "w") == cheap


def test_random_spreads_over_feasible_nodes(
        controller: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    nodes = controller.wait_nodes(group.add(4, gpus=4))
    for i in range(8):
        admin.create(workload(f"r-{i}", namespace, schedulingStrategy="random",
                              nodeSelector=group.selector))
    used = {_node_of(admin, namespace, f"r-{i}") for i in range(8)}
    assert used <= set(nodes)
    assert len(used) > 1  # all 8 on one of 4 nodes: probability 4**-7


def test_priority_preempts_a_lower_priority_workload(
        controller: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    node, = controller.wait_nodes(group.add(1, gpus=2))
    admin.create(workload("low", namespace, gpusPerReplica=2, priority="low",
                          schedulingStrategy="priority", nodeSelector=group.selector))
    wait_phase(admin, namespace, "low", "Running")
    admin.create(workload("high", namespace, gpusPerReplica=2, priority="high",
                          schedulingStrategy="priority", nodeSelector=group.selector))
    w = wait_phase(admin, namespace, "high", "Running")
    assert w["status"]["placements"][0]["node"] == node
    cond = wait_condition(admin, namespace, "low", "Preempted", "Preempted")
    assert cond["status"] == "True"
    assert f"{namespace}/high" in cond["message"]
    low = get_workload(admin, namespace, "low")
    assert low["status"]["phase"] == "Pending"
    assert not low["status"].get("placements")
