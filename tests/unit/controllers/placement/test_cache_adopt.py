"""The placement cache takes in a committed placement it does not know from the
workload's status (``adopt``, ``set_workload``: written by a previous leader), as
kube-scheduler's cache adds a pod it finds bound: booked as written, committed,
under the workload's owner and UID; a nomination found that way evicts its victims
again and waits for them. What is not a live placement (not placed, ended, being
deleted, being evicted, already booked, older than our own write) books nothing.
Pure: the state is fed plain dicts."""

from __future__ import annotations

import copy
import logging
import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import structlog

from api.v1alpha1.types import DeviceExposure, GPUWorkload, Placement
from controllers.placement.evictions import preempted_message
from controllers.placement.state import PlacementState
from controllers.shared.own_writes import OwnWrites
from internal.scheduling.framework import PREEMPT
from internal.scheduling.ledger import Ledger
from tests.unit.controllers.placement.test_placement_state import (
    NODES,
    World,
    child,
    gw,
    placed,
    pod,
)


@contextmanager
def info_logs() -> Iterator[list[dict[str, Any]]]:
    """What the cache logs, info lines too (the test run keeps only warnings)."""
    saved = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.INFO))
    try:
        with structlog.testing.capture_logs() as captured:
            yield captured
    finally:
        structlog.configure(**saved)


def events(logs: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e for e in logs if e["event"] == name]


def tried(name: str, **spec: Any) -> dict[str, Any]:
    """A workload a placement was tried for and refused: it waits for capacity."""
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
            "spec": spec,
            "status": {"conditions": [{"type": "Scheduled", "status": "False"}]}}


def fresh(name: str, priority: int) -> dict[str, Any]:
    """A workload never tried yet (the priority gate lets higher ones go first)."""
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
            "spec": {"gpusPerReplica": 1, "priority": priority}}


class Book:
    """A pod book (the seed path's kind) that books ``key`` on node1's ``devices``
    at every rebuild (none: it books nothing), and records what it is asked."""

    def __init__(self, key: str = "Pod:ns/seed", devices: tuple[int, ...] = (0, 1)) -> None:
        self.key, self.devices = key, list(devices)
        self.wakes, self.evicted = 0, []

    def owns(self, pod: dict[str, Any]) -> bool:
        return False

    def rebuild(self, ledger: Ledger, pods: list[dict[str, Any]]) -> list[str]:
        if not self.devices:
            return []
        ledger.assume(self.key, [Placement(index=0, node="node1", devices=self.devices)],
                      committed=True, owner=self.key, uid="uid-seed", priority=0,
                      check_capacity=False)
        return []

    def wake(self) -> None:
        self.wakes += 1

    def owns_key(self, key: str) -> bool:
        return key == self.key

    def refusal(self, ledger_key: str, message: str) -> str | None:
        return None

    def refill(self, ledger: Ledger, pods: list[dict[str, Any]]) -> None:
        pass

    def evict(self, key: str, message: str) -> None:
        self.evicted.append(key)


# ------------------------------------------------------------- what is adopted


def test_a_placement_in_a_status_is_booked_as_written_and_committed() -> None:
    with info_logs() as logs:
        w = World()
        obj = placed("a", [2, 3])
        obj["spec"]["priority"] = 7
        assert w.state.adopt(obj) is True
        b = w.state.booking("ns/a")
        assert b is not None
        assert [(p.node, p.devices) for p in b.placements] == [("node1", [2, 3])]
        assert (b.owner, b.uid, b.priority, b.gpus_per_replica) == ("uid-a#0", "uid-a", 7, 2)
        assert w.state.is_committed("ns/a")
        assert w.state.view().free_devices("node1") == {0, 1}
        assert events(logs, "ledger.adopted") == [
            {"event": "ledger.adopted", "log_level": "info", "workload": "ns/a",
             "nominated_over": []}]
        # not a preemptor: a release of capacity does not wake it
        w.woken.clear()
        w.state.capacity_freed()
        assert w.woken == []


def test_a_counted_placement_is_adopted_though_the_node_looks_full() -> None:
    """A device-plugin placement names no devices: it counts gpusPerReplica GPUs of
    its node. It was placed and its pods may run: it is taken in even where the
    counts leave less room (the running pods win), not refused as a new one."""
    w = World(pods=[pod("other", "node1", gpus=2)])
    obj = placed("a", [])
    obj["spec"]["gpusPerReplica"] = 3
    assert w.state.adopt(obj) is True
    b = w.state.booking("ns/a")
    assert b is not None and b.counted == {"node1": 3}
    assert w.state.view().free_count("node1") == 0


