"""An annotation map names nodes, but a tenant's map never lands on a node tainted or
cordoned for someone else, unless its template tolerates that."""

from __future__ import annotations

from internal.scheduling import SCHEDULED, UNSCHEDULABLE, schedule
from tests.unit.scheduling.helpers import cluster, node, workload

TAINT = {"key": "team", "value": "a", "effect": "NoSchedule"}


def mapped(**spec: object):
    return workload("m", schedulingStrategy="annotationMap", schedulingMap="0=node1:0", **spec)


def test_a_map_is_refused_a_tainted_node_it_does_not_tolerate() -> None:
    snap, led = cluster(node("node1", 2, taints=[TAINT]))
    d = schedule(mapped(), snap, led)
    assert d.outcome == UNSCHEDULABLE
    assert "taint team=a:NoSchedule not tolerated" in d.message


def test_a_map_that_tolerates_the_taint_is_placed() -> None:
    snap, led = cluster(node("node1", 2, taints=[TAINT]))
    tol = {"key": "team", "operator": "Equal", "value": "a", "effect": "NoSchedule"}
    d = schedule(mapped(template={"spec": {"tolerations": [tol]}}), snap, led)
    assert d.outcome == SCHEDULED


def test_a_map_is_refused_a_cordoned_node() -> None:
    snap, led = cluster(node("node1", 2, unschedulable=True))
    d = schedule(mapped(), snap, led)
    assert d.outcome == UNSCHEDULABLE and "cordoned" in d.message


def test_a_map_may_name_the_highest_device_of_a_node_with_a_gap() -> None:
    from tests.unit.scheduling.helpers import gpunode

    g = gpunode("node1", 4)
    g["status"]["devices"] = [d for d in g["status"]["devices"] if d["index"] != 1]
    snap, led = cluster(node("node1", 4), gpunodes=(g,))
    d = schedule(workload("m", schedulingStrategy="annotationMap",
                          schedulingMap="0=node1:3"), snap, led)
    assert d.outcome == SCHEDULED and d.placements[0].devices == [3]
    d = schedule(workload("m", schedulingStrategy="annotationMap",
                          schedulingMap="0=node1:1"), snap, led)
    assert d.outcome == UNSCHEDULABLE and "device 1 does not exist" in d.message
