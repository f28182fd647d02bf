"""Quota arithmetic of GPU queues: who may take how many GPUs, pure.

A queue guarantees ``nominal`` GPUs. Queues of one cohort lend each other what they
do not use: each puts ``lendable`` (its ``lendingLimit``, else its whole nominal)
into the cohort's *pool*, and keeps ``reserved = nominal - lendable`` for itself
alone. A queue's use beyond its reserved part is drawn from the pool, so

- a queue fits ``need`` more GPUs when
  ``used + need <= nominal + borrowingLimit`` (no cohort: ``<= nominal``) and the
  pool's use after it stays within the pool (``Quotas.check``);
- ``borrowed = max(0, used - nominal)``; a queue under its nominal whose nominal is
  taken by borrowers gets it back by *reclaim* (``reclaimable``);
- fair share among borrowers: the lowest ``borrowed / weight`` goes first
  (``share``).

Usage is a ``Fraction`` of GPUs: a share or a MIG instance counts as its part of a
device (``holder_gpus``). What counts is the ledger's holders (docs/queues.md).

No preemption cycles. Reclaim takes only from a queue that is *borrowing*
(over its nominal), and only for a workload whose queue stays within its nominal
once it is admitted. The reclaimer's queue is then not borrowing, so the queue it
took from can never take the devices back from it by reclaim (it could only
reclaim from a queue that borrows); and a victim's queue keeps at least what
it was over, minus the victim.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction

from api.v1alpha1.queues import GPUQueue, ReclaimWithinCohort, WithinQueue

ZERO = Fraction(0)


def gpus_text(f: Fraction) -> str:
    """``8``, ``2.5``, ``0.33``: GPUs as a user reads them."""
    if f.denominator == 1:
        return str(f.numerator)
    return f"{float(f):.2f}".rstrip("0").rstrip(".")


@dataclass(frozen=True, slots=True)
class Queue:
    """One GPUQueue's quota, as the arithmetic reads it."""

    name: str
    nominal: Fraction
    borrowing_limit: Fraction | None = None  # None: as much as the cohort lends
    lending_limit: Fraction | None = None  # None: all of its nominal
    cohort: str | None = None
    weight: int = 1
    reclaim: ReclaimWithinCohort = ReclaimWithinCohort.ANY
    within: WithinQueue = WithinQueue.NEVER

    @classmethod
    def of(cls, q: GPUQueue) -> Queue:
        s = q.spec
        return cls(
            name=q.metadata.name,
            nominal=Fraction(s.nominal_gpus),
            borrowing_limit=None if s.borrowing_limit is None else Fraction(s.borrowing_limit),
            lending_limit=None if s.lending_limit is None
            else Fraction(min(s.lending_limit, s.nominal_gpus)),
            cohort=s.cohort or None,
            weight=max(1, s.weight),
            reclaim=s.preemption.reclaim_within_cohort,
            within=s.preemption.within_queue,
        )

    @property
    def lendable(self) -> Fraction:
        if self.cohort is None:
            return ZERO
        return self.nominal if self.lending_limit is None else self.lending_limit

    @property
    def reserved(self) -> Fraction:
        return self.nominal - self.lendable

    def ceiling(self) -> Fraction | None:
        """The most it may use (None: bounded only by the cohort's pool)."""
        if self.cohort is None:
            return self.nominal
        if self.borrowing_limit is None:
            return None
        return self.nominal + self.borrowing_limit


@dataclass(frozen=True, slots=True)
class QueueUsage:
    """What ``kubectl get gpuqueues`` shows of one queue."""

    used: Fraction
    borrowed: Fraction
    lent: Fraction


