"""A workload's standing is read without the placement cache's lock only when it is
one moment's: no section in progress when the read begins or ends, nothing of the
ledger changed while it was read, no booking of another object of its name to let
go (``standing.read_unlocked``); otherwise it is read in one section (no server)."""

from __future__ import annotations

from typing import Any

from api.v1alpha1.types import DeviceExposure, Placement
from controllers.placement.standing import read_unlocked
from controllers.placement.state import PlacementState
from tests.unit.controllers.placement.test_placement_state import CountingLock
from tests.unit.scheduling.helpers import node

KEY = "ns/w"


def booked() -> PlacementState:
    state = PlacementState(DeviceExposure.CUDA_VISIBLE_DEVICES)
    state.rebuild(lambda: ([node("node1", 4)], [], [], []))
    state._ledger.assume(KEY, [Placement(index=0, node="node1", devices=[0])], uid="u1")
    return state


def counted(state: PlacementState) -> CountingLock:
    counting = CountingLock(state._lock)
    state._lock = counting  # type: ignore[assignment]
    return counting


def test_a_quiet_cache_answers_without_the_lock_and_as_the_lock_would() -> None:
    state = booked()
    locked = state._standing_locked(KEY, "u1")
    counting = counted(state)
    got = state.standing_of(KEY, "u1")
    assert counting.sections == 0
    assert got == locked and got.booking is not None
    assert got.booking.placements[0].devices == [0]
    assert got.booking is not state._ledger.allocation(KEY)  # a copy, never the ledger's


def test_a_section_in_progress_sends_the_read_under_the_lock() -> None:
    state = booked()
    with state._lock:  # a writer is mid-change
        assert read_unlocked(state._lock, lambda: state._ledger, state.evictions,
                             KEY, "u1") is None
    counting = counted(state)
    with state._lock:
        state.standing_of(KEY, "u1")
    assert counting.sections == 1  # its read re-entered the section, took no other


def test_a_change_while_it_is_read_sends_the_read_under_the_lock() -> None:
    """The victim's side of a preemption: its booking departs (a ledger change,
    stamped) and its eviction is recorded, between two of the read's questions."""
    state = booked()
    ledger = state._ledger
    allocation = ledger.allocation

    def departs_meanwhile(key: str) -> Any:
        got = allocation(key)
        ledger.allocation = allocation  # type: ignore[method-assign]
        ledger.depart(KEY)
        state.evictions.evict("ns/high", [KEY], "preempted by ns/high")
        return got

    ledger.allocation = departs_meanwhile  # type: ignore[method-assign]
    assert read_unlocked(state._lock, lambda: ledger, state.evictions, KEY, "u1") is None
    standing = state.standing_of(KEY, "u1")
    assert standing.booking is None and standing.departing
    assert standing.eviction_message == "preempted by ns/high"


def test_a_refill_while_it_is_read_sends_the_read_under_the_lock() -> None:
    state = booked()
    ledgers = [state._ledger]

    def now() -> Any:
        ledgers.append(object())  # the cache filled again: another ledger
        return ledgers[0] if len(ledgers) == 2 else ledgers[-1]

    assert read_unlocked(state._lock, now, state.evictions, KEY, "u1") is None


def test_a_booking_of_another_object_of_its_name_is_let_go_under_the_lock() -> None:
    state = booked()
    counting = counted(state)
    standing = state.standing_of(KEY, "u2")  # deleted and made again: another UID
    assert counting.sections == 1
    assert standing.booking is None and state._ledger.allocation(KEY) is None
