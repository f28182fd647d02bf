"""What a user sees when the placement state refuses something (no server): a node
reporting more GPUs than a node may have gets one Warning Event, not one per
decision or heartbeat, and the rest of the cluster is placed; a placement the
ledger refuses is the workload's Unschedulable decision, never an exception that
the work queue retries every few seconds."""

from __future__ import annotations

import random
from typing import Any

from api.v1alpha1.types import DeviceExposure, GPUWorkload, Placement
from controllers.placement.state import PlacementState
from internal.scheduling.framework import SCHEDULED, UNSCHEDULABLE, Decision
from tests.unit.scheduling.helpers import gpunode, node


def gw(name: str, **spec: Any) -> GPUWorkload:
    return GPUWorkload.model_validate({"metadata": {"name": name, "namespace": "ns",
                                                    "uid": f"uid-{name}"}, "spec": spec})


class World:
    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        self.events: list[tuple[str, str, str]] = []
        self.state = PlacementState(
            DeviceExposure.CUDA_VISIBLE_DEVICES, rng=random.Random(1),
            on_problem=lambda o, r, m: self.events.append((o["metadata"]["name"], r, m)))
        self.state.rebuild(lambda: (nodes, [], [], []))


def test_a_node_reporting_a_million_gpus_gets_one_event_and_others_are_placed() -> None:
    big = node("big", 1_000_000)
    w = World([node("n1", 2), big])
    want = ("big", "TooManyGPUs",
            "big reports 1000000 GPUs, more than 64; excluded (its Node's status "
            "nvidia.com/gpu): its GPUs are not offered until it reports at most 64 "
            "(--max-gpus-per-node) and 7 MIG instances per GPU; what runs there keeps "
            "its GPUs")
    assert w.events == [want]
    for _ in range(3):  # the kubelet's status updates: the same report, no new Event
        w.state.events.on_node(big)
    d = w.state.decide(gw("a", gpuShare={"fraction": "0.5"}))
    assert d.ok and d.placements[0].node == "n1", d.message
    assert w.events == [want]
    w.state.events.on_gpunode(gpunode("big", 8))  # its agent reports what it has
    assert w.state.node_info("big").refused == ""
    w.state.events.on_gpunode_deleted(gpunode("big", 8))  # the allocatable again
    assert [e[0] for e in w.events] == ["big", "big"]


def test_a_placement_the_ledger_refuses_is_unschedulable_not_an_exception() -> None:
    w = World([node("n1", 2)])
    assert w.state.decide(gw("holder", gpusPerReplica=2)).ok
    # a decision the filters should not have made: both devices are held
    w.state.scheduler.schedule = lambda wl, **kw: Decision(  # type: ignore[method-assign]
        SCHEDULED, "leastLoaded", [Placement(index=0, node="n1", devices=[0])])
    d = w.state.decide(gw("late"))
    assert d.outcome == UNSCHEDULABLE and not d.ok
    assert d.message == "n1: device(s) 0 held by ns/holder"
    assert w.state.view().allocation("ns/late") is None
