"""Expectations: a created child counts as there until the informer shows it."""

from __future__ import annotations

from controllers.gpuworkload.expectations import Expectations


def pod(uid: str, name: str = "w-0") -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ns", "uid": uid}}


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_created_child_is_pending_until_the_informer_shows_it() -> None:
    e = Expectations()
    e.created("owner", pod("p1"))
    assert [o["metadata"]["uid"] for o in e.pending("owner")] == ["p1"]
    e.observed(pod("p1"))
    assert e.pending("owner") == []
    assert len(e) == 0


def test_an_event_seen_before_the_create_returned_leaves_a_harmless_entry_that_expires() -> None:
    clock = Clock()
    e = Expectations(ttl=60, clock=clock)
    e.observed(pod("p1"))  # the watch was faster than the create's answer
    e.created("owner", pod("p1"))
    assert len(e.pending("owner")) == 1  # the caller de-duplicates by UID against the cache
    clock.t = 61
    assert e.pending("owner") == []
    assert len(e) == 0


def test_forget_drops_every_child_of_the_owner_only() -> None:
    e = Expectations()
    e.created("a", pod("p1"))
    e.created("a", pod("p2", "w-1"))
    e.created("b", pod("p3"))
    e.forget("a")
    assert e.pending("a") == []
    assert [o["metadata"]["uid"] for o in e.pending("b")] == ["p3"]


def test_delete_tombstones_are_understood() -> None:
    class Tombstone:
        def __init__(self, obj: dict) -> None:
            self.obj = obj

    e = Expectations()
    e.created("a", pod("p1"))
    e.observed(Tombstone(pod("p1")))
    assert e.pending("a") == []
