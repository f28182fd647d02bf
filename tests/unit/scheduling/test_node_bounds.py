"""A node that reports more than a node may have (internal/scheduling/bounds.py) is
refused: it offers nothing, is named in why-pending, and every other node goes on
being placed on at once; a node's devices are never built one by one past the
bound. A whole-GPU map naming a MIG-enabled device is refused by the filters, in
the words the seed path uses, never left to the ledger."""

from __future__ import annotations

import time
from typing import Any

from internal.scheduling import Ledger, Snapshot, schedule
from internal.scheduling.bounds import MAX_GPUS_PER_NODE, MAX_MIG_INSTANCES
from internal.scheduling.outcome import UNSCHEDULABLE
from internal.scheduling.resourceslices import SliceInventory
from tests.unit.scheduling.helpers import DRA_DRIVER, cluster, dra_slice, gpunode, node, workload

MILLION = 1_000_000


def _migs(n: int) -> list[dict[str, Any]]:
    return [{"uuid": f"MIG-{i:08x}-0000-4000-8000-000000000000", "profile": "1g.10gb",
             "memoryTotalMiB": 9984} for i in range(n)]


def test_a_node_reporting_a_million_gpus_offers_none_and_is_named_in_why_pending() -> None:
    snap, ledger = cluster(node("n1", 2), node("n9", MILLION))
    info = snap.get("n9")
    assert info is not None and info.devices == {} and ledger.usable("n9") == frozenset()
    assert info.refused == f"reports {MILLION} GPUs, more than {MAX_GPUS_PER_NODE}; excluded"
    d = schedule(workload("big", gpusPerReplica=4), snap, ledger)
    assert not d.ok and d.outcome == UNSCHEDULABLE
    assert f"n9: reports {MILLION} GPUs, more than 64; excluded" in d.message
    assert "n1: 2 free GPUs, needs 4" in d.message


def test_other_nodes_are_placed_on_at_once_beside_a_million_gpu_node() -> None:
    started = time.perf_counter()
    snap, ledger = cluster(node("n1", 2), node("n9", MILLION))
    share = schedule(workload("share", gpuShare={"fraction": "0.5"}), snap, ledger)
    whole = schedule(workload("whole"), snap, ledger)
    took = time.perf_counter() - started
    assert share.ok and share.placements[0].node == "n1", share.message
    assert whole.ok and whole.placements[0].node == "n1", whole.message
    assert took < 1.0, f"a snapshot and two decisions took {took:.2f} s"


def test_the_bound_is_the_managers_flag_and_inclusive() -> None:
    snap = Snapshot.build([node("ok", 8), node("over", 9)], ledger=Ledger(), max_gpus=8)
    assert len(snap.get("ok").devices) == 8 and not snap.get("ok").refused
    assert snap.get("over").refused == "reports 9 GPUs, more than 8; excluded"


def test_a_gpunode_listing_too_many_devices_mig_instances_or_peers_is_refused() -> None:
    fine = gpunode("fine", MAX_GPUS_PER_NODE)
    many = gpunode("many", MAX_GPUS_PER_NODE + 1)
    mig = gpunode("mig", 2)
    mig["status"]["devices"][1].update(migMode=True, migInstances=_migs(MAX_MIG_INSTANCES + 1))
    mig7 = gpunode("mig7", 2)
    mig7["status"]["devices"][1].update(migMode=True, migInstances=_migs(MAX_MIG_INSTANCES))
    peers = gpunode("peers", 2, links={0: list(range(1, MAX_GPUS_PER_NODE + 2))})
    names = ["fine", "many", "mig", "mig7", "peers"]
    snap, ledger = cluster(*(node(n, 2) for n in names),
                           gpunodes=(fine, many, mig, mig7, peers))
    refused = {n: snap.get(n).refused for n in names}
    assert refused == {
        "fine": "", "mig7": "",
        "many": "reports 65 GPUs, more than 64; excluded",
        "mig": "device 1 reports 8 MIG instances, more than 7; excluded",
        "peers": "device 0 reports 65 NVLink peers, more than 64; excluded"}
    assert ledger.usable("fine") == frozenset(range(64))
    assert ledger.usable("many") == ledger.usable("mig") == frozenset()


def test_a_refusal_is_taken_once_and_lifted_when_the_node_reports_sanely() -> None:
    snap, ledger = cluster(node("n1", MILLION))
    (raw, why, source), = snap.take_refused()
    assert raw["metadata"]["name"] == "n1" and "1000000 GPUs" in why
    assert source == "its Node's status nvidia.com/gpu"
    snap.upsert_node(node("n1", MILLION))  # the same report again: said once
    assert snap.take_refused() == []
    snap.upsert_gpunode(gpunode("n1", 4))  # its GPUNode now says what it has
    assert not snap.get("n1").refused and ledger.usable("n1") == frozenset(range(4))
    assert snap.refused == {}
    snap.upsert_gpunode(gpunode("n1", 100))
    (_, why, source), = snap.take_refused()
    assert (why, source) == ("reports 100 GPUs, more than 64; excluded",
                             "its GPUNode's status.devices")


def test_a_whole_gpu_map_naming_a_mig_enabled_device_is_unschedulable_with_a_reason() -> None:
    g = gpunode("n1", 2)
    g["status"]["devices"][0].update(migMode=True, migInstances=_migs(7))
    snap, ledger = cluster(node("n1", 2), gpunodes=(g,))
    d = schedule(workload("m", schedulingStrategy="annotationMap", schedulingMap="0=n1:0"),
                 snap, ledger)
    assert not d.ok and d.outcome == UNSCHEDULABLE
    assert "device 0 MIG-enabled: offered only as MIG instances (spec.migProfile)" in d.message
    ok = schedule(workload("w", schedulingStrategy="annotationMap", schedulingMap="0=n1:1"),
                  snap, ledger)
    assert ok.ok, ok.message


def test_resourceslices_publishing_too_many_gpus_refuse_their_node() -> None:
    inv = SliceInventory(DRA_DRIVER)
    inv.upsert(dra_slice("n1", 8))
    inv.upsert(dra_slice("n2", MAX_GPUS_PER_NODE + 1))
    snap = Snapshot.build([node("n1", 8), node("n2", 8)],
                          [inv.view("n1", None), inv.view("n2", None)], Ledger())
    assert snap.get("n1").refused == "" and len(snap.get("n1").devices) == 8
    assert snap.refused == {"n2": ("reports 65 GPUs, more than 64; excluded",
                                   "its ResourceSlices")}
