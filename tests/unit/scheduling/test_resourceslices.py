"""ResourceSlices as inventory, allocated claims as holders (pure)."""

from __future__ import annotations

import pytest

from api.v1alpha1.types import GPUWorkload, Placement
from internal.scheduling import Ledger, LedgerConflict
from internal.scheduling.framework import NO_SLICES_REASON, schedule
from internal.scheduling.resourceslices import (
    BadClaim,
    SliceInventory,
    claim_holding,
    results_for,
)
from internal.scheduling.snapshot import Snapshot
from tests.unit.scheduling.helpers import dra_claim as claim
from tests.unit.scheduling.helpers import dra_slice as rslice
from tests.unit.scheduling.helpers import node

DRIVER = "gpu.nvidia.com"


def test_inventory_reads_nvidia_shaped_slices_newest_generation_only() -> None:
    inv = SliceInventory(DRIVER)
    inv.upsert(rslice("node1", 4, generation=1))
    inv.upsert(rslice("node1", 2, generation=2))  # the driver replaced the pool
    inv.upsert(rslice("node2", 8, driver="other.example.com"))
    assert sorted(inv.devices("node1")) == [0, 1]
    d = inv.devices("node1")[1]
    assert (d.name, d.uuid, d.model, d.memory_mib, d.pool) == \
        ("gpu-1", "GPU-node1-1", "NVIDIA H100", 80 * 1024, "node1")
    assert inv.nodes() == {"node1"}
    view = inv.view("node1", None)
    assert view is not None
    assert [x["uuid"] for x in view["status"]["devices"]] == ["GPU-node1-0", "GPU-node1-1"]
    assert inv.view("node2", None) is None


def test_view_keeps_the_agents_health_for_the_same_index() -> None:
    inv = SliceInventory(DRIVER)
    inv.upsert(rslice("node1", 2))
    agent = {"metadata": {"name": "node1"}, "status": {"devices": [
        {"index": 0, "healthy": True, "utilization": 50},
        {"index": 1, "healthy": False}], "topologyKnown": True}}
    snap = Snapshot.build([node("node1")], [inv.view("node1", agent)])
    info = snap.get("node1")
    assert info is not None and info.dra_driver == DRIVER
    assert info.usable == frozenset({0})  # device 1 reported unhealthy by the agent
    assert info.devices[0].memory_total_mib == 80 * 1024


def test_an_allocated_claim_holds_its_devices_against_every_other_owner() -> None:
    inv = SliceInventory(DRIVER)
    inv.upsert(rslice("node1", 4))
    h = claim_holding(claim("k1", "node1", "gpu-2"), inv)
    assert h is not None and (h.key, h.node, h.devices) == ("claim:k1", "node1", (2,))
    led = Ledger()
    led.set_node_devices("node1", range(4))
    assert led.set_pod(h) == []
    assert led.free_count("node1") == 3
    with pytest.raises(LedgerConflict, match="claim ns/c-k1"):
        led.assume("ns/w", [Placement(index=0, node="node1", devices=[2])])
    assert led.remove_holder("claim:k1") and led.free_count("node1") == 4


def test_our_claim_shares_its_attempts_owner() -> None:
    inv = SliceInventory(DRIVER)
    inv.upsert(rslice("node1", 4))
    ref = {"apiVersion": "gpu.orchestrator.dev/v1alpha1", "kind": "GPUWorkload",
           "name": "w", "uid": "W", "controller": True}
    h = claim_holding(claim("k1", "node1", "gpu-1", owner=ref, attempt="2"), inv)
    assert h is not None and h.owner == "W#2"
    led = Ledger()
    led.set_node_devices("node1", range(4))
    led.set_pod(h)
    led.assume("ns/w", [Placement(index=0, node="node1", devices=[1])], owner="W#2")
    with pytest.raises(LedgerConflict):
        led.assume("ns/x", [Placement(index=0, node="node1", devices=[1])], owner="W#3")


def test_unallocated_or_unplaceable_claims() -> None:
    inv = SliceInventory(DRIVER)
    assert claim_holding({"metadata": {"uid": "u"}, "status": {}}, inv) is None
    bad = claim("k", "node1", "mig-1g")
    with pytest.raises(BadClaim):
        claim_holding(bad, inv)
    # not (or no longer) published: NVIDIA's names still place it
    h = claim_holding(claim("k", "node9", "gpu-3"), inv)
    assert h is not None and (h.node, h.devices) == ("node9", (3,))


def test_results_name_driver_pool_and_device() -> None:
    inv = SliceInventory(DRIVER)
    inv.upsert(rslice("node1", 4))
    assert results_for(inv, "node1", [1, 3], "gpus") == [
        {"request": "gpus", "driver": DRIVER, "pool": "node1", "device": "gpu-1"},
        {"request": "gpus", "driver": DRIVER, "pool": "node1", "device": "gpu-3"}]
    assert results_for(inv, "node1", [7], "gpus") is None


def test_dra_workload_skips_nodes_without_slices_with_a_reason_per_node() -> None:
    inv = SliceInventory(DRIVER)
    inv.upsert(rslice("node2", 4))
    led = Ledger()
    snap = Snapshot.build([node("node1"), node("node2")], [inv.view("node2", None)], led)
    w = GPUWorkload.model_validate({"metadata": {"name": "w", "namespace": "ns", "uid": "u"},
                                    "spec": {"gpusPerReplica": 4, "deviceExposure": "dra"}})
    d = schedule(w, snap, led)
    assert d.ok and d.placements[0].node == "node2"
    led.assume("ns/other", [Placement(index=0, node="node2", devices=[0, 1, 2, 3])])
    d = schedule(w, snap, led)
    assert not d.ok
    assert d.reasons["node1"] == NO_SLICES_REASON


def test_a_late_delete_of_an_older_slice_of_the_same_name_forgets_nothing() -> None:
    inv = SliceInventory(DRIVER)
    new = rslice("n1", 2, name="s")
    new["metadata"]["uid"] = "new"
    assert inv.upsert(new) == "n1"
    old = rslice("n1", 2, name="s")
    old["metadata"]["uid"] = "old"
    assert inv.remove(old) is None
    assert inv.nodes() == {"n1"}
    assert inv.remove(new) == "n1"
    assert inv.nodes() == set()
    assert inv.remove(new) is None


def test_a_memory_share_is_placed_from_the_slices_memory_without_a_gpunode() -> None:
    """docs/api.md: a memory share needs the device's memory reported by its GPUNode
    or by the DRA driver's ResourceSlice. A node with a slice and no GPUNode takes
    the share; a node with neither report is not offered it."""
    inv = SliceInventory(DRIVER)
    inv.upsert(rslice("node1", 1))
    snap = Snapshot.build([node("node1", 1), node("node2", 1)], [inv.view("node1", None)])
    w = GPUWorkload.model_validate({"metadata": {"name": "w", "namespace": "default"},
                                    "spec": {"image": "x", "gpuShare": {"memory": "60Gi"}}})
    d = schedule(w, snap, Ledger())
    assert d.ok and [(p.node, p.devices) for p in d.placements] == [("node1", [0])]
    alone = Snapshot.build([node("node2", 1)], [])
    assert not schedule(w, alone, Ledger()).ok  # no report of node2's memory
