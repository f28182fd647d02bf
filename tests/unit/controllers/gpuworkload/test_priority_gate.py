"""The priority gate holds a workload back only behind one the cache still shows
never tried (``PendingSet.higher_fresh`` with ``current``). Its set follows the
informer's events; an entry of higher priority whose event was not taken in yet
(placed, tried or deleted meanwhile) would hold every lower workload back, and the
backstop would not step in (each wait is a reconcile)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.unit.controllers.fakes import NS, Env
from tests.unit.controllers.queues.test_queue_gate import Cluster

HIGH, LOW = "ns-a/high", "ns-a/low"


def _submitted(c: Cluster) -> dict[str, Any]:
    """A priority-50 workload and a priority-0 one, both never tried, both taken in
    by the state from the informer; returns the high one as cached."""
    c.submit("ns-a", "high", 1, priority=50)
    c.submit("ns-a", "low", 1)
    for name in ("high", "low"):
        c.state.events.on_workload(c.workloads.get_by_name(name, "ns-a"))
    return dict(c.workloads.get_by_name("high", "ns-a"))


def _cached(c: Cluster) -> Callable[[str], Any]:
    return lambda key: c.workloads.get_by_name(key.split("/", 1)[1], key.split("/", 1)[0])


def test_a_lower_workload_waits_behind_a_higher_one_never_tried() -> None:
    c = Cluster()
    _submitted(c)
    assert c.state.higher_priority_fresh(LOW, 0, _cached(c)) == HIGH
    assert c.state.higher_priority_fresh(HIGH, 50, _cached(c)) is None


def test_a_higher_workload_placed_without_its_event_holds_nobody_back() -> None:
    c = Cluster()
    high = _submitted(c)
    # placed (by a reconcile whose status event the state never took in)
    c.workloads.add({**high, "status": {
        "phase": "Scheduled", "placements": [{"index": 0, "node": "node1", "devices": [0]}],
        "conditions": [{"type": "Scheduled", "status": "True", "reason": "Scheduled"}]}})
    assert c.state.higher_priority_fresh(LOW, 0, _cached(c)) is None
    # and the stale entry is gone for good: not held back even without the cache
    assert c.state.higher_priority_fresh(LOW, 0) is None


def test_a_higher_workload_tried_or_deleted_without_its_event_holds_nobody_back() -> None:
    c = Cluster()
    high = _submitted(c)
    c.workloads.add({**high, "status": {"phase": "Pending", "conditions": [
        {"type": "Scheduled", "status": "False", "reason": "WaitingForQuota"}]}})
    assert c.state.higher_priority_fresh(LOW, 0, _cached(c)) is None

    c = Cluster()
    _submitted(c)
    c.workloads.delete(HIGH)
    assert c.state.higher_priority_fresh(LOW, 0, _cached(c)) is None


def test_the_reconciler_holds_a_lower_workload_behind_a_higher_one_never_tried() -> None:
    env = Env()
    env.workload("high", gpusPerReplica=1, priority=50)
    env.workload("low", gpusPerReplica=1)
    result = env.reconcile("low")
    assert result is not None and 0 < result.requeue_after <= 1.0
    assert env.decisions == 0 and not env.status("low").get("placements")
    assert not any(c["type"] == "Scheduled" for c in env.status("low").get("conditions") or ())


def test_the_reconciler_places_a_lower_workload_behind_a_stale_entry() -> None:
    """Through the reconcile: the gate asks the reconciler's cache."""
    env = Env()
    env.workload("high", gpusPerReplica=1, priority=50)
    env.workload("low", gpusPerReplica=1)
    # the high one is deleted, and the state never hears of it (a lost event)
    env.workloads.delete(f"{NS}/high")
    env.settle("low")
    assert env.status("low").get("placements"), env.status("low")
