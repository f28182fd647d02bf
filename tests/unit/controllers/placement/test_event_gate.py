"""The informers' events never wait for a scheduling pass: the pass runs outside the
placement lock, so an event is applied at once while it runs; and while another
section holds the lock, an event is deferred and applied, in order, as soon as the
lock is free (controllers/placement/event_gate.py)."""

from __future__ import annotations

import threading
import types
from typing import Any

from api.v1alpha1.types import DeviceExposure
from controllers.informers import placement_handler
from controllers.placement.events import CacheEvents
from controllers.placement.state import PlacementState
from tests.unit.controllers.placement.test_placement_state import gw, pod
from tests.unit.scheduling.helpers import node
from tests.waiting import eventually


def blocked_decide(state: PlacementState) -> tuple[threading.Event, threading.Thread]:
    """A decide of ``state`` stuck in its scheduling pass until the event is set
    (the pass outside the lock)."""
    entered, release = threading.Event(), threading.Event()
    schedule = state.scheduler.schedule

    def slow(*args: Any, **kw: Any) -> Any:
        entered.set()
        release.wait(10)
        return schedule(*args, **kw)
    state.scheduler.schedule = slow  # type: ignore[method-assign]
    t = threading.Thread(target=state.decide, args=(gw("long", gpusPerReplica=1),))
    t.start()
    assert entered.wait(5)
    return release, t


def handler(state: PlacementState, on_pod: Any = CacheEvents.on_pod) -> Any:
    source = types.SimpleNamespace(current=state)  # the source holding ``state``
    return placement_handler(source, "Pod", on_pod,  # type: ignore[arg-type]
                             CacheEvents.on_pod_deleted)


def test_a_watch_event_does_not_wait_for_a_long_decide() -> None:
    """Applied at once, not deferred: the scheduling pass holds no lock."""
    state = PlacementState(DeviceExposure.CUDA_VISIBLE_DEVICES)
    state.rebuild(lambda: ([node("node1", 4)], [], [], []))
    release, decider = blocked_decide(state)
    h = handler(state)
    theirs = pod("theirs", "node1", devices="0,1")
    watch = threading.Thread(target=h.on_add, args=(theirs,))
    watch.start()
    watch.join(1.0)
    try:
        assert not watch.is_alive(), "the watch thread waited for the scheduling pass"
        assert state.events_deferred() == 0
        assert state.view().pod("uid-theirs") is not None  # applied while it runs
    finally:
        release.set()
        decider.join(5)


def blocked_section(state: PlacementState) -> tuple[threading.Event, threading.Thread]:
    """Another thread inside one of the state's locked sections until the event is
    set (a rebuild reading the caches, say)."""
    entered, release = threading.Event(), threading.Event()

    def hold() -> None:
        with state._lock:
            entered.set()
            release.wait(10)
    t = threading.Thread(target=hold)
    t.start()
    assert entered.wait(5)
    return release, t


def test_a_watch_event_does_not_wait_for_a_locked_section() -> None:
    state = PlacementState(DeviceExposure.CUDA_VISIBLE_DEVICES)
    state.rebuild(lambda: ([node("node1", 4)], [], [], []))
    release, holder = blocked_section(state)
    h = handler(state)
    theirs = pod("theirs", "node1", devices="0,1")
    watch = threading.Thread(target=h.on_add, args=(theirs,))
    watch.start()
    watch.join(1.0)
    try:
        assert not watch.is_alive(), "the watch thread waited for the lock"
        assert state.events_deferred() == 1
    finally:
        release.set()
        holder.join(5)
    eventually(lambda: state.view().pod("uid-theirs") is not None, timeout=5,
               what="the deferred event applied once the section released the lock")


def test_deferred_events_keep_their_order_and_later_ones_wait_behind_them() -> None:
    state = PlacementState(DeviceExposure.CUDA_VISIBLE_DEVICES)
    state.rebuild(lambda: ([node("node1", 4)], [], [], []))
    release, decider = blocked_section(state)
    h = handler(state)
    theirs = pod("theirs", "node1", devices="0,1")
    h.on_add(theirs)
    h.on_delete(theirs)
    release.set()
    decider.join(5)
    h.on_add(pod("next", "node1", devices="2"))  # after the delete, never before it
    eventually(lambda: state.view().pod("uid-next") is not None, timeout=5, what="applied")
    assert state.view().pod("uid-theirs") is None  # added, then deleted: in that order


def test_a_deferred_event_that_raises_invalidates_the_state() -> None:
    state = PlacementState(DeviceExposure.CUDA_VISIBLE_DEVICES)
    state.rebuild(lambda: ([node("node1", 4)], [], [], []))
    release, decider = blocked_section(state)

    def bug(events: Any, obj: Any) -> None:
        raise RuntimeError("a bug while reading the pod")
    h = handler(state, on_pod=bug)
    h.on_add(pod("theirs", "node1", devices="0"))
    release.set()
    decider.join(5)
    eventually(lambda: not state.ready, timeout=5, what="the state invalidated")
