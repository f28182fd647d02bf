"""OwnWrites: our writes the informers have not shown yet, by UID. Children count as
there until the informer shows them, a write on its way makes every cached copy
older, the latest write's mark survives an earlier one landing, read-your-writes
ends when the cache shows the write, and a binding lasts until the pod shows it."""

from __future__ import annotations

from typing import Any

from api.v1alpha1.types import DeviceExposure
from controllers.placement.state import PlacementState
from controllers.shared.own_writes import OwnWrites
from tests.unit.scheduling.helpers import node
from tests.unit.scheduling.test_pod_holdings import pod as holder_pod


def pod(uid: str, name: str = "w-0", node: str | None = None) -> dict:
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod",
                           "metadata": {"name": name, "namespace": "ns", "uid": uid},
                           "spec": {}}
    if node:
        obj["spec"]["nodeName"] = node
    return obj


def workload(uid: str, rv: int, status: dict | None = None) -> dict:
    return {"metadata": {"name": "w", "namespace": "ns", "uid": uid,
                         "resourceVersion": str(rv)}, "status": status or {}}


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class Tombstone:
    def __init__(self, obj: dict) -> None:
        self.obj = obj


# ------------------------------------------------------------------ children


def test_created_child_is_there_until_the_informer_shows_it() -> None:
    own = OwnWrites()
    own.created("owner", pod("p1"))
    assert [o["metadata"]["uid"] for o in own.children("owner")] == ["p1"]
    assert [o["metadata"]["uid"] for o in own.all_children()] == ["p1"]
    own.observed(pod("p1"))
    assert own.children("owner") == []
    assert own.all_children() == []
    assert len(own) == 0


def test_an_event_seen_before_the_create_returned_leaves_a_harmless_entry_that_expires() -> None:
    clock = Clock()
    own = OwnWrites(ttl=60, clock=clock)
    own.observed(pod("p1"))  # the watch was faster than the create's answer
    own.created("owner", pod("p1"))
    assert len(own.children("owner")) == 1  # the caller de-duplicates by UID against the cache
    clock.t = 61
    assert own.children("owner") == []
    assert len(own) == 0


def test_a_forgotten_owner_takes_its_children_only() -> None:
    own = OwnWrites()
    own.created("a", pod("p1"))
    own.created("a", pod("p2", "w-1"))
    own.created("b", pod("p3"))
    own.deleted(Tombstone({"metadata": {"uid": "a"}}))
    assert own.children("a") == []
    assert [o["metadata"]["uid"] for o in own.children("b")] == ["p3"]


def test_delete_tombstones_end_a_child() -> None:
    own = OwnWrites()
    own.created("a", pod("p1"))
    own.deleted(Tombstone(pod("p1")))
    assert own.children("a") == []


# ------------------------------------------------------- writes of an object


def test_a_write_on_its_way_makes_every_cached_copy_older_until_it_lands() -> None:
    own = OwnWrites()
    cached = workload("u1", 5)
    assert not own.is_behind(cached)  # never written: nothing is behind
    mark = own.writing(cached, {"phase": "Pending"})
    assert own.is_behind(cached)
    own.wrote(workload("u1", 9, {"phase": "Pending"}), mark)
    assert own.is_behind(cached)  # 5 < 9
    assert own.ahead_of(cached)
    assert not own.is_behind(workload("u1", 9))
    assert not own.is_behind({"metadata": {"uid": "u1"}})  # no version: never behind


def test_the_latest_mark_survives_an_earlier_write_landing() -> None:
    own = OwnWrites()
    obj = workload("u1", 7)
    first = own.writing(obj)
    own.writing(obj)
    own.wrote(obj, first)
    assert own.is_behind(obj)
    own.wrote(obj)  # a synchronous write (the commit) is the latest
    assert not own.is_behind(obj)


def test_a_cancelled_mark_stops_making_copies_older() -> None:
    own = OwnWrites()
    obj = workload("u1", 7)
    first = own.writing(obj)
    second = own.writing(obj)
    own.cancel(obj, first)  # not the latest: the later write is still on its way
    assert own.is_behind(obj)
    own.cancel(obj, second)
    assert not own.is_behind(obj)


def test_an_earlier_write_that_landed_counts_once_the_later_one_is_cancelled() -> None:
    """Write 1 lands while write 2 is on its way, then a settle drops write 2 (never
    sent): a cached copy older than write 1 is still older than our own write, and
    a gang's commit on it (a resourceVersion precondition) would conflict."""
    own = OwnWrites()
    cached = workload("u1", 5)
    first = own.writing(cached, {"phase": "Pending", "message": "waiting for quota"})
    second = own.writing(cached, {"phase": "Pending", "message": "waiting for devices"})
    own.wrote(workload("u1", 9, {"phase": "Pending"}), first)
    own.cancel(cached, second)
    assert own.is_behind(cached) and own.ahead_of(cached)
    assert not own.is_behind(workload("u1", 9)) and not own.ahead_of(workload("u1", 9))


