"""The scheduler's cycle over the placement cache: a pass outside the lock, then
one locked step (docs/architecture.md, "The scheduling pass runs outside the
lock"). It is the cache's client, as kube-scheduler's scheduling cycle is its
cache's: it reads where the cache stands (``PlacementState.mark_pass``), runs queue
admission, filters, strategies, preemption and reclaim plans on the cache as it
stands (changing nothing), and hands the decision to ``PlacementState.assume_decision``,
which books it or refuses it as stale (``StaleDecision``).

Guarantees:

- A refused decision is made again on the new state, at most ``STALE_TRIES``
  times (``gpu_orchestrator_stale_decisions_total{action="retried"}``); then it is
  made under the lock (``assume_locked``, ``action="locked"``), so a workload
  always gets a decision.
- A decision that books nothing (Unschedulable, waiting for quota) is kept without
  the lock when nothing changed while it was made (``unchanged``); else it is made
  again.
- A pass that raises on inputs that changed under it is made again; on unchanged
  inputs the exception is a bug and is raised.
- A preemption whose pod-group victims' disruption budgets refuse is never booked:
  the victims' budgets are asked first, outside the lock (``refused``), and the
  workload waits (``PreemptionRefused``) with no victim asked to go.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from api.v1alpha1.types import GPUWorkload
from internal.metrics.domain import STALE_DECISIONS
from internal.scheduling.framework import PREEMPT, UNSCHEDULABLE, Decision
from internal.scheduling.ledger import Ledger
from internal.scheduling.outcome import PREEMPTION_REFUSED
from internal.scheduling.scheduler import Scheduler
from internal.scheduling.stamps import Mark, StaleDecision

if TYPE_CHECKING:
    from controllers.placement.state import PlacementState

#: passes outside the lock tried for one decision before it is made under the lock
STALE_TRIES = 3


def evict_message(w: GPUWorkload, decision: Decision) -> str:
    """What a preemption by ``w`` tells its pod-book victims (a reclaim says its own)."""
    return decision.evict_message or \
        f"preempted by {w.key} (priority {w.spec.priority}) to make room"


def budget_wait(decision: Decision, why: str) -> Decision:
    """The preemption ``decision`` given up for a victim's budget: the preemptor
    waits (``PREEMPTION_REFUSED``, no retry spent), saying ``why``."""
    return Decision(UNSCHEDULABLE, decision.strategy, message=why,
                    visited=decision.visited, wait_reason=PREEMPTION_REFUSED)


class Decider:
    """Decides for one workload at a time per caller; any number of callers at once."""

    def __init__(self, cache: PlacementState) -> None:
        self._cache = cache

    def decide(self, w: GPUWorkload) -> Decision:
        """Schedule ``w`` and, if it fits, book it in the ledger (assumed,
        uncommitted); see the module's guarantees."""
        cache = self._cache
        across = cache.admin_priority(w)
        for _ in range(STALE_TRIES):
            sched, mark = cache.mark_pass()
            try:
                decision = self.one_pass(sched, w, across)
            except Exception:
                if not cache.changed_since(mark):
                    raise
            else:
                if decision.outcome == PREEMPT:  # its victims' budgets first, unlocked
                    refused = self.refused(w, decision)
                    if refused is not None:
                        return refused
                if decision.ok or decision.outcome == PREEMPT:
                    try:
                        return cache.assume_decision(w, decision, mark)
                    except StaleDecision:
                        pass
                elif cache.unchanged(mark):
                    return decision
            STALE_DECISIONS.labels("retried").inc()
        STALE_DECISIONS.labels("locked").inc()
        return cache.assume_locked(w, lambda sched: self.one_pass(sched, w, across))

    def refused(self, w: GPUWorkload, decision: Decision) -> Decision | None:
        """A preemption some of whose victims' pod books would let none of their
        pods go (``PodBook.refusal``: a pod group's budgets), asked outside the lock
        before anything is booked: the preemptor waits (``PREEMPTION_REFUSED``, no
        retry spent) and nobody is evicted; None when every book would let its go."""
        for v in decision.victims:
            book = next((b for b in self._cache.pod_books if b.owns_key(v)), None)
            why = book.refusal(v, evict_message(w, decision)) if book is not None else None
            if why is not None:
                return budget_wait(decision, why)
        return None

    def one_pass(self, sched: Scheduler, w: GPUWorkload, across: bool) -> Decision:
        """One scheduling pass for ``w`` on ``sched``'s snapshot and ledger: books
        nothing (the queues' gate keeps its waiting lines)."""
        queues = self._cache.queues
        return (queues.gate(w, sched.ledger, sched, across) if queues
                else sched.schedule(w, across_namespaces=across))


def stale_reason(ledger: Ledger, nodes: Iterable[str], victims: Iterable[str], mark: Mark,
                 holds: bool, still_admitted: Callable[[], bool] | None = None) -> str:
    """Under the cache's lock: why a plan made after ``mark`` that books ``nodes``
    and takes ``victims`` may not be booked as it is, or "" when what it read is
    unchanged: the cache filled again, a victim gone, a node it books or takes
    victims on changed, or (``holds``: its queue's quota, or a group's book, read
    every holder) any holder or booking anywhere, unless ``still_admitted`` (a
    plan whose only read of the other holders was its queue's quota) says its
    queue still admits it as the holders are now. A GPUWorkload's decision
    (``PlacementState.assume_decision``) and a seed plan (``SeedDoor``) both ask it."""
    stamps = ledger.stamps
    if mark.of is not stamps:
        return "the placement cache was filled again"
    touched = set(nodes)
    for v in victims:
        a = ledger.allocation(v)
        if a is None:
            return f"victim {v} no longer holds a booking"
        touched.update(a.nodes)
    changed = stamps.changed(mark, sorted(touched))
    if changed:
        return f"node {', '.join(changed)} changed"
    if holds and stamps.holds != mark.holds and not (still_admitted and still_admitted()):
        return "the holders its queue's quota counts changed"
    return ""
