"""A workload's standing read under the cache's lock (a section in progress, or
something of another object of its name to let go): what an older object of the
same name left (its booking, or what it held on to after a preemption) is let go
and the waiting woken; an eviction and a held-on booking are read as they are.
And the seed path's questions answered by the state: where a gang of parts would
go, and why a node refuses exact devices. Pure: plain dicts, no server."""

from __future__ import annotations

from controllers.placement.evictions import preempted_message
from tests.unit.controllers.placement.test_cache_adopt import Book
from tests.unit.controllers.placement.test_cache_bookings import booked, preempted
from tests.unit.controllers.placement.test_placement_state import World, child, gw


def test_a_booking_of_an_older_object_of_that_name_is_let_go_and_the_waiting_woken() -> None:
    w = World()
    booked(w, "a", gpus=2)  # uid-a
    w.state.pending.waiting.add("ns/waiter")
    w.woken.clear()
    standing = w.state.standing_of("ns/a", "uid-new")
    assert standing.booking is None and not standing.departing
    assert w.state.view().free_count("node1") == 4
    assert "ns/waiter" in w.woken


def test_what_an_older_object_held_on_to_is_let_go_and_the_waiting_woken() -> None:
    w = preempted()  # low (uid-low) departed, holding on to node1
    w.state.pending.waiting.add("ns/waiter")
    w.woken.clear()
    standing = w.state.standing_of("ns/low", "uid-new")
    assert not standing.departing
    assert w.state.departing("ns/low") is False
    assert {"ns/waiter", "ns/high"} <= set(w.woken)
    assert standing.eviction_message == preempted_message("ns/high", 100)


def test_a_standing_read_while_a_section_is_in_progress_is_the_same_as_without() -> None:
    w = preempted()
    quiet = w.state.standing_of("ns/low", "uid-low")
    with w.state._lock:  # a section in progress: read under the lock, once it is free
        busy = w.state.standing_of("ns/low", "uid-low")
    assert busy == quiet
    assert (busy.booking, busy.departing) == (None, True)
    assert busy.eviction_message == preempted_message("ns/high", 100)
    assert w.state.departing("ns/low") is True  # its own: nothing let go


def test_the_state_says_where_a_gang_of_parts_would_go_and_books_nothing() -> None:
    w = World()
    launcher = gw("g", gpusPerReplica=1)
    workers = gw("g", gpusPerReplica=4, replicas=1)
    d = w.state.schedule(launcher, [workers])
    assert d.ok and [len(p.devices) for p in d.placements] == [1, 4]
    assert {p.node for p in d.placements} == {"node1", "node2"}
    assert w.state.booking("ns/g") is None and w.state.view().free_count("node1") == 4


def test_the_state_says_why_a_node_refuses_exact_devices() -> None:
    w = World(pods=[child("busy", "uid-busy", "node1", "0,1")])
    seed = gw("seed", gpusPerReplica=2)
    why = w.state.check_exact(seed, "Pod:ns/seed", "node1", (1, 2))
    assert why is not None and "1" in why
    assert w.state.check_exact(seed, "Pod:ns/seed", "node1", (2, 3)) is None
    assert w.state.check_exact(seed, "Pod:ns/seed", "node2", (0, 1)) is None
    assert w.state.check_exact(seed, "Pod:ns/seed", "node3", (0, 1)) is not None


def test_a_seeds_own_devices_are_exactly_its_own() -> None:
    w = World(books=(Book(),))  # Pod:ns/seed holds node1's 0 and 1
    seed = gw("seed", gpusPerReplica=2)
    assert w.state.check_exact(seed, "Pod:ns/seed", "node1", (0, 1)) is None
    assert w.state.check_exact(seed, "Pod:ns/other", "node1", (0, 1)) is not None


def test_a_workload_blocked_on_pods_is_woken_when_capacity_frees() -> None:
    w = World()
    w.state.block("ns/waits-for-pods")
    w.state.capacity_freed()
    assert "ns/waits-for-pods" in w.woken


def test_unchanged_is_asked_under_the_lock_while_a_section_is_in_progress() -> None:
    w = World()
    _, mark = w.state.mark_pass()
    with w.state._lock:
        assert w.state.unchanged(mark) is True
    w.state.events.on_pod(child("b", "uid-b", "node1", "3"))
    with w.state._lock:
        assert w.state.unchanged(mark) is False
