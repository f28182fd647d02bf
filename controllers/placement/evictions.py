"""The bookkeeping of preemptions between the decision and the victims' departure.

A preemptor is booked (nominated) over its victims' devices at once; the victims
learn of it only in their own reconcile, and their pods go after that. Until then
three things are remembered here:

- **evicting**: victim key -> the message its reconcile is to report. A victim's
  booking is released by whoever calls ``evict``/``resume``; the entry stays until
  the victim's reconcile took it in (``acknowledge``) or the victim is deleted.
- **waiting**: preemptor key -> victims that have not acknowledged yet. Until one
  has, a reconcile of the victim may still be creating pods on the nominated
  devices, so the preemptor must not start (``unacknowledged``).
- **blocked**: nominated preemptors waiting for the victims' pods to go; every
  release of devices wakes them (``blocked``).

Guarantees: a victim is told its eviction once per preemption (``acknowledge``
drops it and names the preemptors to wake); a nomination rebuilt from a status
(``resume``) evicts again the victims a previous run decided but never told,
never a seed-path booking (its pods were asked to go before the nomination was
written) and never one of equal or higher priority.

Not thread-safe: the placement state's lock guards every call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import structlog

from internal.scheduling.ledger import Ledger

log = structlog.get_logger("placement")


def preempted_message(preemptor: str, priority: int) -> str:
    """What a victim of ``preemptor`` reports while it waits to be placed again."""
    return (f"preempted by {preemptor} (priority {priority}) to make room; "
            f"waiting to be placed again")


class Evictions:
    """Victims to tell, preemptors waiting for them, and preemptors waiting for pods."""

    def __init__(self) -> None:
        self._evicting: dict[str, str] = {}  # preempted key -> why, until it is told
        #: preemptor key -> victims whose own reconcile has not yet taken in their
        #: eviction (until it has, a reconcile of theirs may still be creating pods)
        self._victims: dict[str, set[str]] = {}
        self._blocked: set[str] = set()  # nominated keys waiting for victims' pods

    # ------------------------------------------------------------ victims

    def evict(self, preemptor: str, victims: list[str], message: str) -> None:
        """A new preemption by ``preemptor``: its victims (bookings already
        released) are to be told ``message``, and it waits for each to acknowledge
        (replacing whatever it waited for before)."""
        for v in victims:
            self._evicting[v] = message
        self._victims[preemptor] = set(victims)

    def resume(self, ledger: Ledger, nominated: Any,
               booked_elsewhere: Callable[[str], bool]) -> list[str]:
        """A nomination booked from a workload's status (a rebuild, an adopted
        placement): the GPUWorkload bookings it was nominated over that are still
        booked, of lower priority, lost the eviction that a previous run decided
        (the victim's own reconcile had not taken it in): release them and evict
        them again. Returns their keys, to be enqueued (unlocked). Seed-path
        bookings (``booked_elsewhere``) stay booked until their pods are gone
        (their pods were asked to go before the nomination could be written)."""
        victims = sorted(b.key for b in ledger.bookings()
                         if b.owner in nominated.overlap and b.key != nominated.key
                         and b.uid and b.priority < nominated.priority
                         and _shares(b, nominated) and not booked_elsewhere(b.key))
        message = preempted_message(nominated.key, nominated.priority)
        for v in victims:
            ledger.depart(v)
            self._evicting[v] = message
            log.info("preemption.continued", preemptor=nominated.key, victim=v)
        if victims:
            self._victims.setdefault(nominated.key, set()).update(victims)
        return victims

    def message(self, victim: str) -> str | None:
        """The eviction ``victim``'s reconcile is to take in, or None."""
        return self._evicting.get(victim)

    def is_evicting(self, victim: str) -> bool:
        return victim in self._evicting

    def acknowledge(self, victim: str) -> list[str]:
        """``victim`` took in its eviction (or is gone): forget it; returns the
        preemptors that were waiting for it, sorted, to be woken."""
        self._evicting.pop(victim, None)
        out = []
        for preemptor, victims in self._victims.items():
            if victim in victims:
                victims.discard(victim)
                out.append(preemptor)
        return sorted(out)

    def unacknowledged(self, preemptor: str) -> list[str]:
        """Victims of ``preemptor`` whose reconcile has not yet taken in the
        eviction, sorted."""
        return sorted(v for v in self._victims.get(preemptor, ()) if v in self._evicting)

    def stop_waiting(self, preemptor: str) -> None:
        """``preemptor`` waits for no victim any more (released or gone)."""
        self._victims.pop(preemptor, None)

    # ------------------------------------------------------------ blocked

    def block(self, preemptor: str) -> None:
        self._blocked.add(preemptor)

    def unblock(self, preemptor: str) -> None:
        self._blocked.discard(preemptor)

    def reset_blocked(self, preemptors: Iterable[str]) -> None:
        self._blocked = set(preemptors)

    def blocked(self) -> list[str]:
        """The preemptors waiting for pods to go, sorted (woken on every release)."""
        return sorted(self._blocked)


def _shares(a: Any, b: Any) -> bool:
    """Do bookings ``a`` and ``b`` hold a device in common (named), or GPUs counted
    on a node in common?"""
    named = {(p.node, d) for p in b.placements for d in p.devices}
    return any((p.node, d) in named for p in a.placements for d in p.devices) or \
        bool(set(a.counted) & set(b.counted))
