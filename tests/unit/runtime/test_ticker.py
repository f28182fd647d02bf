"""``Ticker``: a periodic chore on a thread of its own."""

from __future__ import annotations

import threading
import time

from runtime.ticker import Ticker


def test_it_ticks_every_period_survives_a_failing_tick_and_stops() -> None:
    ticks: list[int] = []
    twice = threading.Event()

    def tick() -> None:
        ticks.append(len(ticks))
        if len(ticks) == 1:
            raise RuntimeError("a tick that fails")
        twice.set()

    t = Ticker("test", 0.01, tick)
    t.start()
    try:
        assert twice.wait(5), "the tick after a failing one never came"
    finally:
        assert t.stop(5)
    after = len(ticks)
    time.sleep(0.05)
    assert len(ticks) == after  # nothing ticks after stop


def test_stop_before_start_is_harmless() -> None:
    assert Ticker("idle", 1.0, lambda: None).stop()
