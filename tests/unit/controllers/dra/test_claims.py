"""The ResourceClaim manifests of ``deviceExposure: dra`` (pure)."""

from __future__ import annotations

from api.v1alpha1.keys import CLAIM_FINALIZER
from api.v1alpha1.types import DeviceExposure, GPUWorkload, Placement
from controllers.dra.claims import (
    ClaimManager,
    DraOptions,
    allocation_problem,
    bind,
    build_claim,
    claim_placement,
    index_pods_by_claim,
    node_selector,
)
from controllers.gpuworkload import children as ch
from controllers.placement.source import PlacementStateSource
from controllers.placement.state import PlacementState
from runtime.store import Indexer
from tests.unit.scheduling.helpers import dra_slice, node

RAW = {"metadata": {"name": "train", "namespace": "ml", "uid": "U"}}


def wl() -> GPUWorkload:
    return GPUWorkload.model_validate({
        **RAW, "spec": {"gpusPerReplica": 2, "deviceExposure": "dra", "template": {"spec": {
            "containers": [{"name": "main", "image": "x",
                            "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}}}})


def test_claim_requests_exactly_the_placements_devices_and_is_ours() -> None:
    p = Placement(index=1, node="node3", devices=[0, 2])
    c = build_claim(wl(), RAW, p, 4, DraOptions(), ["GPU-b", "GPU-a"])
    assert c["metadata"]["name"] == "train-1-gpus-4"
    assert c["metadata"]["finalizers"] == [CLAIM_FINALIZER]
    assert c["metadata"]["ownerReferences"][0]["uid"] == "U"
    req = c["spec"]["devices"]["requests"][0]["exactly"]
    assert req["count"] == 2 and req["deviceClassName"] == "gpu.nvidia.com"
    assert req["selectors"][0]["cel"]["expression"] == \
        'device.attributes["gpu.nvidia.com"].uuid in ["GPU-a", "GPU-b"]'
    assert claim_placement(c) == ("node3", (0, 2))
    no_uuid = build_claim(wl(), RAW, p, 0, DraOptions(), None)
    assert "minor in [0, 2]" in no_uuid["spec"]["devices"]["requests"][0]["exactly"][
        "selectors"][0]["cel"]["expression"]


def test_the_pod_uses_the_claim_and_nothing_else_for_its_gpus() -> None:
    p = Placement(index=0, node="node1", devices=[1, 3])
    pod = bind(ch.build_child(wl(), RAW, p, DeviceExposure.DRA, lambda n, d: None), "c0")
    spec = pod["spec"]
    assert spec["nodeName"] == "node1"
    assert spec["resourceClaims"] == [{"name": "gpus", "resourceClaimName": "c0"}]
    c = spec["containers"][0]
    assert c["resources"]["claims"] == [{"name": "gpus"}]
    assert "nvidia.com/gpu" not in c["resources"]["limits"]
    assert not {e["name"] for e in c.get("env") or ()} & {"CUDA_VISIBLE_DEVICES",
                                                            "NVIDIA_VISIBLE_DEVICES"}
    assert index_pods_by_claim(pod) == ["ml/c0"]


def test_allocation_problem_names_what_differs() -> None:
    def alloc(node: str, *devs: str) -> dict:
        return {"devices": {"results": [{"request": "gpus", "driver": "gpu.nvidia.com",
                                         "pool": node, "device": d} for d in devs]},
                "nodeSelector": node_selector(node)}
    want = alloc("node1", "gpu-0")
    assert allocation_problem({"status": {"allocation": want}}, want) == ""
    msg = allocation_problem({"status": {"allocation": alloc("node1", "gpu-1")}}, want)
    assert msg == "allocated to node1/gpu-1 on node1, not node1/gpu-0 on node1"


class _NoClient:
    def __getattr__(self, name: str) -> None:
        raise AssertionError(f"no API call expected, got {name}")


def test_a_claim_marked_for_release_is_never_adopted_even_while_cached() -> None:
    """The claim controller decides to release under the bookings' lock; a placement
    booked afterwards waits for the claim to be gone instead of binding a pod to it."""
    state = PlacementState(DeviceExposure.DRA, dra_driver="gpu.nvidia.com")
    state.rebuild(lambda: ([node("node1", 2)], [], [], []), lambda: ([dra_slice("node1", 2)], []))
    w = wl()
    p = Placement(index=0, node="node1", devices=[0, 1])
    claim = build_claim(w, RAW, p, 0, DraOptions(), None)
    claim["metadata"]["uid"] = "C1"
    claim["status"] = {"allocation": {"devices": {"results": [
        {"request": "gpus", "driver": "gpu.nvidia.com", "pool": "node1", "device": f"gpu-{d}"}
        for d in (0, 1)]}, "nodeSelector": node_selector("node1")}}
    cache = Indexer()
    cache.add(claim)
    states = PlacementStateSource(lambda books: state)
    manager = ClaimManager(_NoClient(), _NoClient(), cache, states, DraOptions())
    assert manager.mark_releasing(claim, "ns/train", lambda booking: True) is False  # wanted: kept
    assert manager.ensure(w, RAW, p, 0, pod_exists=False) == "train-0-gpus-0"
    assert manager.mark_releasing(claim, "ns/train", lambda booking: False) is True
    assert manager.ensure(w, RAW, p, 0, pod_exists=False) is None  # waits for it to go
    manager.unmark("C1")
    assert manager.ensure(w, RAW, p, 0, pod_exists=False) == "train-0-gpus-0"
