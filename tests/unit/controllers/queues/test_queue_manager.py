"""The queue manager: what the gate reads is kept from the informers' events, so a
decision lists no informer (it listed every queue and sorted every waiting workload
under the placement lock); each queue's waiting line in BestEffortFIFO order; what
it keeps bounded by what the caches hold."""

from __future__ import annotations

import random
from typing import Any

from api.v1alpha1.types import DeviceExposure, GPUWorkload
from controllers.placement.state import PlacementState
from controllers.queues.book import QUEUED, WAITING_FOR_QUOTA, QueueBook
from tests.unit.controllers.queues.evented import EventedIndexer
from tests.unit.controllers.queues.test_queue_gate import child_pod, queue
from tests.unit.scheduling.helpers import node

NODES = [node(f"node{i}", 4) for i in range(1, 5)]


class Cluster:
    """Queues a and b (nominal 8, cohort research, no borrowing for a) on 4 x 4 GPUs,
    the caches evented as an informer's."""

    def __init__(self, *queues: dict[str, Any]) -> None:
        self.queues, self.namespaces, self.workloads = (EventedIndexer(), EventedIndexer(),
                                                        EventedIndexer())
        for q in queues or (queue("a", 8, "ns-a", borrowingLimit=0), queue("b", 8, "ns-b")):
            self.queues.add(q)
        for ns in ("ns-a", "ns-b"):
            self.namespaces.add({"metadata": {"name": ns, "resourceVersion": "1"}})
        self.book = QueueBook(self.queues, self.namespaces, self.workloads)
        self.state = PlacementState(DeviceExposure.CUDA_VISIBLE_DEVICES, rng=random.Random(1),
                                    queues=self.book)
        self.state.rebuild(lambda: (NODES, [], [], []))
        self.n = 0

    def submit(self, ns: str, name: str, gpus: int = 4, **spec: Any) -> GPUWorkload:
        self.n += 1
        raw = {"apiVersion": "gpu.orchestrator.dev/v1alpha1", "kind": "GPUWorkload",
               "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}",
                            "creationTimestamp": f"2026-01-01T00:{self.n // 60:02d}:"
                                                 f"{self.n % 60:02d}Z"},
               "spec": {"gpusPerReplica": gpus, **spec}}
        self.workloads.add(raw)
        return GPUWorkload.model_validate(raw)

    def run(self, ns: str, name: str, gpus: int = 4, **spec: Any) -> None:
        d = self.state.decide(self.submit(ns, name, gpus, **spec))
        assert d.ok, d.message
        for p in d.placements:
            self.state.events.on_pod(child_pod(ns, name, p.node, p.devices, p.index))

    def book_(self, ns: str, name: str) -> None:
        """Admitted and booked (no pods yet: ``forget`` gives its quota back)."""
        d = self.state.decide(self.submit(ns, name))
        assert d.ok, d.message

    def lists(self) -> int:
        return self.queues.lists + self.namespaces.lists + self.workloads.lists


def test_a_decision_lists_no_informer() -> None:
    """Admitted, queued behind another, waiting for quota, reclaiming: no decision
    reads a cache whole (each listed every GPUQueue, and sorted every waiting
    workload, while holding the placement lock)."""
    c = Cluster(queue("a", 8, "ns-a"), queue("b", 8, "ns-b"))
    for i in range(4):
        c.run("ns-a", f"a{i}")  # a borrows b's 8
    waiting = [c.submit("ns-a", f"w{i}") for i in range(20)]
    before = c.lists()
    for w in waiting:
        assert c.state.decide(w).wait_reason == WAITING_FOR_QUOTA
    reclaim = c.state.decide(c.submit("ns-b", "b0"))
    assert reclaim.victims == ["ns-a/a3"], reclaim.message
    assert c.lists() - before == 0
    assert before == 0  # nor did the admissions before


def test_the_gate_reads_a_relabelled_namespace_from_its_event() -> None:
    """A namespace's labels move it to another queue as soon as its event is seen."""
    c = Cluster(queue("a", 8, "ns-a"),
                {"metadata": {"name": "b"}, "spec": {"nominalGPUs": 8, "cohort": "research",
                                                     "namespaceSelector": {
                                                         "matchLabels": {"team": "b"}}}})
    assert c.book.default_queue("ns-a") == "a"
    c.namespaces.add({"metadata": {"name": "ns-x", "resourceVersion": "2",
                                   "labels": {"team": "b"}}})
    d = c.state.decide(c.submit("ns-x", "x"))
    assert d.ok and d.queue == "b"
    c.namespaces.add({"metadata": {"name": "ns-x", "resourceVersion": "3"}})
    assert c.book.default_queue("ns-x") is None
    assert c.lists() == 0


# ------------------------------------------------------------------ the order


