"""Filters, messages, gangs, exposure modes and the capacity index."""

from api.v1alpha1.types import Placement
from internal.scheduling import UNSCHEDULABLE, Ledger, Snapshot, group_reasons, schedule
from internal.scheduling.framework import order_by_priority
from tests.unit.scheduling.helpers import cluster, foreign_pod, four_nodes, gpunode, node, workload


def P(i: int, n: str, *d: int) -> Placement:
    return Placement(index=i, node=n, devices=list(d))


def test_grouped_message_like_the_issue() -> None:
    snap, led = cluster(node("node1"), node("node2", ready=False))
    led.assume("x/a", [P(0, "node1", 0, 1, 2)])
    d = schedule(workload(gpusPerReplica=2), snap, led)
    assert d.outcome == UNSCHEDULABLE
    assert d.message == "node1: 1 free GPU, needs 2; node2: NotReady"
    assert d.reasons == {"node1": "1 free GPU, needs 2", "node2": "NotReady"}


def test_filters_each_give_their_reason() -> None:
    snap, led = cluster(
        node("a", ready=False),
        node("b", unschedulable=True),
        node("c", taints=[{"key": "gpu", "value": "x", "effect": "NoSchedule"}]),
        node("d", labels={"zone": "west"}),
        node("e", 1, labels={"zone": "east"}),
        node("f", labels={"zone": "east"}),
        gpunodes=(gpunode("f", unhealthy=(0, 1, 2)),),
    )
    w = workload(gpusPerReplica=2, nodeSelector={"zone": "east"})
    d = schedule(w, snap, led)
    assert d.reasons["a"] == "NotReady"
    assert d.reasons["b"] == "unschedulable (cordoned)"
    assert d.reasons["c"] == "taint gpu=x:NoSchedule not tolerated"
    assert d.reasons["d"] == "does not match nodeSelector zone=east"
    assert d.reasons["e"] == "1 free GPU, needs 2"
    assert d.reasons["f"] == "1 free GPU (3 unhealthy), needs 2"


def test_tolerated_taint_and_matching_selector() -> None:
    taint = {"key": "gpu", "value": "x", "effect": "NoSchedule"}
    snap, led = cluster(node("c", taints=[taint], labels={"zone": "east"}))
    w = workload(
        nodeSelector={"zone": "east"},
        template={"spec": {"tolerations": [{"key": "gpu", "operator": "Exists"}]}},
    )
    assert schedule(w, snap, led).nodes == ["c"]
    pref = {"key": "soft", "effect": "PreferNoSchedule"}
    snap, led = cluster(node("p", taints=[pref]))
    assert schedule(workload(), snap, led).nodes == ["p"]


def test_min_memory_and_health() -> None:
    snap, led = cluster(
        node("small"),
        node("big"),
        node("bare"),
        gpunodes=(gpunode("small", memory=16000), gpunode("big", memory=80000, unhealthy=(0,))),
    )
    d = schedule(workload(minGPUMemoryMiB=40000), snap, led)
    assert d.placements == [P(0, "big", 1)]  # device 0 is unhealthy
    led.assume("x/a", [P(0, "big", 1, 2, 3)])
    d = schedule(workload(minGPUMemoryMiB=40000), snap, led)
    assert d.reasons["small"] == "0 free GPUs, needs 1 (4 below 40000 MiB)"
    assert d.reasons["bare"] == "0 free GPUs, needs 1 (4 with unknown memory, no GPUNode report)"


def test_topology_required_uses_nvlink() -> None:
    links = {0: [1], 1: [0], 2: [3], 3: [2]}
    snap, led = cluster(node("n1"), gpunodes=(gpunode("n1", links=links),))
    led.assume("x/a", [P(0, "n1", 0)])
    d = schedule(workload(gpusPerReplica=2, topology="Required"), snap, led)
    assert d.placements == [P(0, "n1", 2, 3)]
    led.assume("x/b", [P(0, "n1", 3)])
    d = schedule(workload(gpusPerReplica=2, topology="Required"), snap, led)
    assert d.reasons == {"n1": "no NVLink-connected set of 2 free GPUs"}
    d = schedule(workload(gpusPerReplica=2, topology="Preferred"), snap, led)
    assert d.placements == [P(0, "n1", 1, 2)]


