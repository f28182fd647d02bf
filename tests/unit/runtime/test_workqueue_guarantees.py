"""The work queue's stated guarantees, one at a time: FIFO order with re-adds going to
the back, a blocked ``get`` woken by an add, a ``done`` of a dirty item, a delayed
add or shutdown; delays that only ever move earlier; shutdown dropping delayed adds;
the rate limiter deciding the delay; and the client-go metrics of a named queue.

Waits are on conditions with generous bounds; no assertion depends on a duration."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any

from runtime import metrics
from runtime.workqueue import WorkQueue

LONG = 10.0  # a bound no passing run comes near
_names = itertools.count()


def in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    return t, out


def until(cond: Callable[[], bool]) -> None:
    ev = threading.Event()
    for _ in range(int(LONG / 0.005)):
        if cond():
            return
        ev.wait(0.005)
    raise AssertionError("condition not reached")


def blocked_in_get(q: WorkQueue, n: int = 1) -> None:
    """Wait until ``n`` threads wait on the queue's condition, so that what follows
    tests the wake-up and not a ``get`` that found the item already there. Peeks at
    CPython's ``Condition._waiters``: no public call tells that a thread is blocked."""
    until(lambda: len(q._cond._waiters) >= n)  # type: ignore[attr-defined]


def blocked_in_drain(q: WorkQueue) -> None:
    """Wait until a ``shut_down_with_drain`` waits (on its own condition)."""
    until(lambda: len(q._drained._waiters) >= 1)  # type: ignore[attr-defined]