def test_a_new_uid_of_an_adopted_booking_is_told_apart_from_a_late_delete() -> None:
    """The adopted booking carries the workload's UID: a delete of an older object
    of that name releases nothing of it."""
    w = World()
    assert w.state.adopt(placed("a", [0, 1]))
    w.state.workload_gone("ns/a", "uid-older")
    assert w.state.booking("ns/a") is not None
    w.state.workload_gone("ns/a", "uid-a")
    assert w.state.booking("ns/a") is None


def test_what_is_not_a_live_placement_books_nothing() -> None:
    w = World()
    unplaced = placed("u", [0])
    unplaced["status"] = {"phase": "Pending"}
    ended = placed("e", [0])
    ended["status"]["phase"] = "Succeeded"
    deleting = placed("d", [0])
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    for obj in (unplaced, ended, deleting):
        assert w.state.adopt(obj) is True, obj["metadata"]["name"]  # nothing to adopt
        assert w.state.booking(f"ns/{obj['metadata']['name']}") is None
    assert w.state.view().free_count("node1") == 4


def test_a_booking_already_held_is_not_replaced_by_the_status() -> None:
    """The ledger's booking is newer than any status the cache shows (a decision
    whose status write has not come back yet)."""
    w = World()
    assert w.state.adopt(placed("a", [0, 1]))
    assert w.state.adopt(placed("a", [2, 3])) is True
    b = w.state.booking("ns/a")
    assert b is not None and b.placements[0].devices == [0, 1]
    assert w.state.view().free_devices("node1") == {2, 3}


def test_a_victim_being_evicted_is_not_booked_again_from_its_old_status() -> None:
    low = placed("low", [0, 1, 2, 3])
    w = World(pods=[child("low", "uid-low", "node1", "0,1,2,3"),
                    child("busy", "uid-busy", "node2", "0,1,2,3")], workloads=[low])
    assert w.state.decide(gw("high", gpusPerReplica=4, priority="high",
                             schedulingStrategy="priority")).outcome == PREEMPT
    assert w.state.adopt(low) is True  # its status still shows where it ran
    assert w.state.booking("ns/low") is None
    assert w.state.eviction("ns/low") is not None


def test_a_placement_clashing_with_a_running_pod_is_refused_and_said() -> None:
    with info_logs() as logs:
        w = World(pods=[pod("other", "node1", devices="0")])
        assert w.state.adopt(placed("a", [0, 1])) is False
        assert w.state.booking("ns/a") is None
        [failed] = events(logs, "ledger.adopt.failed")
        assert failed["log_level"] == "warning" and failed["workload"] == "ns/a"
        assert "node1: device(s) 0 held by" in failed["error"]


# ------------------------------------------------------------- nominations


def nominated(victim_owner: str) -> dict[str, Any]:
    high = placed("high", [0, 1, 2, 3], priority="high")
    high["status"].update(phase="Scheduled", nominatedOver=[victim_owner])
    return high


def test_an_adopted_nomination_evicts_its_victim_again_and_waits_for_it() -> None:
    with info_logs() as logs:
        """A preemptor's status written by a previous leader whose victim never heard of
        its eviction: the victim is evicted again (told, woken) and holds on to its
        devices until it departs; the preemptor is woken when capacity frees up."""
        w = World(pods=[child("low", "uid-low", "node1", "0,1,2,3"),
                        child("busy", "uid-busy", "node2", "0,1,2,3")],
                  workloads=[placed("low", [0, 1, 2, 3])])
        w.woken.clear()
        prio = GPUWorkload.model_validate(nominated("uid-low#0")).spec.priority
        assert w.state.adopt(nominated("uid-low#0")) is True
        assert w.woken == ["ns/low"]
        assert w.state.eviction("ns/low") == preempted_message("ns/high", prio)
        assert w.state.booking("ns/low") is None and w.state.departing("ns/low")
        assert w.state.booking("ns/high").overlap == {"uid-low#0"}
        assert events(logs, "ledger.adopted")[0]["nominated_over"] == ["uid-low#0"]
        w.woken.clear()
        w.state.capacity_freed()
        assert w.woken == ["ns/high"]


