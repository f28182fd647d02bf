"""Each strategy's distinctive choice, on small clusters."""

import random

import pytest

from api.v1alpha1.types import Placement
from internal.scheduling import (
    INVALID_MAP,
    PREEMPT,
    SCHEDULED,
    UNSCHEDULABLE,
    Scheduler,
    names,
    schedule,
)
from internal.scheduling.snapshot import COST_LABEL
from tests.unit.scheduling.helpers import (
    SEED_MAP,
    cluster,
    foreign_pod,
    four_nodes,
    gpunode,
    node,
    workload,
)


def P(i: int, n: str, *d: int) -> Placement:
    return Placement(index=i, node=n, devices=list(d))


def test_registry_has_all_strategies() -> None:
    assert names() == sorted(
        [
            "leastLoaded",
            "bestFit",
            "priority",
            "roundRobin",
            "annotationMap",
            "random",
            "costOptimized",
        ]
    )


def test_least_loaded_picks_emptiest() -> None:
    snap, led = four_nodes()
    led.assume("x/a", [P(0, "node1", 0, 1, 2)])
    led.assume("x/b", [P(0, "node2", 0)])
    led.assume("x/c", [P(0, "node4", 0)])
    d = schedule(workload(gpusPerReplica=2), snap, led, "leastLoaded")
    assert d.ok and d.placements == [P(0, "node3", 0, 1)]


def test_least_loaded_spreads_a_gang() -> None:
    snap, led = four_nodes()
    d = schedule(workload(replicas=4, gpusPerReplica=1), snap, led, "leastLoaded")
    assert sorted(p.node for p in d.placements) == ["node1", "node2", "node3", "node4"]


def test_least_loaded_breaks_ties_by_utilization() -> None:
    busy = gpunode("node1")
    for dev in busy["status"]["devices"]:
        dev["utilization"] = 90
    snap, led = cluster(node("node1"), node("node2"), gpunodes=(busy, gpunode("node2")))
    assert schedule(workload(), snap, led, "leastLoaded").nodes == ["node2"]


def test_best_fit_packs() -> None:
    snap, led = four_nodes()
    led.assume("x/a", [P(0, "node1", 0, 1, 2)])  # 1 free
    led.assume("x/b", [P(0, "node2", 0, 1)])  # 2 free
    led.assume("x/c", [P(0, "node4", 0)])  # 3 free
    assert schedule(workload(gpusPerReplica=2), snap, led, "bestFit").placements == [
        P(0, "node2", 2, 3)
    ]
    assert schedule(workload(gpusPerReplica=1), snap, led, "bestFit").nodes == ["node1"]


def test_round_robin_rotates() -> None:
    snap, led = four_nodes()
    sched = Scheduler(snap, led)
    seen = []
    for i in range(6):
        d = sched.schedule(workload(f"w{i}", schedulingStrategy="roundRobin"))
        d.assume(led, workload(f"w{i}"))
        seen.append(d.nodes[0])
    assert seen == ["node1", "node2", "node3", "node4", "node1", "node2"]


def test_round_robin_gang_continues_after_previous_replica() -> None:
    snap, led = four_nodes()
    sched = Scheduler(snap, led)
    sched.schedule(workload("a", schedulingStrategy="roundRobin"))  # cursor -> node1
    d = sched.schedule(workload("b", replicas=2, schedulingStrategy="roundRobin"))
    assert [p.node for p in d.placements] == ["node2", "node3"]


def test_cost_optimized_prefers_cheap() -> None:
    snap, led = cluster(
        node("node1", labels={COST_LABEL: "expensive"}),
        node("node2"),
        node("node3", labels={COST_LABEL: "cheap"}),
        node("node4", labels={COST_LABEL: "0.5"}),
    )
    led.assume("x/full", [P(0, "node4", 0, 1, 2, 3)])  # cheapest is full
    d = schedule(workload(gpusPerReplica=2), snap, led, "costOptimized")
    assert d.nodes == ["node3"]


def test_cost_optimized_packs_cheap_nodes() -> None:
    snap, led = cluster(
        node("c1", labels={COST_LABEL: "cheap"}), node("c2", labels={COST_LABEL: "cheap"})
    )
    led.assume("x/a", [P(0, "c2", 0)])
    assert schedule(workload(), snap, led, "costOptimized").nodes == ["c2"]


def test_random_is_seeded_and_spreads() -> None:
    snap, led = cluster(*(node(f"n{i:02d}") for i in range(20)))
    picks = [
        schedule(workload(), snap, led, "random", random.Random(seed)).nodes[0]
        for seed in range(40)
    ]
    again = [
        schedule(workload(), snap, led, "random", random.Random(seed)).nodes[0]
        for seed in range(40)
    ]
    assert picks == again
    assert len(set(picks)) > 8


