"""The queue book reads GPUQueues again only when one's spec changed: the
queue-status controller writes each queue's status every few seconds under load,
and none of those writes may cost a parse of every queue and a recount of every
holder (what bench.queues measured before)."""

from __future__ import annotations

import copy
from typing import Any

from controllers.queues.book import QueueBook
from runtime.store import Indexer


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
