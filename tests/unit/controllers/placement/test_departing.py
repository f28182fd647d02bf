"""A preemption's victim keeps its devices from everybody else until its own
reconcile finds none of its children left (``Ledger.depart``), not merely until
the cache shows no pod of it.

The queue churn test saw one GPU held by two workloads' live pods for about 2 s
around a reclaim: the victim's booking was released at the preemptor's decision,
so its devices that the preemptor's nomination does not cover looked free while
one of the victim's reconciles was still creating a pod on them (a pod is in the
cache, and the ledger, only once its create has answered). A third workload was
given them, and both pods ran. Here the victim's pod lands after the third
workload asked: it must have been refused."""

from __future__ import annotations

import random
from typing import Any

from api.v1alpha1.types import DeviceExposure, GPUWorkload
from controllers.placement.state import PlacementState
from controllers.queues.book import QueueBook
from internal.scheduling.framework import PREEMPT
from tests.unit.controllers.placement.test_placement_state import child
from tests.unit.controllers.queues.evented import EventedIndexer as Indexer
from tests.unit.scheduling.helpers import node

NODES = [node("node1", 4)]


def gw(name: str, **spec: Any) -> GPUWorkload:
    return GPUWorkload.model_validate({
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": spec})


def gang_pod(workload: str, index: int, devices: str) -> dict[str, Any]:
    p = child(workload, f"uid-{workload}", "node1", devices)
    p["metadata"]["name"] = f"{workload}-{index}"
    p["metadata"]["uid"] = f"pod-{workload}-{index}"
    p["metadata"]["labels"]["gpu.orchestrator.dev/index"] = str(index)
    return p


def devices_of(d: Any) -> set[int]:
    return {x for p in d.placements for x in p.devices}


def test_a_victims_devices_stay_its_own_until_its_reconcile_finds_its_children_gone(
) -> None:
    woken: list[str] = []
    state = PlacementState(DeviceExposure.CUDA_VISIBLE_DEVICES, rng=random.Random(1),
                           enqueue_waiting=woken.extend)
    state.rebuild(lambda: (NODES, [], [], []))
    # the victim: a gang of 2 x 2 over node1's four GPUs, committed, its pods being
    # made by its reconcile (replica 0 created, replica 1's create on its way)
    low = gw("low", gpusPerReplica=2, replicas=2, priority=0)
    d = state.decide(low)
    assert d.ok
    state.commit("ns/low")
    p0 = next(p for p in d.placements if p.index == 0)
    p1 = next(p for p in d.placements if p.index == 1)
    state.events.on_pod(gang_pod("low", 0, ",".join(map(str, p0.devices))))

    high = state.decide(gw("high", gpusPerReplica=2, priority=10,
                           schedulingStrategy="priority"))
    assert high.outcome == PREEMPT and high.victims == ["ns/low"]
    untouched = {0, 1, 2, 3} - devices_of(high)
    assert untouched  # the nomination covers two of the victim's four GPUs

    # a third workload asks while the victim's replica 1 is being created
    third = state.decide(gw("third", gpusPerReplica=2, priority=0))
    assert not third.ok, f"given {devices_of(third)} of the victim's devices"
    state.events.on_pod(gang_pod("low", 1, ",".join(map(str, p1.devices))))

    # its reconcile deletes both pods; they go; they were its last children
    for i, p in ((0, p0), (1, p1)):
        state.events.on_pod_deleted(gang_pod("low", i, ",".join(map(str, p.devices))))
    assert not state.decide(gw("third", gpusPerReplica=2, priority=0)).ok
    assert state.blockers("ns/high") == {"node1": ["departing:ns/low"]}  # what it holds on to
    woken.clear()
    state.departed("ns/low")
    assert "ns/high" in woken and state.blockers("ns/high") == {}
    after = state.decide(gw("third", gpusPerReplica=2, priority=0))
    assert after.ok and devices_of(after) == untouched


def test_a_reclaims_victim_holds_on_until_it_departs() -> None:
    """The same through the queue gate: queue a borrows all 4 GPUs, b reclaims 2 of
    them; a's workload keeps the other 2 until its reconcile says its children are
    gone, and b's nomination waits for that too."""
    queues, namespaces, workloads = Indexer(), Indexer(), Indexer()
    for name, ns in (("a", "ns-a"), ("b", "ns-b")):
        queues.add({"metadata": {"name": name},
                    "spec": {"nominalGPUs": 2, "cohort": "c", "namespaceSelector": {
                        "matchLabels": {"kubernetes.io/metadata.name": ns}}}})
    book = QueueBook(queues, namespaces, workloads)
    state = PlacementState(DeviceExposure.CUDA_VISIBLE_DEVICES, rng=random.Random(1),
                           queues=book)
    state.rebuild(lambda: (NODES, [], [], []))

    def submit(ns: str, name: str, gpus: int, replicas: int = 1) -> GPUWorkload:
        raw = {"apiVersion": "gpu.orchestrator.dev/v1alpha1", "kind": "GPUWorkload",
               "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}",
                            "creationTimestamp": f"2026-01-01T00:00:0{len(workloads.list())}Z"},
               "spec": {"gpusPerReplica": gpus, "replicas": replicas}}
        workloads.add(raw)
        return GPUWorkload.model_validate(raw)

    d = state.decide(submit("ns-a", "a0", 2, replicas=2))
    assert d.ok
    state.commit("ns-a/a0")
    for p in d.placements:
        pod = child("a0", "uid-a0", "node1", ",".join(map(str, p.devices)))
        pod["metadata"].update(namespace="ns-a", name=f"a0-{p.index}", uid=f"pod-a0-{p.index}")
        state.events.on_pod(pod)
    b0 = state.decide(submit("ns-b", "b0", 2))
    assert b0.outcome == PREEMPT and b0.victims == ["ns-a/a0"], b0.message
    for p in d.placements:
        pod = child("a0", "uid-a0", "node1", ",".join(map(str, p.devices)))
        pod["metadata"].update(namespace="ns-a", name=f"a0-{p.index}", uid=f"pod-a0-{p.index}")
        state.events.on_pod_deleted(pod)
    assert state.blockers("ns-b/b0") == {"node1": ["departing:ns-a/a0"]}
    a1 = submit("ns-a", "a1", 2)
    assert not state.decide(a1).ok  # a's two others: still a0's
    state.departed("ns-a/a0")
    assert state.blockers("ns-b/b0") == {}
    assert state.decide(a1).ok
