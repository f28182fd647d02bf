"""A Node or GPUNode event that changes nothing the scheduler reads (a kubelet's or an
agent's heartbeat) stamps no node: a scheduling pass made outside the placement lock
meanwhile stays valid, and the free-capacity index is left alone. Before, every such
event stamped its node, so at 1,000 nodes heartbeating every 10 s (100 events a
second) any pass that books nothing or is held to a queue's quota (``changed_since``:
any change anywhere) was stale, and made again under the lock; and the 10 s
staleness check (``PlacementState.refresh_stale``) stamped every node with a
GPUNode."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from api.v1alpha1.types import DeviceExposure
from controllers.placement.state import PlacementState
from internal.scheduling import Ledger, Snapshot
from internal.scheduling.snapshot import DeviceInfo
from tests.unit.scheduling.helpers import gpunode, node


def beat(obj: dict[str, Any], when: str) -> dict[str, Any]:
    """``obj`` as its next heartbeat writes it: only the heartbeat times move."""
    status = obj.setdefault("status", {})
    status["lastHeartbeatTime"] = when
    for c in status.get("conditions") or ():
        c["lastHeartbeatTime"] = when
    obj.setdefault("metadata", {})["resourceVersion"] = when
    return obj


def cluster(n: int) -> tuple[Snapshot, Ledger]:
    ledger = Ledger()
    snap = Snapshot(ledger)
    for i in range(n):
        snap.upsert_gpunode(beat(gpunode(f"node{i}", 8), "2999-01-01T00:00:00Z"))
        snap.upsert_node(beat(node(f"node{i}", 8), "2026-01-01T00:00:00Z"))
    return snap, ledger


def test_node_heartbeats_stamp_no_node_and_leave_a_pass_valid() -> None:
    snap, ledger = cluster(1000)
    mark = ledger.stamps.mark()
    for i in range(1000):
        snap.upsert_node(beat(node(f"node{i}", 8), "2026-01-01T00:00:10Z"))
    assert not ledger.stamps.changed_since(mark)
    assert ledger.stamps.changed(mark, ["node7"]) == []


def test_gpunode_heartbeats_with_the_same_report_stamp_no_node() -> None:
    snap, ledger = cluster(1000)
    mark = ledger.stamps.mark()
    for i in range(1000):
        snap.upsert_gpunode(beat(gpunode(f"node{i}", 8), "2999-01-01T00:00:10Z"))
    assert not ledger.stamps.changed_since(mark)


def test_a_change_the_scheduler_reads_still_stamps_its_node() -> None:
    snap, ledger = cluster(3)
    for changed in (node("node1", 8, labels={"zone": "b"}), node("node1", 8, ready=False),
                    node("node1", 8, unschedulable=True)):
        mark = ledger.stamps.mark()
        snap.upsert_node(changed)
        assert ledger.stamps.changed(mark, ["node0", "node1"]) == ["node1"]
    mark = ledger.stamps.mark()
    snap.upsert_gpunode(gpunode("node2", 8, unhealthy=(3,)))
    assert ledger.stamps.changed(mark, ["node2"]) == ["node2"]
    assert 3 not in ledger.usable("node2")


def test_a_heartbeat_keeps_the_node_record_it_had() -> None:
    """Readers hold a ``NodeInfo`` without the lock; an equal one is not swapped in."""
    snap, _ = cluster(2)
    before = snap.get("node1")
    snap.upsert_node(beat(node("node1", 8), "2026-01-01T00:01:00Z"))
    assert snap.get("node1") is before



def test_the_staleness_check_rebuilds_only_the_nodes_whose_agent_fell_silent() -> None:
    """``refresh_stale`` runs every 10 s under the placement lock; with 1,000 agents
    reporting it rebuilt all 1,000 node records there (286 ms at load 14), now none."""
    now = [datetime(2026, 1, 1, tzinfo=UTC)]
    state = PlacementState(DeviceExposure.CUDA_VISIBLE_DEVICES, stale_after=30,
                           clock=lambda: now[0])
    agents = [beat(gpunode(f"node{i}", 8), "2026-01-01T00:00:00Z") for i in range(1000)]
    agents[7] = beat(gpunode("node7", 8), "2025-12-31T23:59:50Z")  # ten seconds behind
    state.rebuild(lambda: ([node(f"node{i}", 8) for i in range(1000)], agents, [], []))
    node1 = state.view().node("node1")

    now[0] += timedelta(seconds=15)  # every heartbeat within 30 s
    _, mark = state.mark_pass()
    state.refresh_stale()
    assert not mark.of.changed_since(mark)
    assert state.view().node("node1") is node1

    now[0] += timedelta(seconds=10)  # node7's is 35 s old, the others' 25 s
    _, mark = state.mark_pass()
    state.refresh_stale()
    assert mark.of.changed(mark, ["node1", "node7"]) == ["node7"]
    node7 = state.view().node("node7")
    assert node7 is not None and node7.stale and node7.usable == frozenset()
    assert state.view().node("node1") is node1


def test_nodes_without_an_agent_share_their_device_records() -> None:
    """A device known only from allocatable is the same frozen record on every node
    (8,000 ``DeviceInfo`` at 1,000 nodes of 8 GPUs, about 0.9 MiB, were 16)."""
    snap = Snapshot.build([node(f"node{i}", 8) for i in range(1000)] +
                          [node("silent", 8)], [gpunode("agent", 8)])
    snap.upsert_node(node("agent", 8))
    plain = {id(d) for i in range(1000) for d in snap.get(f"node{i}").devices.values()}
    assert len(plain) == 8
    assert snap.get("node3").devices == {i: DeviceInfo(i) for i in range(8)}
    assert snap.get("agent").devices[0].uuid == "GPU-agent-0"  # an agent's are its own
