"""Event correlation against the real API server: what a user listing the Events of a
noisy object sees. The correlator's clock is frozen, so the spam bucket does not
refill while the test runs, however slow the machine is."""

from __future__ import annotations

import uuid

from runtime import metrics
from runtime.client import Client
from runtime.eventcorrelator import COMBINED_PREFIX, EventCorrelator
from runtime.events import EventRecorder
from tests.integration.runtime.conftest import configmap
from tests.waiting import eventually


def events_of(client: Client, ns: str, name: str) -> list[dict]:
    return client.list("v1", "Event", ns, field_selector=f"involvedObject.name={name}")["items"]


def spam_drops(component: str) -> float:
    return metrics.registry.get_sample_value(
        "events_dropped_total", {"component": component, "cause": "spam"}) or 0.0


def test_similar_warnings_fold_into_one_event_and_spam_is_dropped(
        client: Client, namespace: str) -> None:
    cm = client.create(configmap(namespace, "noisy", "1"))
    component = f"corr-{uuid.uuid4().hex[:6]}"
    rec = EventRecorder(client, component, correlator=EventCorrelator(clock=lambda: 0.0))
    try:
        for i in range(20):
            rec.warning(cm, "FailedScheduling", f"0 free GPUs on node-{i}")
        assert rec.flush(30)

        def combined_with(count: int) -> dict | None:
            evs = events_of(client, namespace, "noisy")
            hits = [e for e in evs if e["message"].startswith(COMBINED_PREFIX)]
            return hits[0] if len(hits) == 1 and hits[0]["count"] == count else None

        # 10 Events of their own, then one combined Event for the other 10.
        first = eventually(lambda: combined_with(10), timeout=30, what="combined Event, count 10")
        assert first["message"] == COMBINED_PREFIX + "0 free GPUs on node-19"
        evs = events_of(client, namespace, "noisy")
        assert len(evs) == 11
        singles = sorted(e["message"] for e in evs if not e["message"].startswith(COMBINED_PREFIX))
        assert singles == sorted(f"0 free GPUs on node-{i}" for i in range(10))
        assert all(e["count"] == 1 for e in evs if e["message"] in singles)
        assert {e["reason"] for e in evs} == {"FailedScheduling"}
        assert {e["type"] for e in evs} == {"Warning"}

        # 10 more: the object's spam bucket (25) lets 5 through, to the combined Event.
        for i in range(20, 30):
            rec.warning(cm, "FailedScheduling", f"0 free GPUs on node-{i}")
        assert rec.flush(30)
        later = eventually(lambda: combined_with(15), timeout=30, what="combined Event, count 15")
        assert later["metadata"]["name"] == first["metadata"]["name"]
        assert later["message"] == COMBINED_PREFIX + "0 free GPUs on node-24"
        assert later["firstTimestamp"] == first["firstTimestamp"]
        assert len(events_of(client, namespace, "noisy")) == 11
        assert spam_drops(component) == 5
    finally:
        rec.stop()


def test_a_deleted_event_is_written_again_with_its_count(
        client: Client, namespace: str) -> None:
    cm = client.create(configmap(namespace, "again", "1"))
    rec = EventRecorder(client, f"corr-{uuid.uuid4().hex[:6]}",
                        correlator=EventCorrelator(clock=lambda: 0.0))
    try:
        rec.normal(cm, "Seen", "reconciled")
        assert rec.flush(30)
        ev, = eventually(lambda: events_of(client, namespace, "again"), timeout=30,
                         what="the first Event")
        client.delete("v1", "Event", ev["metadata"]["name"], namespace=namespace)
        rec.normal(cm, "Seen", "reconciled")
        assert rec.flush(30)
        back, = eventually(lambda: events_of(client, namespace, "again"), timeout=30,
                           what="the Event written again")
        assert back["count"] == 2 and back["message"] == "reconciled"
    finally:
        rec.stop()
