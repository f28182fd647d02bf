"""Event correlation: which Events to write, fold or drop (the idea of client-go's
``tools/record`` EventCorrelator, in our own code).

Every occurrence an :class:`EventRecorder` is asked to record passes three steps, in
this order, each with a fixed-size LRU of its own (``cache_size`` entries):

1. **Spam filter.** A token bucket per source and involved object (``spam_burst``
   tokens, refilled at ``spam_qps``: by default 25, then one every 5 minutes). An
   occurrence that finds the bucket empty is dropped; the recorder counts it as
   ``events_dropped_total{cause="spam"}``. Repeats count too: an object that is always
   unhealthy cannot grow a long tail of writes.
2. **Aggregation.** Occurrences about the same object from the same source with the
   same type and reason form a group. The first ``aggregate_max_events`` distinct
   messages of a group (default 10) are written as Events of their own; from the next
   new message on, every occurrence of the group (whatever its message) goes into one
   combined Event whose message is ``(combined from similar events): `` followed by the
   latest message. A group is forgotten once ``aggregate_interval`` seconds (default
   600) pass without an occurrence in it; it then starts counting messages afresh.
3. **Counting.** An occurrence whose Event (same object, source, type, reason and
   message, or the group's combined Event) was already written becomes a patch of that
   Event's ``count``, ``lastTimestamp`` and ``message`` instead of a new Event.

Guarantees: memory is bounded by the three LRUs (a group keeps at most
``aggregate_max_events`` message hashes); an entry pushed out of an LRU only means the
next occurrence is treated as new (a fresh bucket, group or Event), never an error.
Time comes from ``clock`` (monotonic seconds), so tests drive it without sleeping.
Not thread-safe: the recorder calls it from its single writer thread. No I/O.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from runtime.lru import LRU
from runtime.ratelimit import TokenBucket

COMBINED_PREFIX = "(combined from similar events): "
MAX_MESSAGE = 1024

DEFAULT_CACHE_SIZE = 4096
DEFAULT_AGGREGATE_MAX_EVENTS = 10
DEFAULT_AGGREGATE_INTERVAL = 600.0
DEFAULT_SPAM_BURST = 25
DEFAULT_SPAM_QPS = 1 / 300

# The involved object as correlation sees it: apiVersion, kind, namespace, name, uid
# (never resourceVersion, which changes with every write of the object).
ObjectKey = tuple[str, str, str, str, str]


@dataclass(frozen=True, slots=True)
class Occurrence:
    """One call of the recorder: who says what about which object."""

    source: str
    involved: ObjectKey
    type: str
    reason: str
    message: str

    @property
    def group(self) -> tuple[str, ...]:
        return (self.source, *self.involved, self.type, self.reason)


@dataclass(frozen=True, slots=True)
class Write:
    """What to send for an occurrence: ``count == 1`` creates Event ``name``; a higher
    count patches it (``count``, ``lastTimestamp``, ``message``)."""

    name: str
    message: str
    count: int
    first_timestamp: str
    combined: bool


@dataclass(slots=True)
class _Written:
    name: str
    count: int
    first_timestamp: str


@dataclass(slots=True)
class _Group:
    last_seen: float
    messages: set[int]
    combined: bool = False


class EventCorrelator:
    """``correlate(occurrence, timestamp)`` decides one occurrence:

    | situation                                               | returns                     |
    | ------------------------------------------------------- | --------------------------- |
    | the (source, object) bucket is empty                    | ``None`` (drop, cause spam) |
    | new message, group below ``aggregate_max_events``       | ``Write`` count 1 (create)  |
    | message already written, group not combined             | ``Write`` count n+1 (patch) |
    | group combined, first time in this combined Event       | ``Write`` count 1 (create)  |
    | group combined, combined Event already written          | ``Write`` count n+1 (patch) |

    ``timestamp`` (the occurrence's wall time, as written in the Event) becomes the
    ``firstTimestamp`` of an Event created for it.
    """

    def __init__(
        self,
        *,
        cache_size: int = DEFAULT_CACHE_SIZE,
        aggregate_max_events: int = DEFAULT_AGGREGATE_MAX_EVENTS,
        aggregate_interval: float = DEFAULT_AGGREGATE_INTERVAL,
        spam_burst: int = DEFAULT_SPAM_BURST,
        spam_qps: float = DEFAULT_SPAM_QPS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if aggregate_max_events < 1:
            raise ValueError(f"aggregate_max_events must be >= 1, not {aggregate_max_events}")
        if aggregate_interval <= 0:
            raise ValueError(f"aggregate_interval must be > 0, not {aggregate_interval}")
        if spam_burst < 1 or spam_qps <= 0:
            raise ValueError(f"spam_burst must be >= 1 and spam_qps > 0, not {spam_burst}, "
                             f"{spam_qps}")
        self.aggregate_max_events = aggregate_max_events
        self.aggregate_interval = aggregate_interval
        self.spam_burst = spam_burst
        self.spam_qps = spam_qps
        self._clock = clock
        self._buckets: LRU[tuple[str, ...], TokenBucket] = LRU(cache_size)
        self._groups: LRU[tuple[str, ...], _Group] = LRU(cache_size)
        # (group, message) for an Event of its own, (group, None) for the combined one
        self._written: LRU[tuple[tuple[str, ...], str | None], _Written] = LRU(cache_size)
        self._last_suffix = 0

    def correlate(self, occ: Occurrence, timestamp: str) -> Write | None:
        if not self._admit(occ):
            return None
        combined = self._fold(occ)
        key = (occ.group, None if combined else occ.message)
        message = (COMBINED_PREFIX + occ.message if combined else occ.message)[:MAX_MESSAGE]
        seen = self._written.get(key)
        if seen is None:
            seen = _Written(self._new_name(occ.involved[3]), 0, timestamp)
        seen.count += 1
        self._written.put(key, seen)
        return Write(seen.name, message, seen.count, seen.first_timestamp, combined)

    # ------------------------------------------------------------------ steps
    def _admit(self, occ: Occurrence) -> bool:
        key = (occ.source, *occ.involved)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = TokenBucket(self.spam_qps, self.spam_burst, clock=self._clock)
        self._buckets.put(key, bucket)
        return bucket.try_accept()

    def _fold(self, occ: Occurrence) -> bool:
        """Records the occurrence in its group; True when it goes to the combined Event."""
        now = self._clock()
        group = self._groups.get(occ.group)
        if group is None or now - group.last_seen > self.aggregate_interval:
            group = _Group(last_seen=now, messages=set())
        group.last_seen = now
        self._groups.put(occ.group, group)
        if not group.combined:
            digest = hash(occ.message)
            if digest in group.messages:
                return False
            if len(group.messages) < self.aggregate_max_events:
                group.messages.add(digest)
                return False
            group.combined = True
            group.messages.clear()
        return True

    def _new_name(self, object_name: str) -> str:
        """``<object>.<hex>``: unique per correlator even within one nanosecond."""
        self._last_suffix = max(self._last_suffix + 1, time.time_ns())
        return f"{object_name}.{self._last_suffix:x}"
