"""Each queue's usage as the placement cache counts it: in the ledger's own
``_apply`` and ``_release`` (``Ledger.usage``, a ``queue_usage.UsageIndex``), so
that a holder's GPUs come and go from its queue's sum in the very step that
books or releases them, under the cache's one lock (no watcher list, no second
lock: the queue gate reads these counts, it keeps none).

The cache gives a ledger its counts (``count``):

- when it is made, and when a rebuild fills a new one: in the same locked
  section that installs the new ledger, from what it holds;
- when a GPUQueue's spec or the queues selecting a namespace changed since the
  counts were made (the queue manager's ``generation``, which ``stale`` compares
  without the lock): every owner is attributed again, under the cache's lock,
  before the next scheduling pass, the next queue status read, or the next
  booking of a decision. Holders' stamps move (``Stamps.held``), so a decision
  made on the counts before is checked again (``decider.stale_reason``).

Without queues (``queues`` None) the ledger counts nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from internal.scheduling.ledger import Ledger
from internal.scheduling.queue_usage import UsageIndex

if TYPE_CHECKING:
    from controllers.queues.book import QueueBook


class QueueCounts:
    """Which queues' reading the ledger's usage counts by (``seen``: the queue
    manager's generation when it was made). Used under the cache's lock."""

    __slots__ = ("queues", "seen")

    def __init__(self, queues: QueueBook | None) -> None:
        self.queues = queues
        self.seen = -1

    def stale(self) -> bool:
        """Have the queues (or a namespace's) changed since the counts were made?
        One int read, safe without the lock."""
        return self.queues is not None and self.queues.manager.generation != self.seen

    def count(self, ledger: Ledger) -> Ledger:
        """Under the cache's lock: ``ledger`` counts each queue's usage from now on,
        from what it holds now, by the queues as they are now; returns it."""
        if self.queues is None:
            return ledger
        self.seen = self.queues.manager.generation  # before: a change meanwhile counts again
        ledger.usage = UsageIndex(ledger, self.queues.queue_of, self.queues.floors)
        ledger.stamps.held(())  # what a pass read of the counts before is stale
        return ledger
