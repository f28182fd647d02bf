"""What the placement cache answers without its lock (docs/architecture.md, "A
reconcile's sections"): the priority gate when no never-tried workload has a higher
priority, and the nodes' records. Each answer is the one the lock would give."""

from __future__ import annotations

from tests.unit.controllers.placement.test_cache_adopt import fresh, placed
from tests.unit.controllers.placement.test_placement_state import CountingLock, World
from tests.unit.scheduling.helpers import node


def _counted(w: World) -> CountingLock:
    counting = CountingLock(w.state._lock)
    w.state._lock = counting  # type: ignore[assignment]
    return counting


def test_the_priority_gate_takes_the_lock_only_when_a_higher_priority_waits() -> None:
    w = World()
    w.state.set_workload(fresh("low", 0))
    w.state.set_workload(fresh("mid", 5))
    counting = _counted(w)
    assert w.state.higher_priority_fresh("ns/mid", 5) is None  # nobody above 5
    assert w.state.higher_priority_fresh("ns/top", 9) is None
    assert counting.sections == 0
    assert w.state.higher_priority_fresh("ns/low", 0) == "ns/mid"
    assert w.state.higher_priority_fresh("ns/low", 4) == "ns/mid"
    assert counting.sections == 2


def test_the_gate_forgets_a_higher_priority_once_it_is_placed() -> None:
    """The highest never-tried priority follows the set: once ``mid`` is placed,
    ``low`` goes without asking under the lock."""
    w = World()
    w.state.set_workload(fresh("low", 0))
    w.state.set_workload(fresh("mid", 5))
    w.state.set_workload(fresh("hi", 7))
    w.state.set_workload(placed("hi", [0]))
    counting = _counted(w)
    assert w.state.higher_priority_fresh("ns/low", 6) is None
    assert counting.sections == 0
    w.state.set_workload(placed("mid", [1]))
    before = counting.sections
    assert w.state.higher_priority_fresh("ns/low", 0) is None
    assert counting.sections == before


def test_node_records_are_read_without_the_lock_and_follow_the_nodes() -> None:
    w = World()
    counting = _counted(w)
    records = w.state.node_records(["node1", "node2", "gone"])
    assert sorted(records) == ["node1", "node2"] and counting.sections == 0
    assert len(records["node1"].devices) == 4
    w.state.rebuild(lambda: ([node("node1", 8)], [], [], []))  # a refill: node2 went
    records = w.state.node_records(["node1", "node2"])
    assert sorted(records) == ["node1"] and len(records["node1"].devices) == 8
