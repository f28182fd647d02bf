"""The placement state with DRA on: slices become a node's devices, allocated claims
hold theirs, and a released claim wakes what waits (pure: no server)."""

from __future__ import annotations

from typing import Any

from api.v1alpha1.types import DeviceExposure, GPUWorkload
from controllers.placement.state import PlacementState
from tests.unit.scheduling.helpers import dra_claim as claim
from tests.unit.scheduling.helpers import dra_slice as rslice
from tests.unit.scheduling.helpers import node


def wl(name: str, gpus: int) -> GPUWorkload:
    return GPUWorkload.model_validate({
        "metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}"},
        "spec": {"gpusPerReplica": gpus, "deviceExposure": "dra"}})


def state(woken: list[str]) -> PlacementState:
    s = PlacementState(DeviceExposure.CUDA_VISIBLE_DEVICES, dra_driver="gpu.nvidia.com",
                       enqueue_waiting=lambda keys: woken.extend(keys))
    s.rebuild(lambda: ([node("node1", 4)], [], [], []), lambda: ([rslice("node1", 2)], []))
    return s


def test_slices_are_the_nodes_devices_and_claims_hold_theirs() -> None:
    woken: list[str] = []
    s = state(woken)
    info = s.node_info("node1")
    assert info is not None and sorted(info.devices) == [0, 1]  # the driver's 2, not 4
    theirs: dict[str, Any] = claim("k1", "node1", "gpu-0")
    s.events.on_claim(theirs)
    d = s.decide(wl("a", 1))
    assert d.ok and d.placements[0].devices == [1]
    assert not s.decide(wl("b", 1)).ok
    s.pending.update({"metadata": {"name": "b", "namespace": "ns"}, "status": {
        "conditions": [{"type": "Scheduled", "status": "False"}]}})  # tried, waits
    theirs["status"] = {}  # deallocated (as kube-controller-manager would)
    s.events.on_claim(theirs)
    assert "ns/b" in woken
    assert s.decide(wl("b", 1)).placements[0].devices == [0]


def test_a_slice_published_later_makes_the_node_a_dra_node() -> None:
    s = state([])
    s.events.on_resourceslice(rslice("node2", 8))
    assert s.node_info("node2") is None  # no Node object yet
    s.events.on_node(node("node2", 8))
    info = s.node_info("node2")
    assert info is not None and info.dra_driver == "gpu.nvidia.com" and len(info.devices) == 8
    s.events.on_resourceslice_deleted(rslice("node2", 8))
    info = s.node_info("node2")
    assert info is not None and not info.dra_driver


def test_a_claim_on_a_held_device_is_reported_once_as_a_conflict() -> None:
    """Two allocated claims name the same device: the later one is reported as a
    DeviceConflict (Event and the conflicts metric, action ``reported``); the handler
    does not raise, so the event is not lost and the state stays usable."""
    from internal.metrics.domain import DEVICE_CONFLICTS
    seen: list[tuple[str, str]] = []
    s = PlacementState(DeviceExposure.CUDA_VISIBLE_DEVICES, dra_driver="gpu.nvidia.com",
                       on_problem=lambda obj, reason, msg: seen.append((reason, msg)))
    s.rebuild(lambda: ([node("node1", 4)], [], [], []), lambda: ([rslice("node1", 2)], []))
    before = DEVICE_CONFLICTS.labels("reported")._value.get()
    s.events.on_claim(claim("k1", "node1", "gpu-0"))
    s.events.on_claim(claim("k2", "node1", "gpu-0"))
    assert [r for r, _ in seen] == ["DeviceConflict"]
    assert DEVICE_CONFLICTS.labels("reported")._value.get() == before + 1
    d = s.decide(wl("a", 1))  # the state still decides: gpu-0 held, gpu-1 free
    assert d.ok and d.placements[0].devices == [1]