class Quotas:
    """The queues, by name and by cohort. ``used`` maps queue name -> GPUs used."""

    def __init__(self, queues: Iterable[Queue]) -> None:
        self.queues: dict[str, Queue] = {q.name: q for q in queues}
        self.cohorts: dict[str, list[Queue]] = {}
        for q in self.queues.values():
            if q.cohort is not None:
                self.cohorts.setdefault(q.cohort, []).append(q)

    def get(self, name: str) -> Queue | None:
        return self.queues.get(name)

    def members(self, q: Queue) -> list[Queue]:
        """The queues of ``q``'s cohort, ``q`` included (just ``q`` with no cohort)."""
        return self.cohorts.get(q.cohort, [q]) if q.cohort is not None else [q]

    # ------------------------------------------------------------- the pool

    def pool(self, q: Queue) -> Fraction:
        return sum((p.lendable for p in self.members(q)), ZERO)

    @staticmethod
    def _pool_use(p: Queue, used: Fraction) -> Fraction:
        return max(ZERO, used - p.reserved)

    def pool_used(self, q: Queue, used: Mapping[str, Fraction]) -> Fraction:
        return sum((self._pool_use(p, used.get(p.name, ZERO)) for p in self.members(q)), ZERO)

    def to_lend(self, q: Queue, used: Mapping[str, Fraction]) -> Fraction:
        """What the other queues of ``q``'s cohort can lend it now."""
        if q.cohort is None:
            return ZERO
        mine = used.get(q.name, ZERO)
        own_unused = max(ZERO, q.lendable - self._pool_use(q, mine))
        return max(ZERO, self.pool(q) - self.pool_used(q, used) - own_unused)

    # ------------------------------------------------------------- admission

    def fits(self, q: Queue, need: Fraction, used: Mapping[str, Fraction]) -> bool:
        mine = used.get(q.name, ZERO)
        after = mine + need
        ceiling = q.ceiling()
        if ceiling is not None and after > ceiling:
            return False
        if q.cohort is None:
            return True
        pool_after = self.pool_used(q, used) - self._pool_use(q, mine) + self._pool_use(q, after)
        return pool_after <= self.pool(q)

    def check(self, q: Queue, need: Fraction, used: Mapping[str, Fraction]) -> str | None:
        """None if ``need`` more GPUs fit ``q``'s quota now, else why not (the
        message a waiting workload shows)."""
        if self.fits(q, need, used):
            return None
        return self.why(q, need, used)

    def why(self, q: Queue, need: Fraction, used: Mapping[str, Fraction]) -> str:
        mine = used.get(q.name, ZERO)
        ceiling = q.ceiling()
        if ceiling is not None:
            head = f"queue {q.name}: {gpus_text(mine)} of {gpus_text(ceiling)} GPUs used"
        else:
            head = (f"queue {q.name}: {gpus_text(mine)} GPUs used, "
                    f"{gpus_text(q.nominal)} nominal")
        if q.cohort is not None:
            head += f"; cohort {q.cohort} has {gpus_text(self.to_lend(q, used))} to lend"
        return f"{head}; needs {gpus_text(need)}"

    # ------------------------------------------------------------- reporting

    def usage(self, q: Queue, used: Mapping[str, Fraction]) -> QueueUsage:
        """Used, borrowed and lent GPUs of ``q``. Lent: what borrowers of the cohort
        use, shared among the lenders in proportion to their unused lendable quota."""
        mine = used.get(q.name, ZERO)
        borrowed = max(ZERO, mine - q.nominal)
        members = self.members(q)
        total_borrowed = sum((max(ZERO, used.get(p.name, ZERO) - p.nominal) for p in members),
                             ZERO)

        def unused(p: Queue) -> Fraction:
            return max(ZERO, min(p.lendable, p.nominal - used.get(p.name, ZERO)))

        lenders = sum((unused(p) for p in members), ZERO)
        lent = ZERO if not lenders else min(unused(q), total_borrowed * unused(q) / lenders)
        return QueueUsage(mine, borrowed, lent)

    def share(self, q: Queue, used: Mapping[str, Fraction]) -> Fraction:
        """Fair share: borrowed GPUs divided by the weight (lower goes first)."""
        return max(ZERO, used.get(q.name, ZERO) - q.nominal) / q.weight

    # ------------------------------------------------------------- reclaim

    def may_reclaim(self, q: Queue, need: Fraction, used: Mapping[str, Fraction]) -> bool:
        """May ``q`` take back borrowed quota for ``need``? Only while it stays
        within its nominal once admitted (the no-cycle rule, above)."""
        return q.cohort is not None and used.get(q.name, ZERO) + need <= q.nominal


@dataclass(frozen=True, slots=True)
class Candidate:
    """A workload holding quota that a reclaim or a within-queue preemption could
    evict: its ledger key, owner, queue, priority, creation time and GPUs."""

    key: str
    owner: str
    queue: str
    priority: int
    created: str
    gpus: Fraction


def reclaimable(quotas: Quotas, q: Queue, priority: int, need: Fraction,
                used: Mapping[str, Fraction], candidates: Iterable[Candidate]
                ) -> list[Candidate]:
    """The workloads ``q`` may evict for a workload of ``priority`` needing ``need``,
    in the order they are taken: lowest priority first, then newest first.

    - From another queue of the cohort that borrows (used above its nominal), when
      ``q`` may reclaim (``Quotas.may_reclaim``) and its ``reclaimWithinCohort``
      allows (Any; LowerPriority: strictly lower priority).
    - From ``q`` itself, strictly lower priority, when its ``withinQueue`` is
      LowerPriority.
    """
    cohort = {p.name for p in quotas.members(q)} if q.cohort is not None else set()
    reclaim = quotas.may_reclaim(q, need, used) and q.reclaim is not ReclaimWithinCohort.NEVER
    out = []
    for c in candidates:
        if c.queue == q.name:
            if q.within is WithinQueue.LOWER_PRIORITY and c.priority < priority:
                out.append(c)
            continue
        if not reclaim or c.queue not in cohort:
            continue
        owner = quotas.get(c.queue)
        if owner is None or used.get(owner.name, ZERO) <= owner.nominal:
            continue  # not borrowing: its quota is its own
        if q.reclaim is ReclaimWithinCohort.LOWER_PRIORITY and c.priority >= priority:
            continue
        out.append(c)
    # newest first within a priority: sort by creation descending, then priority up
    out.sort(key=lambda c: (c.created, c.key), reverse=True)
    out.sort(key=lambda c: c.priority)
    return out


def without(used: Mapping[str, Fraction], victims: Iterable[Candidate]) -> dict[str, Fraction]:
    """``used`` once ``victims`` hold nothing."""
    out = dict(used)
    for v in victims:
        out[v.queue] = max(ZERO, out.get(v.queue, ZERO) - v.gpus)
    return out
