"""Scheduler-side inventory: staleness, the allocatable fallback, and that both feed
the scheduling snapshot as expected."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from api.v1alpha1.types import GPUNode
from internal.agent.nvml import FixtureBackend, sample
from internal.agent.status import gpunode_for, new_gpunode
from internal.scheduling.inventory import (
    SOURCE_ANNOTATION,
    fallback_gpunode,
    heartbeat,
    is_stale,
    parse_time,
    scheduling_view,
    stale_view,
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


# ----------------------------------------------- the fallback and the stale view


def test_fallback_is_a_gpunode_like_the_agents_own() -> None:
    g = fallback_gpunode(_node("n1", 3))
    agent = new_gpunode("n1")
    assert (g["apiVersion"], g["kind"]) == (agent["apiVersion"], agent["kind"])
    assert g["metadata"]["name"] == "n1" and g["spec"] == agent["spec"]
    assert g["metadata"]["annotations"] == {SOURCE_ANNOTATION: "allocatable"}
    model = GPUNode.model_validate(g)
    assert model.node_name == "n1"
    assert model.status.device_count == 3 and model.status.healthy_count == 3
    assert [(d.index, d.healthy, d.nvlink_peers) for d in model.status.devices] == [
        (0, True, []), (1, True, []), (2, True, [])]
    assert model.status.topology_known is False


def test_fallback_of_a_node_without_gpus_or_name() -> None:
    g = fallback_gpunode({"status": {"capacity": {"nvidia.com/gpu": "2"}}})
    assert g["metadata"]["name"] == "" and g["spec"] == {"nodeName": ""}
    assert len(g["status"]["devices"]) == 2  # capacity when allocatable says nothing
    empty = fallback_gpunode({"metadata": {"name": "cpu"}})
    assert empty["status"]["devices"] == [] and empty["status"]["deviceCount"] == 0


@given(gpus=st.integers(0, 16))
def test_the_fallback_offers_what_no_gpunode_at_all_offers(gpus: int) -> None:
    raw = _node("n", gpus)
    without = Snapshot.build([raw]).get("n")
    with_fallback = Snapshot.build([raw], [fallback_gpunode(raw)]).get("n")
    assert without is not None and with_fallback is not None
    assert with_fallback.devices == without.devices
    assert with_fallback.usable == frozenset(range(gpus))
    assert not with_fallback.topology_known and not with_fallback.stale


def test_stale_view_marks_every_device_not_healthy_and_keeps_the_rest() -> None:
    g = _gpunode("n1", "h100-sxm-8", NOW)
    g["metadata"]["annotations"] = {"team": "ml"}
    view = stale_view(g)
    assert [d["healthy"] for d in view["status"]["devices"]] == [False] * 8
    assert [d["uuid"] for d in view["status"]["devices"]] == [
        d["uuid"] for d in g["status"]["devices"]]
    assert view["status"]["healthyCount"] == 0 and view["status"]["deviceCount"] == 8
    assert view["metadata"]["annotations"] == {"team": "ml", SOURCE_ANNOTATION: "stale"}
    # the original is not touched
    assert all(d["healthy"] for d in g["status"]["devices"])
    assert g["metadata"]["annotations"] == {"team": "ml"}


def test_stale_view_of_a_gpunode_that_never_reported() -> None:
    g = new_gpunode("n1")
    with_node = stale_view(g, _node("n1", 2))
    assert with_node["status"]["devices"] == [
        {"index": 0, "healthy": False, "nvlinkPeers": []},
        {"index": 1, "healthy": False, "nvlinkPeers": []},
    ]
    assert stale_view(g)["status"]["devices"] == []
    assert "status" not in g


def test_scheduling_view_by_heartbeat_age() -> None:
    node = _node("n1", 4)
    fresh = _gpunode("n1", "pcie-4", NOW - timedelta(seconds=60))
    assert scheduling_view(node, fresh, NOW, 60) == fresh  # exactly the threshold
    assert scheduling_view(node, fresh, NOW) == fresh  # default: 90 s
    stale = scheduling_view(node, fresh, NOW + timedelta(seconds=31))
    assert stale["metadata"]["annotations"][SOURCE_ANNOTATION] == "stale"
    assert scheduling_view(node, None, NOW) == fallback_gpunode(node)


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        ("2025-03-01T11:59:00Z", datetime(2025, 3, 1, 11, 59, tzinfo=UTC)),
        ("2025-03-01t11:59:00z", datetime(2025, 3, 1, 11, 59, tzinfo=UTC)),
        ("2025-03-01T11:59:00.250Z", datetime(2025, 3, 1, 11, 59, 0, 250000, tzinfo=UTC)),
        ("2025-03-01T13:59:00+02:00", datetime(2025, 3, 1, 11, 59, tzinfo=UTC)),
        ("2025-03-01T11:59:00", datetime(2025, 3, 1, 11, 59, tzinfo=UTC)),  # naive is UTC
        (datetime(2025, 3, 1, 11, 59), datetime(2025, 3, 1, 11, 59, tzinfo=UTC)),
        ("", None),
        (None, None),
        (1740830340, None),
        ("yesterday", None),
    ],
)
def test_heartbeat_times(value: Any, parsed: datetime | None) -> None:
    got = parse_time(value)
    assert got == parsed
    if got is not None:
        assert got.tzinfo is not None
    assert heartbeat({"status": {"lastHeartbeatTime": value}}) == parsed


def test_an_aware_heartbeat_keeps_its_offset() -> None:
    plus2 = timezone(timedelta(hours=2))
    t = datetime(2025, 3, 1, 13, 59, tzinfo=plus2)
    assert parse_time(t) == datetime(2025, 3, 1, 11, 59, tzinfo=UTC)
    assert not is_stale({"status": {"lastHeartbeatTime": t}}, NOW, 90)


def test_scheduling_view_uses_the_threshold_given() -> None:
    node = _node("n1", 4)
    g = _gpunode("n1", "pcie-4", NOW - timedelta(seconds=60))
    assert scheduling_view(node, g, NOW, 90) == g
    stale = scheduling_view(node, g, NOW, 30)
    assert stale["metadata"]["annotations"][SOURCE_ANNOTATION] == "stale"
    assert stale["status"]["healthyCount"] == 0


def test_scheduling_view_of_a_silent_agent_lists_the_nodes_gpus_unhealthy() -> None:
    view = scheduling_view(_node("n1", 2), new_gpunode("n1"), NOW)
    assert [(d["index"], d["healthy"]) for d in view["status"]["devices"]] == [
        (0, False), (1, False)]


def test_stale_view_of_a_gpunode_without_metadata() -> None:
    view = stale_view({"status": {"devices": [{"index": 0, "healthy": True}]}})
    assert view["metadata"] == {"annotations": {SOURCE_ANNOTATION: "stale"}}
    assert view["status"]["devices"] == [{"index": 0, "healthy": False}]


def test_the_fallback_ignores_an_unreadable_gpu_count() -> None:
    node = _node("n1", 0)
    node["status"]["allocatable"]["nvidia.com/gpu"] = "lots"
    assert fallback_gpunode(node)["status"]["devices"] == []
    node["status"]["allocatable"]["nvidia.com/gpu"] = "-2"
    assert fallback_gpunode(node)["status"]["deviceCount"] == 0
