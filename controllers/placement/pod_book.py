"""What another placing controller that books pods in the same ledger offers the
placement cache (``PodBook``): today the seed path's ``SeedBook``
(controllers/podbinding/seedbook.py). It is registered with the manager's
``PlacementStateSource`` before the state is built."""

from __future__ import annotations

from typing import Protocol

from internal.objects import JSON
from internal.scheduling.ledger import Ledger


class PodBook(Protocol):
    """Another placing controller that books pods of its own in this ledger (the
    seed path's pod binding). Its pods are never counted as foreign GPU pods."""

    def owns(self, pod: JSON) -> bool:
        """Is ``pod`` booked by this book (and so not a foreign pod)?"""
        ...

    def rebuild(self, ledger: Ledger, pods: list[JSON]) -> list[str]:
        """Re-book its bound pods in a freshly rebuilt ``ledger`` (called under the
        state lock, after the workloads' placements). Returns problems found."""
        ...

    def refill(self, ledger: Ledger, pods: list[JSON]) -> None:
        """Last in a rebuild, once every holder and placement is booked: what it
        keeps for pods not bound yet that nobody else holds (a pod group's vacant
        slots); never anybody's conflict."""
        ...

    def wake(self) -> None:
        """Capacity was freed: retry the pods waiting for it (called unlocked)."""
        ...

    def owns_key(self, ledger_key: str) -> bool:
        """Is ``ledger_key`` one of this book's bookings?"""
        ...

    def refusal(self, ledger_key: str, message: str) -> str | None:
        """Why this booking's pods would not all go if asked now, with ``message``
        (a PodDisruptionBudget over a pod group's members: it goes whole or not at
        all), asked before a preemption of it is booked (called unlocked); None:
        they would."""
        ...

    def evict(self, ledger_key: str, message: str) -> str | None:
        """A preemptor took this booking's devices: ask its pods to go (called
        unlocked). The booking stays until they are gone. Returns why none was
        asked (a PodDisruptionBudget refuses a pod group's eviction: its members
        go all or none), else None."""
        ...
