"""The queues' marks on namespaces (``controllers/queues/marks.py``), and two queues
selecting one namespace made visible: the losing queue's ``Overlapping`` condition
and Event, and the hint in the message of a workload that waits in the winner."""

from __future__ import annotations

from datetime import UTC, datetime
from fractions import Fraction
from typing import Any

from api.v1alpha1.keys import QUEUED_LABEL, QUEUES_ANNOTATION
from controllers.queues.book import WAITING_FOR_QUOTA, QueueBook
from controllers.queues.marks import NamespaceMarks, every_namespace
from controllers.queues.status import QueueStatusReconciler
from internal.scheduling.framework import UNSCHEDULABLE
from runtime import Request
from tests.unit.controllers.queues.evented import EventedIndexer as Indexer
from tests.unit.controllers.queues.test_queue_gate import Cluster, queue
from tests.unit.controllers.queues.test_queue_status import Client as StatusClient


def ns(name: str, labels: dict[str, str] | None = None,
       annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": "7", "labels": labels or {},
                         "annotations": annotations or {}}}


class Patches:
    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def patch(self, api_version: str, kind: str, name: str, body: dict[str, Any]) -> None:
        assert (api_version, kind) == ("v1", "Namespace")
        self.sent.append((name, body["metadata"]))


def marks(*queues: dict[str, Any], namespaces: list[dict[str, Any]]
          ) -> tuple[NamespaceMarks, Patches, Indexer, QueueBook]:
    qs, nss = Indexer(), Indexer()
    for q in queues:
        qs.add(q)
    for n in namespaces:
        nss.add(n)
    book = QueueBook(qs, nss, Indexer())
    client = Patches()
    return NamespaceMarks(client, book, nss), client, qs, book


def test_a_selected_namespace_is_marked_with_every_queue_by_name_and_unmarked_after() -> None:
    rec, client, qs, book = marks(queue("b", 0, "team"), queue("a", 4, "team"),
                                  namespaces=[ns("team"), ns("other")])
    assert [r.name for r in every_namespace(book)({})] == ["other", "team"]
    rec.reconcile(Request("", "team"))
    rec.reconcile(Request("", "other"))
    assert client.sent == [("team", {"resourceVersion": "7", "labels": {QUEUED_LABEL: "true"},
                                     "annotations": {QUEUES_ANNOTATION: "a,b"}})]
    # marked already: nothing to write
    rec.namespaces.add(ns("team", {QUEUED_LABEL: "true"}, {QUEUES_ANNOTATION: "a,b"}))
    rec.reconcile(Request("", "team"))
    assert len(client.sent) == 1
    for name in ("a", "b"):
        qs.delete(qs.get_by_name(name))
    rec.reconcile(Request("", "team"))
    assert client.sent[-1] == ("team", {"resourceVersion": "7", "labels": {QUEUED_LABEL: None},
                                        "annotations": {QUEUES_ANNOTATION: None}})


def test_a_system_namespace_is_never_marked_and_a_selector_on_the_mark_chases_nothing(
        ) -> None:
    every = {"metadata": {"name": "all"}, "spec": {"nominalGPUs": 1, "namespaceSelector": {}}}
    unmarked = {"metadata": {"name": "unmarked"}, "spec": {"nominalGPUs": 1,
                "namespaceSelector": {"matchExpressions": [
                    {"key": QUEUED_LABEL, "operator": "DoesNotExist"}]}}}
    rec, client, _, _ = marks(every, unmarked, namespaces=[
        ns("kube-system"), ns("team", {QUEUED_LABEL: "true"}, {QUEUES_ANNOTATION: "all"})])
    rec.reconcile(Request("", "kube-system"))
    assert client.sent == []
    # "unmarked" selects team whatever the manager's own mark says (not only until
    # the mark is written, then not: that would flip for ever)
    rec.reconcile(Request("", "team"))
    assert client.sent == [("team", {"resourceVersion": "7", "labels": {QUEUED_LABEL: "true"},
                                     "annotations": {QUEUES_ANNOTATION: "all,unmarked"}})]


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def warning(self, obj: dict[str, Any], reason: str, message: str) -> None:
        self.events.append((obj["metadata"]["name"], reason, message))


def test_the_losing_queue_says_so_in_a_condition_and_an_event() -> None:
    queues, namespaces = Indexer(), Indexer()
    queues.add(queue("a", 0, "team"))
    queues.add(queue("b", 8, "team"))
    namespaces.add(ns("team"))
    client, recorder = StatusClient(queues), Recorder()
    rec = QueueStatusReconciler(client, QueueBook(queues, namespaces, Indexer()),
                                lambda: {"a": Fraction(0)},
                                clock=lambda: datetime(2026, 1, 1, tzinfo=UTC),
                                recorder=recorder)
    rec.reconcile(Request("", "a"))
    rec.reconcile(Request("", "b"))
    first, second = client.patches
    assert [c["type"] for c in first["conditions"]] == ["Active"]  # a wins: nothing to say
    overlapping = next(c for c in second["conditions"] if c["type"] == "Overlapping")
    message = ("namespace team is also selected by GPUQueue a, which comes first by name: "
               "their workloads without spec.queueName go there; they use this queue only "
               "with spec.queueName: b")
    assert (overlapping["status"], overlapping["reason"], overlapping["message"]) == (
        "True", "AnotherQueueFirst", message)
    assert recorder.events == [("b", "AnotherQueueFirst", message)]
    rec.reconcile(Request("", "b"))
    assert len(recorder.events) == 1  # once, not every period
    queues.delete(queues.get_by_name("a"))
    rec.reconcile(Request("", "b"))
    assert [c["type"] for c in client.patches[-1]["conditions"]] == ["Active"]


def test_a_workload_waiting_in_its_default_queue_is_told_of_the_others() -> None:
    c = Cluster(queue("a", 0, "team", cohort=None), queue("b", 8, "team", cohort=None))
    d = c.state.decide(c.submit("team", "w", gpus=1))
    assert (d.outcome, d.wait_reason, d.queue) == (UNSCHEDULABLE, WAITING_FOR_QUOTA, "a")
    assert d.message.endswith(
        "; namespace team is also selected by GPUQueue b: a workload without "
        "spec.queueName goes to a, the first by name; set spec.queueName to use another")
    named = c.state.decide(c.submit("team", "named", gpus=1, queueName="a"))
    assert named.wait_reason == WAITING_FOR_QUOTA and "also selected" not in named.message


def test_a_refused_mark_is_logged_and_tried_again_later_not_in_a_loop() -> None:
    """A manager newer than its RBAC (no patch on namespaces): no traceback loop."""
    from runtime import Forbidden
    from runtime.errors import ApiError

    rec, client, _, _ = marks(queue("a", 4, "team"), namespaces=[ns("team")])

    def refuse(*_: Any, **__: Any) -> None:
        raise Forbidden(403, "Forbidden", 'namespaces "team" is forbidden')
    client.patch = refuse  # type: ignore[method-assign]
    assert issubclass(Forbidden, ApiError)
    result = rec.reconcile(Request("", "team"))
    assert result is not None and result.requeue_after == 60.0
