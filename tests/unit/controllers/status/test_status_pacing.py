"""The status writer's pacing (controllers/status/pacing.py) on a fake clock that
only the test moves: a passing state (Scheduled) is held for the lag and a newer
one replaces it, what a user waits for (Running, the finalizer) is never held,
a held state waits on while placements are being made (bounded), writes go at a
bounded rate while placements are being made and drain afterwards, and nothing is
lost on ``stop``."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from api.v1alpha1.types import API_VERSION
from controllers.status.pacing import BUSY_RECHECK, Pacer, PacingOptions
from controllers.status.writer import StatusWriter
from runtime.store import Indexer, thaw
from tests.waiting import eventually

NS = "ns"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class API:
    """GPUWorkloads by name; every status write is recorded (name, phase)."""

    def __init__(self) -> None:
        self.rv = itertools.count(100)
        self.cache = Indexer()
        self.objects: dict[str, dict[str, Any]] = {}
        self.writes: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def create(self, name: str, finalizers: tuple[str, ...] = ()) -> dict[str, Any]:
        obj = {"apiVersion": API_VERSION, "kind": "GPUWorkload",
               "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}",
                            "finalizers": list(finalizers),
                            "resourceVersion": str(next(self.rv))}, "spec": {}, "status": {}}
        self.objects[name] = obj
        self.cache.add(thaw(obj))
        return thaw(obj)

    def patch(self, api_version: str, kind: str, name: str, body: Any,
              namespace: str | None = None, patch_type: str = "merge",
              subresource: str | None = None) -> dict[str, Any]:
        obj = self.objects[name]
        with self.lock:
            if subresource == "status":
                obj["status"] = thaw(body[1]["value"])
                self.writes.append((name, obj["status"].get("phase")))
            else:  # the finalizer's merge patch
                obj["metadata"]["finalizers"] = list(body["metadata"]["finalizers"])
                self.writes.append((name, "finalizer"))
            obj["metadata"]["resourceVersion"] = str(next(self.rv))
            return thaw(obj)


def status(phase: str, reason: str | None = None) -> dict[str, Any]:
    """A status as the reconciler builds it: a Scheduled one carries its Scheduled
    condition (reason ``Scheduled``: placed; or why it waits)."""
    out: dict[str, Any] = {"phase": phase, "placements": [{"node": "n1", "deviceIndices": [0]}]}
    if phase == "Scheduled":
        out["conditions"] = [{"type": "Scheduled", "status": "True",
                              "reason": reason or "Scheduled"}]
    return out


SCHEDULED = status("Scheduled")


class Paced:
    """A paced writer on a fake API and a fake clock; ``busy`` is the work queue's
    "placements under way" (clear: idle). Made by the ``paced`` fixture, which
    stops it after the test, passed or not."""

    def __init__(self) -> None:
        self.api, self.clock, self.busy = API(), Clock(), threading.Event()
        self.w: StatusWriter | None = None

    def writer(self, *, busy: bool = False, **opts: Any) -> StatusWriter:
        if busy:
            self.busy.set()
        pacer = Pacer(PacingOptions(**{"lag": 1.0, "busy_qps": 0.0, "max_lag": 5.0,
                                       "busy_hold": 0.0, **opts}),
                      busy=self.busy.is_set, clock=self.clock)
        self.w = StatusWriter(self.api, self.api.cache, threads=2, clock=self.clock,
                              pacer=pacer)
        self.w.start()
        return self.w


@pytest.fixture
def paced() -> Iterator[Paced]:
    env = Paced()
    yield env
    if env.w is not None:
        env.w.stop(1)


def settle_for(seconds: float = 0.3) -> None:
    """Real time for the writer threads to act on what they may act on (the fake
    clock does not move: a held status stays held however long this is)."""
    time.sleep(seconds)


def test_scheduled_then_running_within_the_lag_is_one_running_write(paced: Paced) -> None:
    api, clock, w = paced.api, paced.clock, paced.writer()
    raw = api.create("a")
    w.submit(raw, status("Scheduled"))
    settle_for()
    assert api.writes == []  # held: the lag has not passed
    assert w.own_writes.view(raw)["status"]["phase"] == "Scheduled"  # read your writes meanwhile
    clock.now += 0.4
    w.submit(raw, status("Running"))
    assert w.flush(5)
    assert api.writes == [("a", "Running")]
    assert api.objects["a"]["status"]["phase"] == "Running"


def test_a_held_status_is_written_once_the_lag_passed(paced: Paced) -> None:
    api, clock, w = paced.api, paced.clock, paced.writer()
    raw = api.create("a")
    w.submit(raw, status("Scheduled"))
    settle_for()
    assert api.writes == []
    clock.now += 1.0
    assert w.flush(5)
    assert api.writes == [("a", "Scheduled")]


def test_why_an_attempt_ended_is_not_replaced_by_the_retry_that_follows(paced: Paced) -> None:
    # an ended attempt's Pending status (its reason) goes at once: the next attempt's
    # Scheduled, submitted a moment later, must not fold it away
    api, clock, w = paced.api, paced.clock, paced.writer()
    raw = api.create("a")
    w.submit(raw, status("Pending"))
    settle_for()  # the fake clock stands still: a held status would not be written
    assert api.writes == [("a", "Pending")]
    w.submit(raw, status("Scheduled"))
    clock.now += 1.0
    assert w.flush(5)
    assert api.writes == [("a", "Pending"), ("a", "Scheduled")]


def test_running_and_terminal_states_are_not_held(paced: Paced) -> None:
    api, w = paced.api, paced.writer()
    a, b = api.create("a"), api.create("b")
    w.submit(a, status("Running"))
    w.submit(b, status("Failed"))
    assert w.flush(5)  # the clock never moved
    assert sorted(api.writes) == [("a", "Running"), ("b", "Failed")]


def test_the_finalizer_is_not_held_the_status_it_came_with_is(paced: Paced) -> None:
    api, w = paced.api, paced.writer()
    raw = api.create("a")
    w.submit(raw, status("Scheduled"), finalizer=True)
    eventually(lambda: api.writes == [("a", "finalizer")], what="the finalizer, at once")
    settle_for()
    assert api.writes == [("a", "finalizer")]  # Scheduled still held
    assert w.has_finalizer(raw)
    w.submit(raw, status("Running"))
    assert w.flush(5)
    assert api.writes == [("a", "finalizer"), ("a", "Running")]


def test_writes_go_at_the_busy_rate_while_placing_and_drain_afterwards(paced: Paced) -> None:
    api, clock, busy = paced.api, paced.clock, paced.busy
    w = paced.writer(busy=True, busy_qps=2.0)
    raws = [api.create(f"w{i}") for i in range(5)]
    for raw in raws:
        w.submit(raw, status("Running"))
    settle_for()
    assert len(api.writes) == 1  # one token, and the clock does not refill it
    clock.now += 0.5  # one more token at 2/s
    settle_for(0.7)
    assert len(api.writes) == 2
    busy.clear()  # placements done: what waited drains
    assert w.flush(5)
    assert sorted(n for n, _ in api.writes) == [f"w{i}" for i in range(5)]


def test_a_status_waits_for_a_token_no_longer_than_the_max_lag(paced: Paced) -> None:
    api, clock = paced.api, paced.clock
    w = paced.writer(busy=True, busy_qps=0.001, max_lag=5.0)
    raws = [api.create(f"w{i}") for i in range(3)]
    for raw in raws:
        w.submit(raw, status("Running"))
    settle_for()
    assert len(api.writes) == 1
    clock.now += 5.0  # still busy, but every status is max_lag old now
    assert w.flush(5)
    assert len(api.writes) == 3


def test_without_tokens_statuses_go_in_ready_order_each_max_lag_after_it_was_ready(
        paced: Paced) -> None:
    api, clock = paced.api, paced.clock
    w = paced.writer(busy=True, busy_qps=0.001, max_lag=5.0)
    first, held, young = api.create("first"), api.create("held"), api.create("young")
    w.submit(first, status("Running"))  # takes the one token
    eventually(lambda: api.writes == [("first", "Running")], what="the first write")
    t0 = clock.now
    w.submit(held, status("Scheduled"))  # ready at t0 + lag (1 s)
    clock.now = t0 + 0.5
    w.submit(young, status("Running"))  # ready at once
    settle_for()
    clock.now = t0 + 5.5  # ``young`` has waited max_lag, ``held`` 4.5 s since its hold
    eventually(lambda: ("young", "Running") in api.writes, what="the young status")
    settle_for()
    assert [n for n, _ in api.writes] == ["first", "young"]
    clock.now = t0 + 6.0
    eventually(lambda: ("held", "Scheduled") in api.writes, what="the held status")
    assert w.flush(5)


def test_a_held_status_waits_on_while_placing_and_goes_when_they_pause(paced: Paced) -> None:
    api, clock, busy = paced.api, paced.clock, paced.busy
    w = paced.writer(busy=True, busy_hold=5.0)
    raw = api.create("a")
    w.submit(raw, status("Scheduled"))
    clock.now += 1.0  # the lag passed, but placements are being made
    settle_for()
    clock.now += 1.0
    settle_for()
    assert api.writes == []
    busy.clear()  # they paused: it goes at the next look
    clock.now += BUSY_RECHECK
    eventually(lambda: api.writes == [("a", "Scheduled")], what="the held status, once idle")


def test_scheduled_then_running_while_placing_is_one_running_write(paced: Paced) -> None:
    # in a burst the pods run after the lag: the Running status still folds the
    # Scheduled one, which would otherwise be a write of its own
    api, clock = paced.api, paced.clock
    w = paced.writer(busy=True, busy_hold=5.0)
    raw = api.create("a")
    w.submit(raw, status("Scheduled"))
    clock.now += 3.0
    settle_for()
    assert api.writes == []
    w.submit(raw, status("Running"))
    assert w.flush(5)
    assert api.writes == [("a", "Running")]


def test_a_held_status_waits_on_no_longer_than_the_busy_hold(paced: Paced) -> None:
    api, clock = paced.api, paced.clock
    w = paced.writer(busy=True, busy_hold=5.0)
    raw = api.create("a")
    w.submit(raw, status("Scheduled"))
    clock.now += 1.0 + 4.9
    settle_for()
    assert api.writes == []
    clock.now += 0.1  # lag + busy_hold: written though placements go on
    eventually(lambda: api.writes == [("a", "Scheduled")], what="the held status")


def test_stop_writes_what_is_held(paced: Paced) -> None:
    api, w = paced.api, paced.writer()
    raw = api.create("a")
    w.submit(raw, status("Scheduled"))
    settle_for()
    assert api.writes == []
    assert w.stop(5)  # nothing lost: the held status is written
    assert api.writes == [("a", "Scheduled")]


# ------------------------------------------------------------------- the pacer alone


def test_pacer_holds_only_passing_states() -> None:
    clock = Clock()
    p = Pacer(PacingOptions(lag=1.5), clock=clock)
    assert p.ready_at(SCHEDULED, 10.0, False) == 11.5
    assert p.ready_at({"phase": "Pending"}, 10.0, False) == 10.0
    assert p.ready_at(SCHEDULED, 10.0, True) == 10.0
    for phase in ("Running", "Succeeded", "Failed"):
        assert p.ready_at({"phase": phase}, 10.0, False) == 10.0
    p.drain()
    assert p.ready_at(SCHEDULED, 10.0, False) == 10.0


def test_pacer_does_not_hold_a_wait_for_a_preemption_or_for_devices() -> None:
    # a Scheduled status that says why the workload does not start yet is not a
    # passing state: folded into the Running that follows, the user never sees why
    p = Pacer(PacingOptions(lag=2.0, busy_hold=5.0), busy=lambda: True)
    for reason in ("WaitingForPreemption", "WaitingForDevices"):
        assert p.ready_at(status("Scheduled", reason), 10.0, False, 10.0) == 10.0
    assert p.ready_at({"phase": "Scheduled"}, 10.0, False, 10.0) == 10.0  # no condition
    assert p.ready_at(SCHEDULED, 10.0, False, 10.0) == 12.0


def test_pacer_holds_a_passing_state_on_while_busy_up_to_the_busy_hold() -> None:
    clock, busy = Clock(), [True]
    p = Pacer(PacingOptions(lag=2.0, busy_hold=5.0), busy=lambda: busy[0], clock=clock)
    since = clock.now
    assert p.ready_at(SCHEDULED, since, False, since + 1.0) == since + 2.0
    assert p.ready_at(SCHEDULED, since, False, since + 2.0) == \
        since + 2.0 + BUSY_RECHECK
    assert p.ready_at(SCHEDULED, since, False, since + 6.9) == since + 7.0
    assert p.ready_at(SCHEDULED, since, False, since + 8.0) == since + 7.0
    assert p.ready_at({"phase": "Running"}, since, False, since + 3.0) == since
    busy[0] = False
    assert p.ready_at(SCHEDULED, since, False, since + 3.0) == since + 2.0
    busy[0] = True
    assert Pacer(PacingOptions(lag=2.0, busy_hold=0.0), busy=lambda: True).ready_at(
        SCHEDULED, since, False, since + 3.0) == since + 2.0


def test_pacer_tokens_refill_at_the_busy_rate_only_while_busy() -> None:
    clock, busy = Clock(), [True]
    p = Pacer(PacingOptions(busy_qps=4.0, max_lag=5.0), busy=lambda: busy[0], clock=clock)
    since = clock.now
    assert p.admit(since, clock.now) == 0.0  # the bucket's one token
    assert p.admit(since, clock.now) == 0.25  # the next in 1/4 s
    clock.now += 0.25
    assert p.admit(since, clock.now) == 0.0
    busy[0] = False
    assert [p.admit(since, clock.now) for _ in range(10)] == [0.0] * 10  # idle: no bound
    busy[0] = True
    assert p.admit(since, clock.now) > 0  # idle sends took no token, and none came since
    assert p.admit(since - 5.0, clock.now) == 0.0  # max_lag old: sent anyway