def test_a_status_never_sent_is_not_read_back() -> None:
    """A held status the writer dropped (``StatusWriter.settle``) was never written:
    the reconcile must see the cache's status, or the same status wanted again looks
    unchanged and is never written (a queued gang stayed ``ReplicaDeleted``)."""
    own = OwnWrites()
    cached = workload("u1", 5, {"phase": "Pending", "message": "replica deleted"})
    mark = own.writing(cached, {"phase": "Pending", "message": "waiting for quota"})
    assert own.view(cached)["status"]["message"] == "waiting for quota"
    own.cancel(cached, mark)
    assert own.view(cached) is None and not own.is_behind(cached)


def test_read_your_writes_until_the_cache_shows_the_write_that_carried_it() -> None:
    own = OwnWrites()
    cached = workload("u1", 5, {"phase": "Running"})
    first = own.writing(cached, {"phase": "Running", "message": "a"})
    second = own.writing(cached, {"phase": "Pending", "message": "b"})
    own.wrote(workload("u1", 6), first)  # the earlier write landed: not the status asked
    assert own.view(workload("u1", 6))["status"]["message"] == "b"
    own.wrote(workload("u1", 8), second)
    assert own.view(workload("u1", 7))["status"]["message"] == "b"  # cache still older
    own.observed(workload("u1", 8, {"phase": "Pending", "message": "b"}))
    assert own.view(workload("u1", 8)) is None  # the cache shows it: its to tell


def test_a_synchronous_commit_is_read_back_until_the_cache_shows_it() -> None:
    own = OwnWrites()
    own.wrote(workload("u1", 12, {"phase": "Scheduled"}), status={"phase": "Scheduled"})
    assert own.view(workload("u1", 11, {}))["status"] == {"phase": "Scheduled"}
    assert own.view(workload("u1", 12, {"phase": "Scheduled"})) is None


def test_another_object_of_the_same_name_is_never_taken_for_ours() -> None:
    own = OwnWrites()
    own.writing(workload("old", 5), {"phase": "Pending", "placements": None})
    again = workload("new", 20, {"phase": "Running"})
    assert own.view(again) is None
    assert not own.is_behind(again)
    own.deleted(workload("old", 5))
    assert len(own) == 0


def test_our_finalizer_counts_as_on_its_object_until_the_object_is_deleted() -> None:
    own = OwnWrites()
    own.finalized(workload("u1", 7))  # the cache still shows none
    assert own.finalizer_added("u1")
    assert not own.finalizer_added("u2")  # another object of that name
    own.observed(workload("u1", 8))
    assert own.finalizer_added("u1")
    own.deleted(workload("u1", 8))
    assert not own.finalizer_added("u1") and len(own) == 0


# ------------------------------------------------------------------ bindings


def test_a_binding_lasts_until_the_pod_shows_its_node_or_is_deleted() -> None:
    own = OwnWrites()
    own.bound(pod("p1"))
    assert own.binding_on_its_way(pod("p1"))
    assert not own.binding_on_its_way(pod("p2", "w-0"))  # created again: another pod
    own.observed(pod("p1"))  # an update that does not show the node yet
    assert own.binding_on_its_way(pod("p1"))
    own.observed(pod("p1", node="n1"))
    assert not own.binding_on_its_way(pod("p1"))
    own.bound(pod("p3"))
    own.deleted(Tombstone(pod("p3")))
    assert not own.binding_on_its_way(pod("p3"))


# ------------------------------------------------- the placement state's rebuild


def test_a_rebuild_books_a_child_the_informer_has_not_shown_yet() -> None:
    """A state invalidated (a handler raised) right after a create is rebuilt from
    the caches, which lack the new pod: it still holds its devices, so nobody else
    is placed onto them meanwhile."""
    own = OwnWrites()
    child = {"apiVersion": "v1", "kind": "Pod",
             **holder_pod("w-0", "node1", uid="c1", ns="ns", devices="2")}
    own.created("owner", child)
    state = PlacementState(DeviceExposure.CUDA_VISIBLE_DEVICES, own_writes=own)
    state.rebuild(lambda: ([node("node1", 4)], [], [], []))
    assert state.view().holder("node1", 2) is not None
    own.observed(child)  # shown: the next rebuild reads it from the cache
    again = PlacementState(DeviceExposure.CUDA_VISIBLE_DEVICES, own_writes=own)
    again.rebuild(lambda: ([node("node1", 4)], [], [], []))
    assert again.view().holder("node1", 2) is None
