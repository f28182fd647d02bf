"""The scheduling snapshot reads Nodes and GPUNodes as the API serves them: device
indices as reported (never renumbered), every reported field kept, the allocatable
count when no agent reports, readiness from the Ready condition, the cost label,
and the ledger told each node's usable devices whenever that changes."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from api.v1alpha1.types import Placement
from internal.scheduling import Ledger, Snapshot, schedule
from internal.scheduling.inventory import stale_view
from internal.scheduling.snapshot import COST_LABEL, DeviceInfo, NodeInfo
from tests.unit.scheduling.helpers import cluster, gpunode, node, workload


def P(i: int, n: str, *d: int) -> Placement:
    return Placement(index=i, node=n, devices=list(d))


def reported(name: str, devices: list[dict[str, Any]], **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"devices": devices, **status}}


# ------------------------------------------------------------------ GPUNode devices


def test_every_reported_device_field_is_kept() -> None:
    g = reported("n", [
        {"index": 0, "uuid": "GPU-aaa", "model": "NVIDIA H100 80GB HBM3",
         "memoryTotalMiB": 81559, "memoryUsedMiB": 1024, "utilization": 37,
         "healthy": True, "nvlinkPeers": [1]},
        {"index": 1, "uuid": "GPU-bbb", "model": "NVIDIA H100 80GB HBM3",
         "memoryTotalMiB": 81559, "memoryUsedMiB": 0, "utilization": 0,
         "healthy": False, "nvlinkPeers": [0]},
    ])
    snap = Snapshot.build([node("n", 2)], [g])
    info = snap.get("n")
    assert info is not None
    assert info.devices == {
        0: DeviceInfo(0, "GPU-aaa", "NVIDIA H100 80GB HBM3", 81559, 1024, 37, True,
                      frozenset({1})),
        1: DeviceInfo(1, "GPU-bbb", "NVIDIA H100 80GB HBM3", 81559, 0, 0, False,
                      frozenset({0})),
    }
    assert info.usable == frozenset({0})
    assert info.has_gpunode and not info.stale
    assert info.topology_known  # peers reported, even without topologyKnown


def test_a_device_reporting_only_its_index_is_healthy_with_unknown_memory() -> None:
    snap = Snapshot.build([node("n", 2)], [reported("n", [{"index": 0}, {"index": 1}])])
    info = snap.get("n")
    assert info is not None
    assert info.devices == {0: DeviceInfo(0), 1: DeviceInfo(1)}
    assert info.devices[0].memory_total_mib is None
    assert info.usable == frozenset({0, 1}) and not info.topology_known
    assert info.max_memory_mib() is None


def test_device_indices_are_the_reported_ones_not_positions() -> None:
    # device 1 fell off the bus: the agent reports 0, 2, 3 (in any order)
    g = reported("n", [{"index": 3, "uuid": "GPU-3"}, {"index": 0, "uuid": "GPU-0"},
                       {"index": 2, "uuid": "GPU-2"}])
    snap, led = cluster(node("n", 4), gpunodes=(g,))
    info = snap.get("n")
    assert info is not None and info.usable == frozenset({0, 2, 3})
    assert {i: d.uuid for i, d in info.devices.items()} == {0: "GPU-0", 2: "GPU-2", 3: "GPU-3"}
    d = schedule(workload(gpusPerReplica=3), snap, led)
    assert d.placements == [P(0, "n", 0, 2, 3)]
    assert led.free_count("n") == 3


@pytest.mark.parametrize(
    ("flag", "peers", "known"),
    [(None, [], False), (False, [], False), (True, [], True), (None, [1], True),
     (False, [1], True)],
)
def test_topology_is_known_from_the_flag_or_from_any_peer(
    flag: bool | None, peers: list[int], known: bool
) -> None:
    status = {} if flag is None else {"topologyKnown": flag}
    devices = [{"index": 0, "nvlinkPeers": peers}, {"index": 1}]
    snap = Snapshot.build([node("n", 2)], [reported("n", devices, **status)])
    info = snap.get("n")
    assert info is not None and info.topology_known is known


def test_topology_known_from_peers_lets_required_nvlink_place() -> None:
    g = reported("n", [{"index": 0, "nvlinkPeers": [1]}, {"index": 1, "nvlinkPeers": [0]},
                       {"index": 2}, {"index": 3}])
    snap, led = cluster(node("n", 4), gpunodes=(g,))
    d = schedule(workload(gpusPerReplica=2, topology="Required"), snap, led)
    assert d.placements == [P(0, "n", 0, 1)]


def test_a_peer_known_only_from_the_other_side_still_links() -> None:
    g = reported("n", [{"index": 0}, {"index": 1}, {"index": 2, "nvlinkPeers": [3]},
                       {"index": 3}], topologyKnown=True)
    snap, led = cluster(node("n", 4), gpunodes=(g,))
    d = schedule(workload(gpusPerReplica=2, topology="Required"), snap, led)
    assert d.placements == [P(0, "n", 2, 3)]


def test_memory_and_utilization_come_from_the_report() -> None:
    hot = reported("hot", [{"index": i, "memoryTotalMiB": 40960, "utilization": 90}
                           for i in range(4)])
    cool = reported("cool", [{"index": i, "memoryTotalMiB": 81920, "utilization": 10,
                              "memoryUsedMiB": 100} for i in range(4)])
    snap, led = cluster(node("hot"), node("cool"), gpunodes=(hot, cool))
    info = snap.get("cool")
    assert info is not None and info.mean_utilization == 10
    assert info.max_memory_mib() == 81920 and info.max_memory_mib([0]) == 81920
    assert schedule(workload(), snap, led, "leastLoaded").nodes == ["cool"]
    assert schedule(workload(minGPUMemoryMiB=50000), snap, led).nodes == ["cool"]
    assert schedule(workload(), snap, led, "bestFit").nodes == ["hot"]


def test_mean_utilization_is_over_all_devices() -> None:
    g = reported("n", [{"index": 0, "utilization": 90}, {"index": 1, "utilization": 30},
                       {"index": 2, "healthy": False}])
    info = Snapshot.build([node("n", 3)], [g]).get("n")
    assert info is not None and info.mean_utilization == 40
    assert NodeInfo("empty").mean_utilization == 0.0


def test_largest_memory_among_the_devices_asked_about() -> None:
    g = reported("n", [{"index": 0, "memoryTotalMiB": 40960},
                       {"index": 1, "memoryTotalMiB": 81920},
                       {"index": 2, "memoryTotalMiB": 24576, "healthy": False},
                       {"index": 3}])
    info = Snapshot.build([node("n", 4)], [g]).get("n")
    assert info is not None
    assert info.max_memory_mib([0, 1]) == 81920
    assert info.max_memory_mib([0, 2]) == 40960
    assert info.max_memory_mib([0, 3]) is None  # device 3 does not say
    assert info.max_memory_mib([7]) is None  # no such device
    assert info.max_memory_mib([]) is None
    assert info.max_memory_mib() is None  # usable 0, 1, 3: 3 unknown


# ---------------------------------------------------------------- Node without agent


def test_without_a_gpunode_the_allocatable_count_gives_healthy_devices() -> None:
    snap, led = cluster(node("n", 3))
    info = snap.get("n")
    assert info is not None
    assert info.devices == {i: DeviceInfo(i) for i in range(3)}
    assert not info.has_gpunode and not info.topology_known and not info.stale
    assert led.free_count("n") == 3


def test_a_gpunode_without_devices_falls_back_to_allocatable() -> None:
    snap, _ = cluster(node("n", 2), gpunodes=(reported("n", []),))
    info = snap.get("n")
    assert info is not None and info.has_gpunode and info.usable == frozenset({0, 1})


def _raw(name: str, status: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": "True"}], **status}}


@pytest.mark.parametrize(
    ("status", "count"),
    [
        ({"allocatable": {"nvidia.com/gpu": "4"}, "capacity": {"nvidia.com/gpu": "8"}}, 4),
        ({"allocatable": {"nvidia.com/gpu": "0"}, "capacity": {"nvidia.com/gpu": "8"}}, 0),
        ({"allocatable": {"cpu": "8"}, "capacity": {"nvidia.com/gpu": "2"}}, 2),
        ({"capacity": {"nvidia.com/gpu": 3}}, 3),
        ({"allocatable": {"nvidia.com/gpu": "-1"}}, 0),
        ({"allocatable": {"nvidia.com/gpu": "lots"}}, 0),
        ({"allocatable": {"nvidia.com/gpu": None}}, 0),
        ({}, 0),
    ],
)
def test_allocatable_gpus_before_capacity(status: dict[str, Any], count: int) -> None:
    snap, led = cluster(_raw("n", status))
    info = snap.get("n")
    assert info is not None and len(info.devices) == count
    assert led.free_count("n") == count


def test_a_node_whose_spec_leaves_out_unschedulable_takes_work() -> None:
    """The API server omits ``spec.unschedulable`` unless the node is cordoned."""
    snap, led = cluster(_raw("n", {"allocatable": {"nvidia.com/gpu": "2"}}))
    info = snap.get("n")
    assert info is not None and info.unschedulable is False and info.taints == ()
    assert schedule(workload(gpusPerReplica=2), snap, led).nodes == ["n"]


@pytest.mark.parametrize(
    ("conditions", "ready"),
    [
        ([{"type": "Ready", "status": "True"}], True),
        ([{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "True"}],
         True),
        ([{"type": "Ready", "status": "False"}], False),
        ([{"type": "Ready", "status": "Unknown"}], False),
        ([{"type": "MemoryPressure", "status": "True"}], False),
        ([], False),
    ],
)
def test_ready_only_from_the_ready_condition(conditions: list[dict], ready: bool) -> None:
    raw = node("n")
    raw["status"]["conditions"] = conditions
    snap, led = cluster(raw)
    info = snap.get("n")
    assert info is not None and info.ready is ready
    d = schedule(workload(), snap, led)
    assert d.ok is ready
    if not ready:
        assert d.reasons == {"n": "NotReady"}


def test_node_spec_and_labels() -> None:
    taint = {"key": "k", "effect": "NoSchedule"}
    snap, _ = cluster(node("n", labels={"zone": "a"}, taints=[taint], unschedulable=True),
                      node("m"))
    n, m = snap.get("n"), snap.get("m")
    assert n is not None and m is not None
    assert n.labels == {"zone": "a"} and n.taints == (taint,) and n.unschedulable
    assert not m.unschedulable and m.taints == ()


# ---------------------------------------------------------------------------- cost


@pytest.mark.parametrize(
    ("label", "cost"),
    [(None, 10.0), ("cheap", 1.0), ("standard", 10.0), ("expensive", 100.0),
     (" Cheap ", 1.0), ("EXPENSIVE", 100.0), ("2.5", 2.5), ("0", 0.0), ("-3", 10.0),
     ("pricey", 10.0)],
)
def test_cost_label(label: str | None, cost: float) -> None:
    labels = {} if label is None else {COST_LABEL: label}
    info = Snapshot.build([node("n", labels=labels)]).get("n")
    assert info is not None and info.cost == cost


def test_cost_levels_follow_label_changes() -> None:
    snap, led = cluster(node("a", labels={COST_LABEL: "expensive"}), node("b"),
                        node("c", labels={COST_LABEL: "cheap"}), node("d"))
    assert snap.cost_levels() == [(1.0, ["c"]), (10.0, ["b", "d"]), (100.0, ["a"])]
    assert schedule(workload(), snap, led, "costOptimized").nodes == ["c"]
    snap.upsert_node(node("a", labels={COST_LABEL: "0.5"}))
    assert snap.cost_levels() == [(0.5, ["a"]), (1.0, ["c"]), (10.0, ["b", "d"])]
    assert schedule(workload(), snap, led, "costOptimized").nodes == ["a"]
    snap.upsert_node(node("e", labels={COST_LABEL: "0.1"}))
    assert schedule(workload(), snap, led, "costOptimized").nodes == ["e"]
    snap.remove_node("e")
    assert schedule(workload(), snap, led, "costOptimized").nodes == ["a"]


# ----------------------------------------------------------------- keeping up to date


def test_names_stay_sorted_through_adds_and_removes() -> None:
    snap = Snapshot.build([node("c"), node("a")])
    snap.upsert_node(node("b"))
    snap.upsert_node(node("a", 8))  # an update, not a second "a"
    assert snap.names == ["a", "b", "c"] and len(snap) == 3
    snap.remove_node("b")
    snap.remove_node("zz")  # unknown: nothing happens
    assert snap.names == ["a", "c"] and len(snap) == 2
    assert snap.get("b") is None


def test_a_late_delete_of_an_older_node_of_the_same_name_removes_nothing() -> None:
    new = node("a", 4)
    new["metadata"]["uid"] = "new"
    snap = Snapshot.build([new])
    assert snap.remove_node("a", "old") is False
    assert snap.names == ["a"] and snap.get("a") is not None
    assert snap.remove_node("a", "new") is True
    assert snap.names == [] and snap.get("a") is None
    assert snap.remove_node("a", "new") is True  # gone already: nothing to keep


@given(names=st.sets(st.sampled_from("abcdefg"), min_size=1), start=st.sampled_from("_abcdefgz"))
def test_names_after_wraps_around_once(names: set[str], start: str) -> None:
    snap = Snapshot.build([node(n) for n in names])
    order = sorted(names)
    after = [n for n in order if n > start] + [n for n in order if n <= start]
    assert list(snap.names_after(start)) == after
    assert list(snap.names_after(None)) == order


def test_the_ledger_hears_of_health_changes_and_removals() -> None:
    snap, led = cluster(node("n", 4), gpunodes=(gpunode("n"),))
    assert led.free_count("n") == 4
    snap.upsert_gpunode(gpunode("n", unhealthy=(1, 2)))
    assert led.free_count("n") == 2
    assert schedule(workload(gpusPerReplica=2), snap, led).placements == [P(0, "n", 0, 3)]
    snap.remove_gpunode("n")  # the agent went away: back to the allocatable count
    info = snap.get("n")
    assert info is not None and not info.has_gpunode and info.usable == frozenset(range(4))
    assert led.free_count("n") == 4
    snap.remove_gpunode("n")  # again, and for a node that never had one: harmless
    snap.remove_gpunode("zz")
    assert snap.get("zz") is None and led.free_count("n") == 4
    snap.remove_node("n")
    assert led.free_count("n") == 0
    assert not schedule(workload(), snap, led).ok


def test_a_gpunode_before_its_node_is_used_when_the_node_arrives() -> None:
    led = Ledger()
    snap = Snapshot(led)
    snap.upsert_gpunode(gpunode("n", 2, memory=1000))
    assert snap.get("n") is None and len(snap) == 0
    snap.upsert_node(node("n", 2))
    info = snap.get("n")
    assert info is not None and info.has_gpunode and info.max_memory_mib() == 1000
    assert led.free_count("n") == 2


def test_gpunode_whose_spec_names_its_own_node() -> None:
    g = gpunode("n", 2, unhealthy=(0,))
    g["spec"] = {"nodeName": "n"}
    snap, led = cluster(node("n", 2), gpunodes=(g,))
    info = snap.get("n")
    assert info is not None and info.usable == frozenset({1})
    assert led.free_count("n") == 1


def test_attach_tells_a_new_ledger_every_node() -> None:
    snap = Snapshot.build([node("a", 2), node("b", 4)], [gpunode("b", 4, unhealthy=(0,))])
    led = Ledger()
    snap.attach(led)
    assert (led.free_count("a"), led.free_count("b")) == (2, 3)
    assert snap.ledger is led


def test_stale_gpunode_offers_none_of_its_devices_and_keeps_their_holders() -> None:
    snap, led = cluster(node("n", 4), gpunodes=(gpunode("n"),))
    led.assume("x/a", [P(0, "n", 1)])
    snap.upsert_gpunode(stale_view(gpunode("n")))
    info = snap.get("n")
    assert info is not None and info.stale and info.usable == frozenset()
    assert led.holder("n", 1) == "x/a"
    assert not schedule(workload(), snap, led).ok
    snap.upsert_gpunode(gpunode("n"))
    info = snap.get("n")
    assert info is not None and not info.stale
    assert schedule(workload(gpusPerReplica=3), snap, led).placements == [P(0, "n", 0, 2, 3)]


def test_a_removed_node_is_not_brought_back_by_its_gpunode() -> None:
    snap, led = cluster(node("n", 4), node("m", 4), gpunodes=(gpunode("n"),))
    snap.remove_node("n")
    snap.upsert_gpunode(gpunode("n", unhealthy=(0,)))  # a late agent report
    snap.remove_gpunode("n")
    assert snap.get("n") is None and snap.names == ["m"]
    assert led.free_count("n") == 0
    assert schedule(workload(replicas=2, gpusPerReplica=4), snap, led).outcome == "Unschedulable"
