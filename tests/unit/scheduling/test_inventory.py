"""Scheduler-side inventory: staleness, the allocatable fallback, and that both feed
the scheduling snapshot as expected."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from internal.agent.nvml import FixtureBackend, sample
from internal.agent.status import gpunode_for, new_gpunode
from internal.scheduling.inventory import (
    fallback_gpunode,
    is_stale,
    scheduling_view,
)
from internal.scheduling.snapshot import Snapshot

NOW = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)


def _node(name: str, gpus: int | None) -> dict[str, Any]:
    alloc = {"cpu": "8"} if gpus is None else {"cpu": "8", "nvidia.com/gpu": str(gpus)}
    return {
        "metadata": {"name": name},
        "spec": {},
        "status": {"allocatable": alloc, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def _gpunode(name: str, fixture: str, heartbeat: datetime) -> dict[str, Any]:
    return gpunode_for(name, sample(FixtureBackend.load(fixture)), heartbeat)


def test_is_stale() -> None:
    g = {"status": {"lastHeartbeatTime": "2025-03-01T11:59:00Z"}}
    assert not is_stale(g, NOW, timedelta(seconds=90))
    assert is_stale(g, NOW, 30)
    assert not is_stale(g, NOW, 60)  # exactly the threshold is still fresh
    assert is_stale({"status": {}}, NOW, 60)  # never reported
    assert is_stale({}, NOW, 60)
    assert is_stale({"status": {"lastHeartbeatTime": "garbage"}}, NOW, 60)
    assert not is_stale(
        {"status": {"lastHeartbeatTime": "2025-03-01T12:00:05.5+00:00"}},
        NOW.replace(tzinfo=None),
        1,
    )  # naive now is UTC; future is fresh


def test_fallback_lists_allocatable_devices() -> None:
    g = fallback_gpunode(_node("n1", 4))
    assert [d["index"] for d in g["status"]["devices"]] == [0, 1, 2, 3]
    assert g["status"]["topologyKnown"] is False
    assert fallback_gpunode(_node("n2", None))["status"]["devices"] == []


def test_views_feed_the_scheduling_snapshot() -> None:
    nodes = [_node("fresh", 8), _node("stale", 4), _node("noagent", 2), _node("ecc", 4)]
    gpunodes = {
        "fresh": _gpunode("fresh", "h100-sxm-8", NOW - timedelta(seconds=5)),
        "stale": _gpunode("stale", "pcie-4", NOW - timedelta(minutes=10)),
        "ecc": _gpunode("ecc", "a100-ecc-4", NOW),
    }
    views = [scheduling_view(n, gpunodes.get(n["metadata"]["name"]), NOW, 60) for n in nodes]
    snap = Snapshot.build(nodes, views)
    fresh = snap.get("fresh")
    assert fresh is not None and fresh.usable == frozenset(range(8)) and fresh.topology_known
    assert fresh.devices[3].nvlink_peers == frozenset({0, 1, 2, 4, 5, 6, 7})
    assert fresh.devices[0].memory_total_mib == 81559
    stale = snap.get("stale")
    assert stale is not None and len(stale.devices) == 4 and stale.usable == frozenset()
    noagent = snap.get("noagent")
    assert noagent is not None and noagent.usable == frozenset({0, 1})
    assert not noagent.topology_known
    ecc = snap.get("ecc")
    assert ecc is not None and ecc.usable == frozenset({0, 1, 3})


def test_stale_gpunode_without_devices_still_offers_nothing() -> None:
    g = new_gpunode("n1")  # created, never reported
    view = scheduling_view(_node("n1", 4), g, NOW, 60)
    snap = Snapshot.build([_node("n1", 4)], [view])
    info = snap.get("n1")
    assert info is not None and len(info.devices) == 4 and info.usable == frozenset()