def test_a_higher_priority_goes_before_an_older_workload_of_its_queue() -> None:
    c = Cluster()
    c.book_("ns-a", "r0")
    c.book_("ns-a", "r1")  # a holds its 8
    old = c.submit("ns-a", "old")
    urgent = c.submit("ns-a", "urgent", priority=10)
    assert c.state.decide(old).wait_reason == WAITING_FOR_QUOTA
    assert c.state.decide(urgent).wait_reason == WAITING_FOR_QUOTA
    assert c.book.manager.line("a") == ["ns-a/urgent", "ns-a/old"]
    c.state.forget("ns-a/r1")  # 4 GPUs of a's quota free
    d = c.state.decide(old)
    assert (d.wait_reason, d.message) == (
        QUEUED, "waiting behind ns-a/urgent in queue a (priority, then creation time)")
    assert c.state.decide(urgent).ok
    assert c.book.manager.line("a") == ["ns-a/old"]


def test_each_queues_line_is_kept_in_priority_then_creation_order() -> None:
    """Twelve workloads refused in a shuffled order stand in their queue's line by
    priority, then creation time; a workload refused again moves to its new place."""
    c = Cluster()
    c.run("ns-a", "r0")
    c.run("ns-a", "r1")
    made = [c.submit("ns-a", f"w{i:02d}", priority=i % 3) for i in range(12)]
    for w in random.Random(7).sample(made, len(made)):
        assert c.state.decide(w).wait_reason == WAITING_FOR_QUOTA
    want = sorted(made, key=lambda w: (-w.spec.priority, w.metadata.creation_timestamp))
    assert c.book.manager.line("a") == [w.key for w in want]
    raised = made[0].model_copy(update={"spec": made[0].spec.model_copy(
        update={"priority": 9})})
    assert c.state.decide(raised).wait_reason == WAITING_FOR_QUOTA
    assert c.book.manager.line("a")[0] == "ns-a/w00"
    assert len(c.book.manager.line("a")) == 12


def test_a_waiting_workload_placed_or_deleted_leaves_its_line() -> None:
    """Its place goes on its event (placed elsewhere, being deleted, deleted), not
    when a later decision happens to look at it."""
    c = Cluster()
    c.run("ns-a", "r0")
    c.run("ns-a", "r1")
    ws = [c.submit("ns-a", f"w{i}") for i in range(3)]
    for w in ws:
        assert c.state.decide(w).wait_reason == WAITING_FOR_QUOTA
    raw = dict(c.workloads.get_by_name("w0", "ns-a"))
    c.workloads.add({**raw, "status": {"placements": [{"index": 0, "node": "node1",
                                                       "devices": [0]}]}})
    raw = dict(c.workloads.get_by_name("w1", "ns-a"))
    c.workloads.add({**raw, "metadata": {**raw["metadata"],
                                         "deletionTimestamp": "2026-01-01T01:00:00Z"}})
    assert c.book.manager.line("a") == ["ns-a/w2"]
    c.workloads.delete(c.workloads.get_by_name("w2", "ns-a"))
    assert c.book.manager.line("a") == []
    assert c.book.remembered() == 2  # the two namespaces' selections


def test_a_workload_the_cache_does_not_hold_takes_no_place() -> None:
    """A decision for a workload whose delete was already seen keeps nothing of it
    (it would hold its queue's line for ever)."""
    c = Cluster()
    c.run("ns-a", "r0")
    c.run("ns-a", "r1")
    w = c.submit("ns-a", "gone")
    c.workloads.delete(c.workloads.get_by_name("gone", "ns-a"))
    assert c.state.decide(w).wait_reason == WAITING_FOR_QUOTA
    assert c.book.manager.line("a") == []


# ------------------------------------------------------------------ bounded


def test_the_manager_keeps_one_entry_per_namespace_and_workload_there_is() -> None:
    """10,000 namespace updates that move namespaces in and out of a queue (their
    labels change each time) while workloads come and go: the manager holds what the
    caches hold, no more."""
    c = Cluster(queue("a", 8, "ns-a"),
                {"metadata": {"name": "b"}, "spec": {"nominalGPUs": 8, "cohort": "research",
                                                     "namespaceSelector": {
                                                         "matchLabels": {"team": "b"}}}})
    live = [f"team-{i}" for i in range(5)]
    for rv in range(10_000):
        name = live[rv % len(live)]
        team = "b" if rv % 2 else "x"
        c.namespaces.add({"metadata": {"name": name, "resourceVersion": str(rv),
                                       "labels": {"team": team}}})
        assert c.book.default_queue(name) == ("b" if team == "b" else None)
        if rv % 50 == 0:  # a short-lived namespace with a workload
            ci = {"metadata": {"name": f"ci-{rv}", "resourceVersion": str(rv),
                               "labels": {"team": "b"}}}
            c.namespaces.add(ci)
            c.state.decide(c.submit(f"ci-{rv}", "job", gpus=20))
            c.workloads.delete(c.workloads.get_by_name("job", f"ci-{rv}"))
            c.namespaces.delete(ci)
    size = c.book.manager.size()
    assert size == {"queues": 2, "namespaces": 2 + len(live), "workloads": 0, "waiting": 0}
    assert c.book.remembered() == 2 + len(live)