def test_gang_all_or_nothing() -> None:
    snap, led = four_nodes()
    for i in range(1, 4):
        led.assume(f"x/{i}", [P(0, f"node{i}", 0, 1, 2)])
    before = {n: led.free_count(n) for n in snap.names}
    d = schedule(workload(replicas=3, gpusPerReplica=2), snap, led)
    assert d.outcome == UNSCHEDULABLE and d.placements == []
    assert d.message == (
        "gang of 3 x 2 GPU(s) does not fit, nothing booked: "
        "node1, node2, node3: 1 free GPU, needs 2; node4: 4 free GPUs, room for 2 of 3 replicas"
    )
    assert {n: led.free_count(n) for n in snap.names} == before
    assert led.allocation("default/w") is None


def test_gang_fits_using_several_replicas_per_node() -> None:
    snap, led = cluster(node("node1"), node("node2", 2))
    d = schedule(workload(replicas=3, gpusPerReplica=2), snap, led)
    assert d.ok
    assert sorted((p.node, tuple(p.devices)) for p in d.placements) == [
        ("node1", (0, 1)),
        ("node1", (2, 3)),
        ("node2", (0, 1)),
    ]


def test_device_plugin_mode_counts() -> None:
    snap, led = cluster(node("node1"))
    w = workload(replicas=2, gpusPerReplica=2, deviceExposure="device-plugin")
    d = schedule(w, snap, led)
    assert d.ok and d.counted and all(p.devices == [] for p in d.placements)
    d.assume(led, w)
    assert led.free_count("node1") == 0
    d2 = schedule(workload("other", deviceExposure="device-plugin"), snap, led)
    assert d2.reasons == {"node1": "0 free GPUs, needs 1"} or d2.message.startswith("1 other")
    named = schedule(workload("named"), snap, led)  # one authority per node
    assert not named.ok


def test_foreign_pods_take_capacity() -> None:
    snap, led = cluster(node("node1"), node("node2"))
    foreign_pod(led, "ns/p", "node1", 3)
    d = schedule(workload(gpusPerReplica=2), snap, led, "bestFit")
    assert d.nodes == ["node2"]


def test_group_reasons_truncates() -> None:
    reasons = {f"n{i}": "NotReady" for i in range(5)} | {"z": "1 free GPU, needs 2"}
    assert group_reasons(reasons, others=7, need=2) == (
        "n0, n1, n2 and 2 more: NotReady; z: 1 free GPU, needs 2; "
        "7 other nodes: fewer than 2 free GPUs"
    )


def test_order_by_priority() -> None:
    ws = [workload("a", priority="low"), workload("b", priority="high"), workload("c", priority=50)]
    assert [w.metadata.name for w in order_by_priority(ws)] == ["b", "c", "a"]


def test_pure_schedule_changes_nothing() -> None:
    snap, led = four_nodes()
    d = schedule(workload(replicas=2, gpusPerReplica=2), snap, led)
    assert d.ok and led.allocations() == {} and all(led.free_count(n) == 4 for n in snap.names)


def test_node_removed_and_readded() -> None:
    snap, led = four_nodes()
    snap.remove_node("node1")
    assert "node1" not in schedule(workload(replicas=3), snap, led).nodes
    snap.upsert_node(node("node1", 8))
    assert led.free_count("node1") == 8


def test_scale_uses_the_index() -> None:
    """5,000 nodes, almost all full: a decision filters only nodes with room."""
    n = 5000
    led = Ledger()
    snap = Snapshot.build((node(f"n{i:05d}", 8) for i in range(n)), (), led)
    for i in range(n):
        if i % 500 != 7:  # ten nodes keep room
            foreign_pod(led, f"ns/p{i}", f"n{i:05d}", 7)
    for strategy in ("leastLoaded", "bestFit", "priority", "random"):
        d = schedule(workload(gpusPerReplica=4), snap, led, strategy)
        assert d.ok, strategy
        assert d.visited <= 10, (strategy, d.visited)
    d = schedule(workload(replicas=2, gpusPerReplica=8), snap, led)
    assert d.ok and d.visited <= 20
    d = schedule(workload(gpusPerReplica=8, replicas=11), snap, led)
    assert d.outcome == UNSCHEDULABLE
    assert d.visited < 200
    assert "4990 other nodes: fewer than 8 free GPUs" in d.message
