"""The manager's one placement state (``PlacementStateSource``): built once for all
its callers, built again after it was invalidated, with every pod book registered
before."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from api.v1alpha1.types import DeviceExposure
from controllers.placement.source import PlacementStateSource
from controllers.placement.state import PlacementState


class Book:
    def owns(self, pod: Any) -> bool:
        return False

    def owns_key(self, key: str) -> bool:
        return False

    def rebuild(self, ledger: Any, pods: list[Any]) -> list[str]:
        return []

    def refusal(self, ledger_key: str, message: str) -> str | None:
        return None

    def refill(self, ledger: Any, pods: list[Any]) -> None:
        pass

    def wake(self) -> None:
        pass

    def evict(self, ledger_key: str, message: str) -> None:
        pass


def test_callers_share_one_state_until_it_is_invalidated() -> None:
    built: list[PlacementState] = []

    def build(books: tuple[Any, ...]) -> PlacementState:
        state = PlacementState(DeviceExposure.CUDA_VISIBLE_DEVICES, pod_books=books)
        built.append(state)
        return state

    states = PlacementStateSource(build, lambda s: s.rebuild(lambda: ([], [], [], [])))
    book = Book()
    states.add_pod_book(book)
    assert states.current is None and states.if_ready() is None
    got: list[PlacementState] = []
    threads = [threading.Thread(target=lambda: got.append(states.get())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(built) == 1 and all(s is built[0] for s in got)
    assert built[0].ready and built[0].pod_books == (book,)
    built[0].invalidate("a handler raised")
    assert states.if_ready() is None
    # filled again in place: one state, never replaced
    assert states.get() is built[0] and len(built) == 1 and built[0].ready
    assert built[0].generation == 2 and built[0].pod_books == (book,)


def test_a_reconcile_in_flight_across_an_invalidation_decides_and_commits_in_the_live_ledger(
) -> None:
    """A reconcile decided (booked, not committed), then a handler raised and the
    state was filled again from the caches before the reconcile committed: its
    booking is still held in the ledger the events feed, so nobody else is given its
    devices, and its commit lands there. Before, the refill built a second state; the
    reconcile committed into the discarded one while the new one gave the same
    devices to the next workload."""
    from tests.unit.controllers.placement.test_placement_state import gw
    from tests.unit.scheduling.helpers import node

    states = PlacementStateSource(
        lambda books: PlacementState(DeviceExposure.CUDA_VISIBLE_DEVICES, pod_books=books),
        lambda s: s.rebuild(lambda: ([node("node1", 4)], [], [], [])))
    state = states.get()  # the reconcile's state, held across the refill
    first = state.decide(gw("first", gpusPerReplica=4))
    assert first.ok
    state.invalidate("the Pod update handler raised")
    other = states.get().decide(gw("other", gpusPerReplica=1))  # another worker, after
    assert not other.ok, "the devices of a decision in flight were given again"
    assert state.commit("ns/first") and state.view().is_committed("ns/first")
    assert states.get() is state and state.generation == 2


def test_a_decision_in_flight_that_a_refill_finds_held_is_dropped_and_says_so() -> None:
    """The lost event was a pod on the decided devices: the refill keeps the pod, drops
    the decision, and the commit says there was nothing to commit."""
    from tests.unit.controllers.placement.test_placement_state import gw, pod
    from tests.unit.scheduling.helpers import node

    pods: list[Any] = []
    state = PlacementState(DeviceExposure.CUDA_VISIBLE_DEVICES)
    state.rebuild(lambda: ([node("node1", 4)], [], [], list(pods)))
    assert state.decide(gw("first", gpusPerReplica=4)).ok
    pods.append(pod("theirs", "node1", devices="0"))  # its event was the one lost
    state.invalidate("the Pod add handler raised")
    problems = state.rebuild(lambda: ([node("node1", 4)], [], [], list(pods)))
    assert any("ns/first" in p and "dropped" in p for p in problems)
    assert not state.commit("ns/first")
    assert state.view().device_owners("node1", 0) == frozenset({"pod:uid-theirs"})


def test_a_pod_book_registered_after_the_state_was_built_is_refused() -> None:
    states = PlacementStateSource(lambda books: PlacementState(
        DeviceExposure.CUDA_VISIBLE_DEVICES, pod_books=books))
    states.get()
    with pytest.raises(RuntimeError):
        states.add_pod_book(Book())
