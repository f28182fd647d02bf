"""The cyclic garbage collector's settings for a controller process.

Every watch event is decoded into fresh dicts and lists and copied once more when it
is frozen for the cache, so a burst allocates containers by the hundred thousand.
With CPython's default thresholds (700, 10, 10) that meant a young-generation pass
every two or three events, a middle pass every few dozen, and full passes over the
whole heap (informer caches included) whose pauses reached 190 ms: about 5% of the
controller's CPU in the benchmark's burst and steady phase at 100 nodes
(bench/profile.md, round 8). Almost nothing here forms reference cycles (decoded
JSON never does); what the collector would find is rare, and reference counting
frees the rest at once whatever the thresholds.

``tune()`` raises the thresholds; ``settle()``, once the caches have synced, moves
what startup built (modules, the initial lists) out of the collector's sight
(``gc.freeze``), so the passes left visit what was made since. Reference counting
still frees frozen objects that go away; only a cycle among them would be kept.

``tune()`` also times every pass (``watch()``): each one's pause, the time every
thread of the process stands still while it runs, goes into
``python_gc_pause_seconds{generation}``, so a latency tail can be held against the
collector's passes (bench/README.md, round 10: none above 25 ms in the steady phase).

Only a process that owns its interpreter turns this on (``Options.tune_gc``, set
by ``main.py manager``): the thresholds are process-wide.
"""

from __future__ import annotations

import gc
import time
from typing import Any

from runtime import metrics

#: young passes every 10,000 container allocations (not 700), a middle pass every
#: 20 of those, a full pass every 100 middle ones (and only when the heap has grown
#: by a quarter since the last, as CPython always requires)
THRESHOLDS = (10_000, 20, 100)


def tune() -> None:
    """Raise the collector's thresholds to ``THRESHOLDS`` and time every pass."""
    gc.set_threshold(*THRESHOLDS)
    watch()


class _PauseTimer:
    """A ``gc.callbacks`` entry: each pass's duration, observed by generation. A pass
    runs with the interpreter held, so no two overlap and ``start`` needs no lock."""

    def __init__(self) -> None:
        self.start = 0.0
        self.children = [metrics.gc_pause_seconds.labels(str(g)) for g in range(3)]

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self.start = time.perf_counter()
        else:
            self.children[info["generation"]].observe(time.perf_counter() - self.start)


_timer = _PauseTimer()


def watch() -> None:
    """Time every collector pass into ``python_gc_pause_seconds`` (once per process)."""
    if _timer not in gc.callbacks:
        gc.callbacks.append(_timer)


def settle() -> None:
    """Collect once, then keep every object alive now out of later passes."""
    gc.collect()
    gc.freeze()
