"""The queue book reads GPUQueues again only when one's spec changed: the
queue-status controller writes each queue's status every few seconds under load,
and none of those writes may cost a parse of every queue and a recount of every
holder (what bench.queues measured before)."""

from __future__ import annotations

import copy
import random
from typing import Any

from api.v1alpha1.types import DeviceExposure, GPUWorkload
from controllers.placement.state import PlacementState
from controllers.queues.book import WAITING_FOR_QUOTA, QueueBook
from runtime.informer import SharedIndexInformer
from tests.unit.controllers.queues.evented import EventedIndexer as Indexer
from tests.unit.controllers.queues.test_queue_gate import child_pod
from tests.unit.scheduling.helpers import node


def _queue(name: str, nominal: int, generation: int, rv: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": f"uid-{name}", "generation": generation,
                         "resourceVersion": rv},
            "spec": {"nominalGPUs": nominal, "namespaceSelector": {}}}


def test_a_status_write_is_not_a_queue_change() -> None:
    queues = Indexer()
    queues.add(_queue("a", 8, 1, "10"))
    book = QueueBook(queues, Indexer(), Indexer(), False)
    first = book.queues()
    written = copy.deepcopy(_queue("a", 8, 1, "11"))
    written["status"] = {"usedGPUs": 3}
    queues.update(written)
    assert book.queues() is first  # not parsed again

    raised = _queue("a", 12, 2, "12")
    queues.update(raised)
    assert book.quotas().get("a").nominal == 12


def test_a_queue_deleted_and_made_again_is_read_again() -> None:
    queues = Indexer()
    queues.add(_queue("a", 8, 1, "10"))
    book = QueueBook(queues, Indexer(), Indexer(), False)
    assert book.quotas().get("a").nominal == 8
    queues.delete(_queue("a", 8, 1, "10"))
    again = _queue("a", 4, 1, "20")
    again["metadata"]["uid"] = "uid-a-2"
    queues.add(again)
    assert book.quotas().get("a").nominal == 4


# ------------------------------------------------------- what it remembers


def _namespace(name: str, rv: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "resourceVersion": str(rv),
                         "labels": {"team": name.rsplit("-", 1)[0]}}}


def _informer(kind: str) -> SharedIndexInformer:
    return SharedIndexInformer(client=None, api_version="v1", kind=kind)  # type: ignore[arg-type]


def test_the_book_remembers_one_answer_per_namespace_there_is() -> None:
    """10,000 namespace updates (each a new resourceVersion) while short-lived
    namespaces are made and deleted: the book remembers at most one default-queue
    answer per namespace in the cache, and none of a deleted namespace (it
    remembered every namespace it was ever asked about until a GPUQueue's spec
    changed)."""
    queues = Indexer()
    queues.add(_queue("a", 8, 1, "10"))
    namespaces, workloads = _informer("Namespace"), _informer("GPUWorkload")
    book = QueueBook(queues, namespaces, workloads, False)
    live = ["team-0", "team-1", "team-2"]
    for name in live:
        namespaces.watch_event("ADDED", _namespace(name, 1))
    made = 0
    for rv in range(2, 10_002):
        if rv % 100 == 0:  # a short-lived namespace: made, asked about, deleted
            made += 1
            ci = _namespace(f"ci-{made}", rv)
            namespaces.watch_event("ADDED", ci)
            assert book.default_queue(f"ci-{made}") == "a"
            namespaces.watch_event("DELETED", ci)
            continue
        name = live[rv % len(live)]
        namespaces.watch_event("MODIFIED", _namespace(name, rv))
        assert book.default_queue(name) == "a"
        assert book.remembered() <= len(live)
    assert made == 100
    assert book.remembered() == len(live)
    namespaces.watch_event("DELETED", _namespace("team-0", 10_002))
    assert book.remembered() == len(live) - 1


def test_a_deleted_workload_that_waited_for_quota_is_forgotten() -> None:
    """Its place in its queue's order went only when another workload of a queue
    was gated and looked past it (``forget`` had no caller)."""
    queues = Indexer()
    queues.add({"metadata": {"name": "a", "uid": "uid-a", "generation": 1},
                "spec": {"nominalGPUs": 4, "namespaceSelector": {}}})
    namespaces, workloads = _informer("Namespace"), _informer("GPUWorkload")
    book = QueueBook(queues, namespaces, workloads, False)
    namespaces.watch_event("ADDED", _namespace("team-0", 1))
    state = PlacementState(DeviceExposure.CUDA_VISIBLE_DEVICES, rng=random.Random(1),
                           queues=book)
    state.rebuild(lambda: ([node("node1", 8)], [], [], []))
    raws = [{"apiVersion": "gpu.orchestrator.dev/v1alpha1", "kind": "GPUWorkload",
             "metadata": {"name": f"w{i}", "namespace": "team-0", "uid": f"uid-w{i}",
                          "creationTimestamp": f"2026-01-01T00:00:0{i}Z"},
             "spec": {"gpusPerReplica": 4}} for i in range(2)]
    for raw in raws:
        workloads.watch_event("ADDED", raw)
    placed = state.decide(GPUWorkload.model_validate(raws[0]))
    assert placed.ok, placed.message
    for p in placed.placements:
        state.events.on_pod(child_pod("team-0", "w0", p.node, p.devices, p.index))
    refused = state.decide(GPUWorkload.model_validate(raws[1]))
    assert refused.wait_reason == WAITING_FOR_QUOTA, refused.message
    before = book.remembered()
    workloads.watch_event("DELETED", raws[1])
    assert book.remembered() == before - 1
