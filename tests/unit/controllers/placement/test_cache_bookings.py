"""How the placement cache lets bookings go and whom it wakes: ``forget`` (the
booking goes, and with ``departed`` what it held on to), ``depart`` and
``departed`` (a victim holds on to its devices until its children are gone),
``commit``, ``workload_gone`` (by UID: a late delete of an older object releases
nothing of the new one), ``capacity_freed``; and a cache before its first fill.
What is asserted is what a workload sees: its booking, the free devices, who is
woken, and the log lines an operator reads. Pure: the state is fed plain dicts."""

from __future__ import annotations

from typing import Any

from controllers.placement.cache import PlacementCache
from internal.scheduling.framework import PREEMPT
from tests.unit.controllers.placement.test_cache_adopt import (
    Book,
    events,
    info_logs,
    tried,
)
from tests.unit.controllers.placement.test_placement_state import World, child, gw, placed

BUSY_NODE2 = child("busy", "uid-busy", "node2", "0,1,2,3")


def booked(w: World, name: str, gpus: int = 4) -> None:
    """``name`` booked on node1 (node2 is busy), committed."""
    assert w.state.decide(gw(name, gpusPerReplica=gpus)).ok
    assert w.state.commit(f"ns/{name}")


def preempted(books: tuple[Any, ...] = ()) -> World:
    """high (nominated, blocked) preempted low (evicted, departing) on node1."""
    w = World(pods=[child("low", "uid-low", "node1", "0,1,2,3"), BUSY_NODE2],
              workloads=[placed("low", [0, 1, 2, 3])], books=books)
    assert w.state.decide(gw("high", gpusPerReplica=4, priority="high",
                             schedulingStrategy="priority")).outcome == PREEMPT
    w.woken.clear()
    return w


# ------------------------------------------------------------- forget


def test_a_forgotten_booking_frees_its_devices_and_wakes_the_waiting() -> None:
    w = World(pods=[BUSY_NODE2])
    booked(w, "a")
    w.state.set_workload(tried("waits", gpusPerReplica=1))
    w.woken.clear()
    w.state.forget("ns/a")
    assert w.state.booking("ns/a") is None
    assert w.state.view().free_count("node1") == 4
    assert w.woken == ["ns/waits"]
    w.woken.clear()
    w.state.forget("ns/a")  # nothing left to release: nobody is woken
    w.state.forget("ns/never-booked")
    assert w.woken == []


def test_a_forget_keeps_what_a_departed_booking_holds_on_to_unless_asked() -> None:
    w = World(pods=[BUSY_NODE2])
    booked(w, "a")
    w.state.depart("ns/a")
    w.state.forget("ns/a")
    assert w.state.departing("ns/a")
    assert w.state.view().free_count("node1") == 0
    w.state.set_workload(tried("waits", gpusPerReplica=1))
    w.woken.clear()
    w.state.forget("ns/a", departed=True)
    assert not w.state.departing("ns/a")
    assert w.state.view().free_count("node1") == 4
    assert w.woken == ["ns/waits"]


def test_a_forgotten_preemptor_waits_for_nothing_any_more() -> None:
    """Its booking gone, it is no longer woken when pods go, nor when a victim
    takes in its eviction."""
    w = preempted()
    w.state.forget("ns/high")
    w.state.capacity_freed()
    assert "ns/high" not in w.woken
    w.state.evicted("ns/low")
    assert "ns/high" not in w.woken


# ------------------------------------------------------------- depart


def test_a_departing_booking_holds_its_devices_until_it_has_departed() -> None:
    w = World(pods=[BUSY_NODE2])
    booked(w, "a")
    w.state.depart("ns/a")
    assert w.state.booking("ns/a") is None and w.state.departing("ns/a")
    assert not w.state.departing("ns/other")
    assert w.state.view().free_count("node1") == 0
    assert not w.state.decide(gw("b", gpusPerReplica=1)).ok
    w.state.set_workload(tried("b", gpusPerReplica=1))
    w.woken.clear()
    w.state.departed("ns/a")
    assert w.woken == ["ns/b"]
    assert not w.state.departing("ns/a")
    assert w.state.decide(gw("b", gpusPerReplica=1)).ok
    w.woken.clear()
    w.state.departed("ns/a")  # said twice: nothing more frees up
    assert w.woken == []