class FixedDelay:
    """A rate limiter that answers ``delay`` and counts like the real ones."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.failures: dict[Hashable, int] = {}

    def when(self, item: Hashable) -> float:
        self.failures[item] = self.failures.get(item, 0) + 1
        return self.delay

    def forget(self, item: Hashable) -> None:
        self.failures.pop(item, None)

    def num_requeues(self, item: Hashable) -> int:
        return self.failures.get(item, 0)


# ------------------------------------------------------------------------- order


def test_an_item_re_added_while_processing_goes_to_the_back() -> None:
    q = WorkQueue()
    q.add("a")
    assert q.get() == ("a", False)
    assert q.processing() == 1
    q.add("b")
    q.add("a")  # dirty while processing: not handed out, not counted as queued
    q.add("a")
    assert len(q) == 1
    q.done("a")
    assert len(q) == 2 and q.processing() == 0
    assert [q.get()[0], q.get()[0]] == ["b", "a"]


def test_done_of_a_clean_item_does_not_requeue_it() -> None:
    q = WorkQueue()
    q.add("a")
    q.get()
    q.done("a")
    q.done("never-seen")  # harmless
    assert len(q) == 0 and q.processing() == 0
    assert q.get(timeout=0) == (None, False)


def test_an_item_handed_out_may_be_added_again_once_done() -> None:
    q = WorkQueue()
    q.add("a")
    q.get()
    q.done("a")
    q.add("a")
    assert q.get(timeout=0) == ("a", False)


def test_idle_for_counts_from_the_last_item_done_with_nothing_queued() -> None:
    q = WorkQueue()
    q.add("a")
    q.add("b")
    assert q.idle_for() == 0.0  # queued
    q.get()
    q.get()
    q.done("a")
    assert q.idle_for() == 0.0  # "b" still in hand
    q.add("a")
    q.done("b")
    assert q.idle_for() == 0.0  # "a" queued again
    q.get()
    q.add("a")  # dirty while in hand: put back by its done
    q.done("a")
    assert q.idle_for() == 0.0
    q.get()
    before = time.monotonic()
    q.done("a")
    time.sleep(0.05)
    idle = q.idle_for()
    assert 0.05 <= idle <= time.monotonic() - before


# ---------------------------------------------------------------- blocking get


def test_a_blocked_get_is_woken_by_an_add() -> None:
    q = WorkQueue()
    t, out = in_thread(lambda: q.get(timeout=LONG))
    blocked_in_get(q)
    q.add("a")
    t.join(LONG)
    assert out == [("a", False)]


def test_a_blocked_get_without_timeout_is_woken_by_an_add() -> None:
    q = WorkQueue()
    t, out = in_thread(q.get)
    blocked_in_get(q)
    q.add("a")
    t.join(LONG)
    assert out == [("a", False)]


def test_a_blocked_get_is_woken_when_a_dirty_item_is_done() -> None:
    q = WorkQueue()
    q.add("a")
    q.get()
    q.add("a")  # dirty
    t, out = in_thread(lambda: q.get(timeout=LONG))
    blocked_in_get(q)
    q.done("a")
    t.join(LONG)
    assert out == [("a", False)]


def test_shutdown_wakes_every_blocked_get() -> None:
    q = WorkQueue()
    waiters = [in_thread(lambda: q.get(timeout=LONG)) for _ in range(3)]
    blocked_in_get(q, 3)
    assert not q.shutting_down()
    q.shut_down()
    assert q.shutting_down()
    for t, out in waiters:
        t.join(LONG)
        assert out == [(None, True)]


def test_an_add_wakes_one_idle_worker_and_an_emptied_queue_wakes_none() -> None:
    """client-go's cond.Signal: 8 idle workers, 20 items one after another; each item
    wakes at most one worker (the queue emptying wakes nobody but a drain waiter)."""
    q = WorkQueue()
    wakeups = []
    wait = q._cond.wait  # type: ignore[attr-defined]

    def counted_wait(timeout: float | None = None) -> bool:
        got = wait(timeout)
        wakeups.append(1)
        return got

    q._cond.wait = counted_wait  # type: ignore[attr-defined,method-assign]
    handled = []

    def worker() -> None:
        while True:
            item, shutdown = q.get()
            if shutdown:
                return
            handled.append(item)
            q.done(item)

    workers = [in_thread(worker)[0] for _ in range(8)]
    blocked_in_get(q, 8)
    wakeups.clear()
    for i in range(20):
        q.add(i)
        until(lambda i=i: len(handled) == i + 1 and q.processing() == 0)
        blocked_in_get(q, 8)
    assert handled == list(range(20))
    assert len(wakeups) <= 20, f"{len(wakeups)} wake-ups for 20 items"
    q.shut_down()
    for t in workers:
        t.join(LONG)


def test_get_with_a_timeout_returns_nothing_when_idle() -> None:
    q = WorkQueue()
    assert q.get(timeout=0) == (None, False)
    assert q.get(timeout=-1) == (None, False)
    assert q.get(timeout=0.01) == (None, False)
    q.shut_down()
    assert q.get(timeout=0) == (None, True)


# ---------------------------------------------------------------------- drain


def test_drain_of_an_idle_queue_returns_at_once() -> None:
    q = WorkQueue()
    assert q.shut_down_with_drain(timeout=LONG) is True
    assert q.shutting_down()


def test_drain_gives_up_after_its_timeout_while_work_is_unfinished() -> None:
    q = WorkQueue()
    q.add("a")
    q.get()
    assert q.shut_down_with_drain(timeout=0.01) is False
    assert q.shut_down_with_drain(timeout=0) is False
    q.done("a")
    assert q.shut_down_with_drain(timeout=LONG) is True


def test_drain_waits_for_queued_items_to_be_processed() -> None:
    q = WorkQueue()
    for k in "abc":
        q.add(k)
    t, out = in_thread(lambda: q.shut_down_with_drain(timeout=LONG))
    blocked_in_drain(q)
    q.add("late")  # shut down: ignored
    got = []
    while True:
        item, shutdown = q.get()
        if shutdown:
            break
        got.append(item)
        q.done(item)
    t.join(LONG)
    assert got == ["a", "b", "c"] and out == [True]


def test_drain_without_timeout_waits_for_the_last_done() -> None:
    q = WorkQueue()
    q.add("a")
    q.add("b")
    q.get()
    q.get()
    t, out = in_thread(q.shut_down_with_drain)
    blocked_in_drain(q)
    q.done("a")
    assert out == [] and t.is_alive()
    q.done("b")
    t.join(LONG)
    assert out == [True]


# ------------------------------------------------------------------- delaying


def test_a_delay_of_zero_or_less_adds_at_once() -> None:
    q = WorkQueue()
    q.add_after("a", 0)
    q.add_after("b", -5)
    assert len(q) == 2 and q.pending_delayed() == 0


def test_delayed_items_arrive_in_the_order_they_are_due() -> None:
    q = WorkQueue()
    q.add_after("late", 0.3)
    q.add_after("early", 0.02)
    q.add_after("middle", 0.15)
    got = [q.get(timeout=LONG)[0] for _ in range(3)]
    assert got == ["early", "middle", "late"]
    assert q.pending_delayed() == 0


def test_a_later_delay_never_postpones_an_earlier_one() -> None:
    q = WorkQueue()
    q.add_after("x", 0.5)  # the second call comes well before this is due
    q.add_after("x", LONG * 100)
    assert q.pending_delayed() == 1
    assert q.get(timeout=LONG) == ("x", False)
    assert q.pending_delayed() == 0


def test_an_earlier_delay_replaces_a_later_one_once() -> None:
    q = WorkQueue()
    q.add_after("x", LONG * 100)
    q.add_after("x", 0.02)
    assert q.pending_delayed() == 1
    assert q.get(timeout=LONG) == ("x", False)
    q.done("x")
    # the superseded entry does not bring x back
    assert q.pending_delayed() == 0 and len(q) == 0


def test_the_delay_thread_keeps_serving_after_it_ran_dry() -> None:
    q = WorkQueue()
    q.add_after("a", 0.01)
    assert q.get(timeout=LONG) == ("a", False)
    until(lambda: q.pending_delayed() == 0)
    q.add_after("b", 0.01)  # the same thread, idle meanwhile, delivers it
    assert q.get(timeout=LONG) == ("b", False)


def test_a_superseded_delay_does_not_bring_the_item_back_early() -> None:
    q = WorkQueue()
    q.add_after("x", 0.2)
    q.add_after("x", 0.01)  # supersedes the 0.2 s entry
    assert q.get(timeout=LONG) == ("x", False)
    q.done("x")
    q.add_after("x", LONG * 100)  # x is next due far in the future
    # the old 0.2 s entry comes due meanwhile and must not deliver x
    assert q.get(timeout=1.0) == (None, False)
    assert q.pending_delayed() == 1


def test_the_delay_thread_is_a_named_daemon() -> None:
    """It never keeps the process alive, and a thread dump says whose it is."""
    name = f"test-wq-{next(_names)}"
    q = WorkQueue(name)
    q.add_after("x", LONG * 100)
    threads = [t for t in threading.enumerate() if t.name == f"workqueue-delay-{name}"]
    assert len(threads) == 1 and threads[0].daemon
    q.add_after("y", LONG * 100)  # one thread per queue
    assert [t.name for t in threading.enumerate()].count(f"workqueue-delay-{name}") == 1
    q.shut_down()


def test_a_delayed_item_waiting_for_a_far_one_still_arrives() -> None:
    q = WorkQueue()
    q.add_after("far", LONG * 100)
    q.add_after("near", 0.02)  # the delay thread, asleep for "far", is woken
    assert q.get(timeout=LONG) == ("near", False)
    assert q.pending_delayed() == 1


def test_shutdown_drops_delayed_adds_and_refuses_new_ones() -> None:
    q = WorkQueue()
    q.add_after("x", LONG)
    q.shut_down()
    assert q.pending_delayed() == 0
    q.add_after("y", 0.01)
    q.add_after("z", 0)
    assert q.pending_delayed() == 0
    assert q.get(timeout=LONG) == (None, True)


# -------------------------------------------------------------- rate limiting


def test_the_rate_limiter_decides_the_delay() -> None:
    now = WorkQueue(rate_limiter=FixedDelay(0))
    now.add_rate_limited("a")
    assert len(now) == 1 and now.num_requeues("a") == 1
    later = WorkQueue(rate_limiter=FixedDelay(LONG * 100))
    later.add_rate_limited("a")
    assert len(later) == 0 and later.pending_delayed() == 1
    later.forget("a")
    assert later.num_requeues("a") == 0


def test_the_default_rate_limiter_retries_soon_and_counts() -> None:
    q = WorkQueue()
    q.add_rate_limited("a")
    assert q.get(timeout=LONG) == ("a", False)
    assert q.num_requeues("a") == 1
    q.forget("a")
    assert q.num_requeues("a") == 0


# -------------------------------------------------------------------- metrics


def sample(name: str, queue: str) -> float:
    v = metrics.registry.get_sample_value(name, {"name": queue})
    return 0.0 if v is None else v


def test_a_named_queue_reports_client_go_metrics() -> None:
    name = f"test-wq-{next(_names)}"
    q = WorkQueue(name, rate_limiter=FixedDelay(0))
    q.add("a")
    q.add("a")  # deduplicated: not an add
    q.add("b")
    assert sample("workqueue_adds_total", name) == 2
    assert sample("workqueue_depth", name) == 2
    t0 = time.monotonic()
    assert q.get() == ("a", False)
    assert sample("workqueue_queue_duration_seconds_count", name) == 1
    assert sample("workqueue_depth", name) == 1
    assert sample("workqueue_work_duration_seconds_count", name) == 0
    q.done("a")
    q.done("zzz")  # never handed out: no work observed
    t1 = time.monotonic()
    assert sample("workqueue_work_duration_seconds_count", name) == 1
    assert 0 <= sample("workqueue_work_duration_seconds_sum", name) <= t1 - t0
    q.add_rate_limited("c")
    assert sample("workqueue_retries_total", name) == 1
    assert sample("workqueue_adds_total", name) == 3
    q.get()
    q.get()
    assert sample("workqueue_queue_duration_seconds_count", name) == 3
    q.shut_down()
    q.add("d")
    assert sample("workqueue_adds_total", name) == 3


def test_an_item_re_queued_after_done_is_timed_from_then() -> None:
    name = f"test-wq-{next(_names)}"
    q = WorkQueue(name)
    q.add("a")
    q.get()
    q.add("a")
    q.done("a")
    assert q.get() == ("a", False)
    assert sample("workqueue_queue_duration_seconds_count", name) == 2
    assert sample("workqueue_adds_total", name) == 2


def all_samples() -> dict[tuple[str, tuple], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in metrics.registry.collect() if fam.name.startswith("workqueue")
        for s in fam.samples if not s.name.endswith("_created")
    }


def test_an_unnamed_queue_reports_nothing() -> None:
    before = all_samples()
    q = WorkQueue()
    q.add("a")
    q.get()
    q.done("a")
    q.add_rate_limited("a")
    q.add_after("b", LONG * 100)
    assert all_samples() == before
    q.shut_down()


def test_queue_duration_is_the_time_waited() -> None:
    name = f"test-wq-{next(_names)}"
    q = WorkQueue(name)
    t0 = time.monotonic()
    q.add("a")
    q.get()
    t1 = time.monotonic()
    assert sample("workqueue_queue_duration_seconds_count", name) == 1
    assert 0 <= sample("workqueue_queue_duration_seconds_sum", name) <= t1 - t0
