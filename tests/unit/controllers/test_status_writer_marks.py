"""A status write's "on its way" mark never outlives the write (a lost requeue).

Seen under churn: two workloads stayed Pending (and one Scheduled with its pod
Running) for good, although nothing was queued and even an edit did not wake them.
The status writer marked "a write of this workload is on its way" only after
handing the write to its threads; when a writer thread wrote it and said where it
landed first, the mark came after and stayed: every cached copy from then on was
taken as older than our own write, and every reconcile only asked to come back in
0.1 s. Here the submitting thread is paused at the worst moment.
"""

from __future__ import annotations

import threading
from typing import Any

from controllers.status_writer import StatusWriter
from controllers.write_tracker import WriteTracker
from runtime.store import Indexer

NS = "team"


class Client:
    """Answers a status merge patch at once, as the API server would."""

    def __init__(self, store: Indexer) -> None:
        self.store = store
        self.rv = 10

    def patch(self, api_version: str, kind: str, name: str, body: dict[str, Any],
              namespace: str | None = None, **_: Any) -> dict[str, Any]:
        self.rv += 1
        obj = self.store.get_by_name(name, namespace)
        assert obj is not None
        new = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(self.rv)},
               **body}
        self.store.add(new)  # the informer sees it at once
        return new


def test_a_write_that_lands_before_its_mark_leaves_no_mark_behind() -> None:
    store = Indexer()
    w = {"metadata": {"name": "w", "namespace": NS, "uid": "u1", "resourceVersion": "10"},
         "spec": {}, "status": {}}
    store.add(w)
    tracker = WriteTracker(threading.RLock())
    landed = threading.Event()

    def on_written(obj: Any) -> None:
        tracker.wrote(obj)
        landed.set()

    def on_pending(key: str) -> None:
        # the submitting thread is preempted here, for as long as the writer takes
        # (at most 1 s: a writer that cannot see the write yet is not waited for)
        landed.wait(1.0)
        tracker.writing(key)

    writer = StatusWriter(Client(store), store, threads=1, on_pending=on_pending,
                          on_written=on_written)
    writer.start()
    try:
        writer.submit(w, {"phase": "Pending", "message": "0/4 nodes are available"})
        assert writer.flush(5.0)
        assert landed.wait(5.0)
        cached = store.get_by_name("w", NS)
        assert cached["status"]["phase"] == "Pending"
        # the cache holds our write: it is not older than it, and a reconcile acts
        assert not tracker.is_behind(cached)
    finally:
        writer.stop()