def test_random_only_picks_feasible() -> None:
    snap, led = cluster(*(node(f"n{i}", 1) for i in range(10)), node("big", 4))
    for seed in range(10):
        d = schedule(workload(gpusPerReplica=3), snap, led, "random", random.Random(seed))
        assert d.nodes == ["big"]


def test_annotation_map_seed_example() -> None:
    snap, led = four_nodes()
    w = workload(
        "seed",
        replicas=5,
        schedulingStrategy="annotationMap",
        annotations={"gpu-scheduling-map": SEED_MAP},
    )
    d = schedule(w, snap, led)
    assert d.outcome == SCHEDULED, d.message
    assert [(p.index, p.node, p.devices) for p in d.placements] == [
        (0, "node1", [0, 1]),
        (1, "node2", [2]),
        (2, "node3", [0, 1, 2]),
        (3, "node4", [3]),
        (4, "node4", [3]),
    ]
    d.assume(led, w)
    assert led.holder("node4", 3) == "default/seed"


def test_annotation_map_device_of_other_workload() -> None:
    snap, led = four_nodes()
    led.assume("x/other", [P(0, "node4", 3)])
    w = workload("seed", replicas=5, schedulingStrategy="annotationMap", schedulingMap=SEED_MAP)
    d = schedule(w, snap, led)
    assert d.outcome == UNSCHEDULABLE
    assert "node4: replica 3: device 3 held by x/other" in d.message
    assert not d.placements


@pytest.mark.parametrize(
    ("text", "replicas", "words"),
    [
        (None, 1, "needs spec.schedulingMap"),
        ("0=node1:0\n1=node2", 2, "line 2"),
        ("0=node9:0", 1, "node 'node9' does not exist"),
        ("0=node1:7", 1, "device 7 beyond node node1's 4 GPU(s)"),
        ("0=node1:0\n1=node1:1", 1, "replica index 1 >= replicas (1)"),
    ],
)
def test_annotation_map_bad_input(text: str | None, replicas: int, words: str) -> None:
    snap, led = four_nodes()
    spec = {"replicas": replicas, "schedulingStrategy": "annotationMap"}
    if text is not None:
        spec["schedulingMap"] = text
    d = schedule(workload(**spec), snap, led)
    assert d.outcome == INVALID_MAP and words in d.message


def test_priority_preempts_lowest_first() -> None:
    snap, led = cluster(node("node1", 2), node("node2", 2))
    led.assume("x/low", [P(0, "node1", 0, 1)], priority=0)
    led.assume("x/mid", [P(0, "node2", 0, 1)], priority=50)
    foreign_pod(led, "x/pod", "node2", 0)
    w = workload("hi", gpusPerReplica=2, priority="high", schedulingStrategy="priority")
    d = schedule(w, snap, led)
    assert d.outcome == PREEMPT
    assert d.victims == ["x/low"]
    assert d.placements == [P(0, "node1", 0, 1)]
    # the caller evicts, forgets, then schedules again
    led.forget("x/low")
    again = schedule(w, snap, led)
    assert again.ok and again.nodes == ["node1"]


def test_priority_minimal_victims_for_a_gang() -> None:
    snap, led = cluster(node("node1", 2), node("node2", 2), node("node3", 2))
    led.assume("x/a", [P(0, "node1", 0, 1)], priority=1)
    led.assume("x/b", [P(0, "node2", 0)], priority=2)
    led.assume("x/c", [P(0, "node3", 0, 1)], priority=3)
    w = workload("g", replicas=2, gpusPerReplica=2, priority=10, schedulingStrategy="priority")
    d = schedule(w, snap, led)
    assert d.outcome == PREEMPT
    assert d.victims == ["x/a", "x/b"]  # c (highest) is spared


def test_priority_never_preempts_equal_or_higher() -> None:
    snap, led = cluster(node("node1", 2))
    led.assume("x/a", [P(0, "node1", 0, 1)], priority=100)
    w = workload("w", gpusPerReplica=2, priority="high", schedulingStrategy="priority")
    d = schedule(w, snap, led)
    assert d.outcome == UNSCHEDULABLE and d.victims == []


def test_other_strategies_never_preempt() -> None:
    snap, led = cluster(node("node1", 2))
    led.assume("x/a", [P(0, "node1", 0, 1)], priority=0)
    d = schedule(workload(gpusPerReplica=2, priority=100), snap, led, "leastLoaded")
    assert d.outcome == UNSCHEDULABLE
