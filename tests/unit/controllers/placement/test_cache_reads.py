"""What the placement cache answers the reconcilers, the claim controller and the
metrics: a node's devices and their UUIDs, the GPUs used per node, the shares and
holders of each device, a DRA allocation's results, a claim marked as going, and
the ledger's read-only questions (never one that changes it). Pure: no server."""

from __future__ import annotations

import random

import pytest

from api.v1alpha1.types import DeviceExposure
from controllers.placement.state import PlacementState
from internal.scheduling.holdings import Allocation, DeviceUse
from tests.unit.controllers.placement.test_placement_state import NODES, World, gw, pod
from tests.unit.controllers.placement.test_placement_state_dra import state as dra_state
from tests.unit.scheduling.helpers import gpunode, node


def with_gpunodes() -> PlacementState:
    s = PlacementState(DeviceExposure.CUDA_VISIBLE_DEVICES, rng=random.Random(3))
    s.rebuild(lambda: ([*NODES, node("empty", 0)], [gpunode("node1", 4)], [], []))
    return s


def test_a_nodes_devices_and_uuids_come_from_its_records() -> None:
    s = with_gpunodes()
    assert s.has_node("node1") and not s.has_node("gone")
    assert s.node_devices("node1") == frozenset({0, 1, 2, 3})
    assert s.node_devices("gone") is None
    assert s.node_devices("empty") is None  # no device known yet
    assert s.uuids("node1", [3, 1]) == ["GPU-node1-3", "GPU-node1-1"]
    assert s.uuids("node2", [0]) is None  # no GPUNode: no UUIDs
    assert s.uuids("gone", [0]) is None


def test_the_gpus_used_per_node_count_every_holder() -> None:
    w = World(pods=[pod("a", "node1", devices="0,1"), pod("b", "node1", gpus=1)])
    assert w.state.node_gpus() == ({"node1": 4, "node2": 4}, {"node1": 3, "node2": 0})


def test_each_held_device_reports_its_shares_and_holders() -> None:
    shared = pod("half", "node2", devices="2")
    shared["metadata"]["annotations"]["gpu.orchestrator.dev/share"] = "fraction=0.5"
    w = World(pods=[pod("whole", "node1", devices="1"), shared])
    assert w.state.device_shares() == [("node2", 2, 0.5, None)]
    assert w.state.device_use() == [("node1", 1, DeviceUse("whole", ("ns/whole",))),
                                    ("node2", 2, DeviceUse("share", ("ns/half",)))]


def test_dra_allocation_results_name_the_published_devices() -> None:
    s = dra_state([])
    assert s.slice_results("node1", [1, 0], "gpu") == [
        {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "node1", "device": "gpu-1"},
        {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "node1", "device": "gpu-0"}]
    assert s.slice_results("node1", [0, 5], "gpu") is None  # device 5 is not published
    assert World().state.slice_results("node1", [0], "gpu") is None  # DRA off


def test_a_claim_is_marked_going_unless_its_workloads_booking_keeps_it() -> None:
    w = World()
    assert w.state.decide(gw("a", gpusPerReplica=2)).ok
    seen: list[Allocation | None] = []

    def keeps(booking: Allocation | None) -> bool:
        seen.append(booking)
        return booking is not None and booking.placements[0].node == "elsewhere"

    assert w.state.release_claim_unless("uid-c1", "ns/a", keeps) is True
    assert seen[0] is not None and seen[0].key == "ns/a" and seen[0].uid == "uid-a"
    assert w.state.claim_going("uid-c1") and not w.state.claim_going("uid-c2")
    assert w.state.release_claim_unless("uid-c2", "ns/a", lambda b: b is not None) is False
    assert not w.state.claim_going("uid-c2")
    w.state.claim_gone("uid-c1")
    assert not w.state.claim_going("uid-c1")


def test_the_ledgers_questions_are_asked_but_no_change() -> None:
    w = World(pods=[pod("a", "node1", devices="0")])
    owners = w.state.ledger_read("device_owners")
    assert owners(node="node1", device=0) == {"pod:uid-a"}
    with pytest.raises(AttributeError, match=r"^assume$"):
        w.state.ledger_read("assume")
