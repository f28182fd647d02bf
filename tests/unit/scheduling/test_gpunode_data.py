"""The strategies and the device picker using what the NVML agent reports in GPUNodes:
leastLoaded by utilization then free count, bestFit by memory, unhealthy devices
never offered, stale heartbeats offering nothing, NVLink topology honoured."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import combinations
from typing import Any

import pytest

from api.v1alpha1.types import DeviceExposure, Placement
from controllers.placement.state import PlacementState
from internal.agent.nvml import FixtureBackend
from internal.agent.nvml.backend import sample
from internal.agent.status import gpunode_for
from internal.scheduling import SCHEDULED, UNSCHEDULABLE, names, schedule
from internal.scheduling.framework import STALE_REASON
from internal.scheduling.inventory import stale_view
from tests.unit.scheduling.helpers import cluster, gpunode, node, workload

NOW = datetime(2025, 1, 1, tzinfo=UTC)
SEARCH = [s for s in names() if s != "annotationMap"]


def P(i: int, n: str, *d: int) -> Placement:
    return Placement(index=i, node=n, devices=list(d))


def fixture_gpunode(name: str, fixture: str, heartbeat: datetime = NOW) -> dict[str, Any]:
    """The GPUNode an agent with the recorded ``fixture`` would write for ``name``."""
    return gpunode_for(name, sample(FixtureBackend.load(fixture)), heartbeat)


def busy(g: dict[str, Any], utilization: int) -> dict[str, Any]:
    for d in g["status"]["devices"]:
        d["utilization"] = utilization
    return g


# ------------------------------------------------------------------ leastLoaded


def test_least_loaded_prefers_lower_utilization_over_more_free_gpus() -> None:
    snap, led = cluster(
        node("hot", 8), node("cool", 4),
        gpunodes=(busy(gpunode("hot", 8), 80), busy(gpunode("cool", 4), 10)),
    )
    d = schedule(workload(gpusPerReplica=2), snap, led, "leastLoaded")
    assert d.nodes == ["cool"]


def test_least_loaded_same_utilization_then_most_free() -> None:
    snap, led = cluster(
        node("a"), node("b"),
        gpunodes=(busy(gpunode("a"), 30), busy(gpunode("b"), 30)),
    )
    led.assume("x/a", [P(0, "a", 0)])
    assert schedule(workload(), snap, led, "leastLoaded").nodes == ["b"]


def test_least_loaded_uses_the_agents_reported_utilization() -> None:
    quiet = fixture_gpunode("quiet", "h100-sxm-8")
    loud = busy(fixture_gpunode("loud", "h100-sxm-8"), 95)
    snap, led = cluster(node("loud", 8), node("quiet", 8), gpunodes=(loud, quiet))
    d = schedule(workload(replicas=2, gpusPerReplica=2), snap, led, "leastLoaded")
    assert {p.node for p in d.placements} == {"quiet"}


def test_priority_strategy_places_like_least_loaded() -> None:
    snap, led = cluster(
        node("hot", 8), node("cool", 4),
        gpunodes=(busy(gpunode("hot", 8), 80), busy(gpunode("cool", 4), 10)),
    )
    assert schedule(workload(), snap, led, "priority").nodes == ["cool"]


# ---------------------------------------------------------------------- bestFit


def test_best_fit_takes_the_smallest_gpus_that_fit() -> None:
    snap, led = cluster(
        node("a100-40", 4), node("h100-80", 4),
        gpunodes=(gpunode("a100-40", memory=40960), gpunode("h100-80", memory=81920)),
    )
    led.assume("x/a", [P(0, "h100-80", 0, 1, 2)])  # fuller, but with larger GPUs
    assert schedule(workload(), snap, led, "bestFit").nodes == ["a100-40"]
    # a workload needing more memory than the small GPUs have goes to the large ones
    big = workload(minGPUMemoryMiB=60000)
    assert schedule(big, snap, led, "bestFit").placements == [P(0, "h100-80", 3)]


def test_best_fit_same_memory_then_packs() -> None:
    snap, led = cluster(
        node("a"), node("b"),
        gpunodes=(gpunode("a", memory=81920), gpunode("b", memory=81920)),
    )
    led.assume("x/a", [P(0, "b", 0, 1)])
    assert schedule(workload(gpusPerReplica=2), snap, led, "bestFit").placements == [
        P(0, "b", 2, 3)
    ]


def test_best_fit_packs_by_count_where_memory_is_not_reported() -> None:
    # "bare" has no GPUNode: memory unknown, so the count decides (the fuller node)
    snap, led = cluster(node("bare"), node("big"), gpunodes=(gpunode("big", memory=81920),))
    led.assume("x/a", [P(0, "big", 0, 1, 2)])
    assert schedule(workload(), snap, led, "bestFit").nodes == ["big"]


def test_best_fit_by_memory_in_device_plugin_mode() -> None:
    snap, led = cluster(
        node("small", 4), node("large", 4),
        gpunodes=(gpunode("small", memory=24576), gpunode("large", memory=81920)),
    )
    led.assume("x/a", [P(0, "large", 0, 1, 2)])
    w = workload(deviceExposure="device-plugin")
    d = schedule(w, snap, led, "bestFit")
    assert d.ok and d.counted and d.nodes == ["small"]


# ------------------------------------------------------------------- health


@pytest.mark.parametrize("strategy", SEARCH)
def test_unhealthy_devices_are_never_offered(strategy: str) -> None:
    ecc = fixture_gpunode("ecc", "a100-ecc-4")  # device 2 has uncorrected ECC errors
    assert [d["healthy"] for d in ecc["status"]["devices"]] == [True, True, False, True]
    snap, led = cluster(node("ecc", 4), gpunodes=(ecc,))
    for n in range(1, 4):
        d = schedule(workload(f"w{n}", replicas=n), snap, led, strategy)
        assert d.ok, d.message
        d.assume(led, workload(f"w{n}", replicas=n))
        assert all(2 not in p.devices for p in d.placements)
        led.forget(f"default/w{n}")
    d = schedule(workload(gpusPerReplica=4), snap, led, strategy)
    assert d.outcome == UNSCHEDULABLE and d.reasons == {"ecc": "3 free GPUs (1 unhealthy), needs 4"}


def test_unhealthy_devices_not_counted_in_device_plugin_mode() -> None:
    snap, led = cluster(node("n", 4), gpunodes=(gpunode("n", unhealthy=(0, 3)),))
    w = workload(gpusPerReplica=3, deviceExposure="device-plugin")
    assert schedule(w, snap, led).outcome == UNSCHEDULABLE
    assert schedule(workload(gpusPerReplica=2, deviceExposure="device-plugin"), snap, led).ok


def test_annotation_map_naming_an_unhealthy_device_is_refused() -> None:
    snap, led = cluster(node("n", 4), gpunodes=(gpunode("n", unhealthy=(1,)),))
    w = workload(schedulingStrategy="annotationMap", schedulingMap="0=n:1")
    d = schedule(w, snap, led)
    assert d.outcome == UNSCHEDULABLE and d.reasons == {"n": "replica 0: device 1 unhealthy"}


def test_device_turning_unhealthy_keeps_its_holder() -> None:
    g = gpunode("n")
    snap, led = cluster(node("n", 4), gpunodes=(g,))
    w = workload("holder", gpusPerReplica=2)
    d = schedule(w, snap, led)
    d.assume(led, w)
    held = d.placements[0].devices
    g2 = gpunode("n", unhealthy=(held[0],))
    snap.upsert_gpunode(g2)
    assert led.allocation("default/holder") is not None
    assert led.holder("n", held[0]) == "default/holder"
    d2 = schedule(workload("next", gpusPerReplica=2), snap, led)
    assert d2.ok and not set(d2.placements[0].devices) & {held[0], held[1]}
    d3 = schedule(workload("more", gpusPerReplica=3), snap, led)
    assert d3.outcome == UNSCHEDULABLE


# -------------------------------------------------------------------- staleness


def test_stale_gpunode_offers_nothing_and_says_why() -> None:
    fresh = fixture_gpunode("fresh", "pcie-4")
    old = stale_view(fixture_gpunode("old", "h100-sxm-8", NOW - timedelta(minutes=5)))
    snap, led = cluster(node("fresh", 4), node("old", 8), gpunodes=(fresh, old))
    for strategy in SEARCH:
        d = schedule(workload(gpusPerReplica=2), snap, led, strategy)
        assert d.nodes == ["fresh"], strategy
    d = schedule(workload(gpusPerReplica=6), snap, led)
    assert d.outcome == UNSCHEDULABLE
    assert d.reasons["old"] == STALE_REASON
    assert f"old: {STALE_REASON}" in d.message
    mapped = workload(schedulingStrategy="annotationMap", schedulingMap="0=old:0")
    assert schedule(mapped, snap, led).reasons == {"old": f"replica 0: {STALE_REASON}"}


def test_stale_gpunode_without_devices_offers_nothing() -> None:
    g = {"metadata": {"name": "n"}, "spec": {"nodeName": "n"}, "status": {}}
    snap, led = cluster(node("n", 4), gpunodes=(stale_view(g),))
    info = snap.get("n")
    assert info is not None and info.stale and info.usable == frozenset()
    assert schedule(workload(), snap, led).reasons == {"n": STALE_REASON}


def test_placement_state_turns_a_silent_node_stale_and_keeps_placements() -> None:
    now = [NOW]
    state = PlacementState(DeviceExposure.CUDA_VISIBLE_DEVICES, stale_after=30,
                           clock=lambda: now[0])
    g = fixture_gpunode("n1", "h100-sxm-8", NOW)
    state.rebuild(lambda: ([node("n1", 8)], [g], [], []))
    first = workload("first", gpusPerReplica=2)
    d = state.decide(first)
    assert d.ok
    state.commit(first.key)

    now[0] = NOW + timedelta(seconds=31)  # no heartbeat since
    state.refresh_stale()
    assert state.held_by(first.key)
    alloc = state.view().allocation(first.key)
    assert alloc is not None and list(alloc.placements) == d.placements
    d2 = state.decide(workload("second"))
    assert d2.outcome == UNSCHEDULABLE and d2.reasons == {"n1": STALE_REASON}

    # the agent reports again: offered again, minus what "first" holds
    state.events.on_gpunode(fixture_gpunode("n1", "h100-sxm-8", now[0]))
    d3 = state.decide(workload("third", gpusPerReplica=6))
    assert d3.ok and not set(d3.placements[0].devices) & set(d.placements[0].devices)


# --------------------------------------------------------------------- topology


def test_gang_on_nvlink_fixture_gets_connected_pairs() -> None:
    g = fixture_gpunode("h100", "h100-sxm-8")
    peers = {d["index"]: set(d["nvlinkPeers"]) for d in g["status"]["devices"]}
    snap, led = cluster(node("h100", 8), gpunodes=(g,))
    d = schedule(workload(replicas=4, gpusPerReplica=2, topology="Required"), snap, led)
    assert d.outcome == SCHEDULED
    used = [dev for p in d.placements for dev in p.devices]
    assert sorted(used) == list(range(8))
    for p in d.placements:
        a, b = p.devices
        assert b in peers[a] and a in peers[b]


PARTIAL = {0: [1], 1: [0], 2: [3], 3: [2]}  # two NVLink pairs, nothing across


def test_required_topology_only_takes_linked_sets() -> None:
    snap, led = cluster(node("n", 4), gpunodes=(gpunode("n", links=PARTIAL),))
    led.assume("x/a", [P(0, "n", 0)])  # breaks the 0-1 pair
    d = schedule(workload(gpusPerReplica=2, topology="Required"), snap, led)
    assert d.placements == [P(0, "n", 2, 3)]
    d.assume(led, workload(gpusPerReplica=2, topology="Required"))
    # 1 is free but its only peer is held: two GPUs do not fit, one does (needs no link)
    d2 = schedule(workload("b", gpusPerReplica=2, topology="Required"), snap, led)
    assert d2.outcome == UNSCHEDULABLE
    d3 = schedule(workload("c", topology="Required"), snap, led)
    assert d3.placements == [P(0, "n", 1)]


def test_required_topology_refuses_unlinked_sets_and_preferred_falls_back() -> None:
    snap, led = cluster(node("n", 4), gpunodes=(gpunode("n", links=PARTIAL),))
    led.assume("x/a", [P(0, "n", 0, 3)])  # free 1 and 2: not linked to each other
    req = schedule(workload(gpusPerReplica=2, topology="Required"), snap, led)
    assert req.outcome == UNSCHEDULABLE
    assert req.reasons == {"n": "no NVLink-connected set of 2 free GPUs"}
    pref = schedule(workload(gpusPerReplica=2, topology="Preferred"), snap, led)
    assert pref.placements == [P(0, "n", 1, 2)]


def test_preferred_topology_picks_the_linked_pair() -> None:
    snap, led = cluster(node("n", 4), gpunodes=(gpunode("n", links=PARTIAL),))
    led.assume("x/a", [P(0, "n", 0)])  # free 1, 2, 3: plain rule would take 1, 2
    pref = schedule(workload(gpusPerReplica=2, topology="Preferred"), snap, led)
    assert pref.placements == [P(0, "n", 2, 3)]
    none = schedule(workload(gpusPerReplica=2), snap, led)
    assert none.placements == [P(0, "n", 1, 2)]  # topology None: the plain rule


def test_required_topology_on_pcie_fixture_and_without_agent() -> None:
    snap, led = cluster(node("pcie", 4), node("bare", 4),
                        gpunodes=(fixture_gpunode("pcie", "pcie-4"),))
    d = schedule(workload(gpusPerReplica=2, topology="Required"), snap, led)
    assert d.outcome == UNSCHEDULABLE
    assert d.reasons == {"pcie": "no NVLink-connected set of 2 free GPUs",
                         "bare": "NVLink topology unknown (no GPUNode report)"}
    pref = schedule(workload(gpusPerReplica=2, topology="Preferred"), snap, led)
    assert pref.ok


def test_required_topology_across_the_fixture_is_always_a_clique() -> None:
    g = fixture_gpunode("h100", "h100-sxm-8")
    snap, led = cluster(node("h100", 8), gpunodes=(g,))
    peers = {d["index"]: set(d["nvlinkPeers"]) for d in g["status"]["devices"]}
    d = schedule(workload(gpusPerReplica=4, topology="Required"), snap, led)
    devs = d.placements[0].devices
    assert all(b in peers[a] for a, b in combinations(devs, 2))


# -------------------------------------------------------------------- trust


def test_gpunode_naming_another_node_is_ignored_with_a_reason() -> None:
    """Attack 3: a GPUNode ``evil`` claiming ``spec.nodeName: node1`` with 16 devices
    gives node1 nothing; node1 keeps its own 4 devices."""
    evil = {**gpunode("evil", 16), "spec": {"nodeName": "node1"}}
    snap, led = cluster(node("node1", 4), gpunodes=(evil,))
    assert sorted(snap.get("node1").devices) == [0, 1, 2, 3]
    assert "spec.nodeName 'node1' differs" in snap.ignored["evil"]
    why = snap.upsert_gpunode({**gpunode("evil2", 16), "spec": {"nodeName": "node1"}})
    assert why is not None and "evil2" in why
    assert len(snap.get("node1").devices) == 4
    assert not schedule(workload("big", gpusPerReplica=5), snap, led).ok


def test_gpunode_turning_untrustworthy_stops_counting() -> None:
    snap, _led = cluster(node("n", 4), gpunodes=(gpunode("n", 2),))
    assert len(snap.get("n").devices) == 2
    snap.upsert_gpunode({**gpunode("n", 8), "spec": {"nodeName": "other"}})
    assert len(snap.get("n").devices) == 4  # back to the allocatable
    assert "n" in snap.ignored


def test_deleting_a_gpunode_removes_its_devices_at_once() -> None:
    """Stored and removed under the same name: nothing phantom stays behind."""
    snap, _led = cluster(node("n", 4), gpunodes=(gpunode("n", 8),))
    assert len(snap.get("n").devices) == 8
    snap.remove_gpunode("n")
    assert sorted(snap.get("n").devices) == [0, 1, 2, 3]