def test_a_nomination_seen_in_a_workload_event_evicts_its_victim_too() -> None:
    w = World(pods=[child("low", "uid-low", "node1", "0,1,2,3"),
                    child("busy", "uid-busy", "node2", "0,1,2,3")],
              workloads=[placed("low", [0, 1, 2, 3])])
    w.woken.clear()
    w.state.set_workload(nominated("uid-low#0"))
    assert w.woken == ["ns/low"] and w.state.eviction("ns/low") is not None


def test_an_adopted_nomination_over_a_pod_books_booking_leaves_it_to_its_book() -> None:
    """A seed-path booking is not evicted by the nomination: its pods were asked to
    go before the nomination was written, and it stays booked until they are gone."""
    book = Book()
    w = World(books=(book,))
    assert w.state.booking(book.key) is not None
    w.woken.clear()
    assert w.state.adopt(nominated(book.key)) is True
    assert w.state.booking(book.key) is not None
    assert w.state.eviction(book.key) is None
    assert w.woken == [] and book.evicted == []


# ------------------------------------------------------------- workload events


def test_a_workload_event_before_the_first_fill_books_nothing_after_it_does() -> None:
    woken: list[str] = []
    state = PlacementState(DeviceExposure.CUDA_VISIBLE_DEVICES, rng=random.Random(3),
                           enqueue_waiting=woken.extend)
    state.set_workload(placed("a", [0, 1]))  # the fill reads the caches, which have it
    assert state.booking("ns/a") is None
    state.rebuild(lambda: (NODES, [], [], []))
    state.set_workload(placed("a", [0, 1]))
    assert state.booking("ns/a") is not None and state.is_committed("ns/a")


def test_a_copy_older_than_our_own_write_is_not_adopted() -> None:
    """The cache may still show a status from before our last write of it (which
    released that placement): adopting it would undo the write."""
    writes = OwnWrites()
    state = PlacementState(DeviceExposure.CUDA_VISIBLE_DEVICES, rng=random.Random(3),
                           own_writes=writes)
    state.rebuild(lambda: (NODES, [], [], []))
    old = placed("a", [0, 1])
    old["metadata"]["resourceVersion"] = "5"
    ours = copy.deepcopy(old)
    ours["metadata"]["resourceVersion"] = "7"
    ours["status"] = {"phase": "Pending"}
    writes.wrote(ours)
    state.set_workload(old)
    assert state.booking("ns/a") is None
    newer = placed("a", [0, 1])
    newer["metadata"]["resourceVersion"] = "9"
    state.set_workload(newer)
    assert state.booking("ns/a") is not None


def test_a_tried_workload_waits_for_capacity_until_it_is_booked() -> None:
    w = World()
    w.state.set_workload(tried("waits", gpusPerReplica=1))
    w.state.capacity_freed()
    assert w.woken == ["ns/waits"]
    assert w.state.decide(gw("waits", gpusPerReplica=1)).ok
    w.state.set_workload(tried("waits", gpusPerReplica=1))  # its event, behind the booking
    w.woken.clear()
    w.state.capacity_freed()
    assert w.woken == []


def test_a_waiting_workload_shown_placed_waits_no_more() -> None:
    """Its event shows the placement a previous leader made: it is booked from it
    and no longer woken for capacity."""
    w = World()
    w.state.set_workload(tried("a", gpusPerReplica=2))
    w.state.set_workload(placed("a", [0, 1]))
    assert w.state.booking("ns/a") is not None
    w.state.capacity_freed()
    assert w.woken == []


def test_a_higher_never_tried_workload_goes_first_unless_it_is_the_asker() -> None:
    w = World()
    w.state.set_workload(fresh("low", 0))
    w.state.set_workload(fresh("high", 5))
    assert w.state.higher_priority_fresh("ns/low", 0) == "ns/high"
    assert w.state.higher_priority_fresh("ns/high", 1) is None  # itself
    assert w.state.higher_priority_fresh("ns/low", 5) is None


def test_a_never_tried_entry_the_cache_shows_placed_holds_nobody_back() -> None:
    w = World()
    w.state.set_workload(fresh("low", 0))
    w.state.set_workload(fresh("high", 5))
    shown = {"ns/high": placed("high", [0])}
    assert w.state.higher_priority_fresh("ns/low", 0, shown.get) is None
    assert w.state.higher_priority_fresh("ns/low", 0) is None  # dropped for good