def test_a_departing_preemptor_waits_for_nothing_any_more() -> None:
    w = preempted()
    w.state.depart("ns/high")
    w.state.capacity_freed()
    assert "ns/high" not in w.woken
    w.state.evicted("ns/low")
    assert "ns/high" not in w.woken


# ------------------------------------------------------------- commit


def test_a_commit_of_a_booking_that_went_commits_nothing_and_is_said() -> None:
    with info_logs() as logs:
        w = World(pods=[BUSY_NODE2])
        assert w.state.decide(gw("a", gpusPerReplica=2)).ok
        assert not w.state.is_committed("ns/a")
        assert w.state.commit("ns/a") is True
        assert w.state.is_committed("ns/a")
        assert events(logs, "placement.booking_lost") == []
        w.state.forget("ns/a")
        assert w.state.commit("ns/a") is False
        assert not w.state.is_committed("ns/a")
        assert events(logs, "placement.booking_lost") == [
            {"event": "placement.booking_lost", "log_level": "info", "workload": "ns/a",
             "effect": "nothing committed; the next reconcile reads what is there"}]


# ------------------------------------------------------------- workload_gone


def test_a_late_delete_of_an_older_object_releases_nothing_of_the_new_one() -> None:
    with info_logs() as logs:
        book = Book("Pod:ns/unrelated", devices=())
        w = World(pods=[BUSY_NODE2], books=(book,))
        assert w.state.decide(gw("w", uid="uid-new", gpusPerReplica=2)).ok
        w.state.set_workload(tried("waits", gpusPerReplica=4))
        w.woken.clear()
        book.wakes = 0
        w.state.workload_gone("ns/w", "uid-old")
        assert w.state.booking("ns/w") is not None
        assert w.woken == [] and book.wakes == 0
        assert events(logs, "workload.delete.stale") == [
            {"event": "workload.delete.stale", "log_level": "info", "workload": "ns/w",
             "uid": "uid-old", "booked_uid": "uid-new"}]
        w.state.workload_gone("ns/w", "uid-new")
        assert w.state.booking("ns/w") is None
        assert w.woken == ["ns/waits"] and book.wakes == 1


def test_a_deleted_waiting_workload_is_woken_no_more() -> None:
    w = World()
    w.state.set_workload(tried("waits", gpusPerReplica=8))
    w.state.workload_gone("ns/waits", "uid-waits")
    w.woken.clear()
    w.state.capacity_freed()
    assert w.woken == []


# ------------------------------------------------------------- waking


def test_freed_capacity_wakes_the_waiting_the_blocked_preemptors_and_the_books() -> None:
    book = Book("Pod:ns/unrelated", devices=())
    w = preempted(books=(book,))
    w.state.set_workload(tried("waits", gpusPerReplica=1))
    book.wakes = 0
    w.state.capacity_freed()
    assert sorted(w.woken) == ["ns/high", "ns/waits"]
    assert book.wakes == 1


def test_a_cache_before_its_first_fill_holds_nothing_and_wakes_its_books() -> None:
    woken: list[str] = []
    book = Book()
    cache = PlacementCache(enqueue_waiting=woken.extend, pod_books=(book,))
    assert not cache.ready and cache.slices is None
    assert cache.booking("ns/a") is None and not cache.is_committed("ns/a")
    assert not cache.claim_going("uid-claim")
    assert cache.node_gpus() == ({}, {})
    cache.forget("ns/a", departed=True)
    assert woken == [] and book.wakes == 0
    cache.capacity_freed()
    assert woken == [] and book.wakes == 1
