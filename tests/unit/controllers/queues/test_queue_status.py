"""The queue-status controller: a queue's status from the ledger's usage and the
cache's workloads, written only when it changes."""

from __future__ import annotations

from datetime import UTC, datetime
from fractions import Fraction
from typing import Any

from controllers.queues.book import QueueBook
from controllers.queues.status import QueueStatusReconciler
from runtime import Request
from tests.unit.controllers.queues.evented import EventedIndexer as Indexer

QUEUE = {"metadata": {"name": "a"},
         "spec": {"nominalGPUs": 8, "cohort": "r",
                  "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ns-a"}}}}
OTHER = {"metadata": {"name": "b"}, "spec": {"nominalGPUs": 8, "cohort": "r"}}


class Client:
    def __init__(self, queues: Indexer) -> None:
        self.queues = queues
        self.patches: list[dict[str, Any]] = []

    def patch(self, api_version: str, kind: str, name: str, body: dict[str, Any],
              subresource: str | None = None) -> dict[str, Any]:
        assert (kind, subresource) == ("GPUQueue", "status")
        self.patches.append(body["status"])
        obj = {**self.queues.get_by_name(name), "status": body["status"]}
        self.queues.add(obj)
        return obj


def wl(name: str, phase: str, placed: bool) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase}
    if placed:
        status["placements"] = [{"index": 0, "node": "n", "devices": [0]}]
    return {"metadata": {"name": name, "namespace": "ns-a"}, "spec": {}, "status": status}


def test_status_says_used_borrowed_admitted_pending_and_is_written_once() -> None:
    queues, namespaces, workloads = Indexer(), Indexer(), Indexer()
    queues.add(QUEUE)
    queues.add(OTHER)
    for w in (wl("r0", "Running", True), wl("r1", "Running", True), wl("p", "Pending", False),
              wl("done", "Succeeded", True)):
        workloads.add(w)
    client = Client(queues)
    rec = QueueStatusReconciler(client, QueueBook(queues, namespaces, workloads),
                                lambda: {"a": Fraction(12)},
                                clock=lambda: datetime(2026, 1, 1, tzinfo=UTC))
    assert rec.reconcile(Request("", "a")).requeue_after > 0
    (status,) = client.patches
    assert {k: status[k] for k in ("usedGPUs", "borrowedGPUs", "lentGPUs",
                                   "admittedWorkloads", "pendingWorkloads")} == {
        "usedGPUs": 12, "borrowedGPUs": 4, "lentGPUs": 0, "admittedWorkloads": 2,
        "pendingWorkloads": 1}
    assert [(c["type"], c["status"]) for c in status["conditions"]] == [("Active", "True")]
    rec.reconcile(Request("", "a"))
    assert len(client.patches) == 1  # nothing changed: nothing written


def test_not_leading_yet_writes_nothing() -> None:
    queues = Indexer()
    queues.add(QUEUE)
    client = Client(queues)
    rec = QueueStatusReconciler(client, QueueBook(queues, Indexer(), Indexer()), lambda: None)
    assert rec.reconcile(Request("", "a")).requeue_after == 1.0 and client.patches == []
