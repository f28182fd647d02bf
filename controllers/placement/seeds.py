"""The seed path's door to the placement cache (``PlacementState.seeds``): a seed
pod's or a pod group's plan made on a read-only view (``PlacementView``) and booked
in the pod binding's book, each in one section of the cache's lock, so nothing is
booked between the plan and its booking; and the book's bindings and releases.
It is the cache's seed side, as ``events`` is its informers' side: it touches the
cache's lock and ledger, and nothing outside this package does."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from controllers.placement.door import PlacementView
from internal.scheduling.ledger import LedgerConflict

if TYPE_CHECKING:
    from controllers.placement.state import PlacementState
    from controllers.podbinding.seedbook import Entry, SeedBook


class SeedDoor:
    """The seed path's bookings in a ``PlacementState``; every method one section."""

    def __init__(self, state: PlacementState) -> None:
        self._state = state

    def book_seed(self, book: SeedBook, key: str,
                  plan: Callable[[PlacementView], tuple[Entry | None, str]]
                  ) -> tuple[Entry | None, str]:
        """Plans seed pod ``key`` on a read-only view and books the plan in ``book``,
        both under the lock, so nothing is booked between the two. Seed pods take
        whole GPUs. Returns (the booked entry, "") or (None, why not)."""
        st = self._state
        with st._lock:
            entry, why = plan(st.view())
            if entry is None:
                return None, why
            try:
                st._ledger.refuse_mig(entry.placement)
                book.book(st._ledger, key, entry)
            except LedgerConflict as exc:
                return None, str(exc)
            return entry, ""

    def book_group(self, book: SeedBook,
                   plan: Callable[[PlacementView], tuple[dict[str, Entry] | None, str]]
                   ) -> tuple[dict[str, Entry] | None, str]:
        """Plans a pod group on a read-only view and books every member's entry in
        ``book`` in one step, both under the lock: the whole group or nothing.
        Returns (pod key -> booked entry, "") or (None, why not)."""
        st = self._state
        with st._lock:
            entries, why = plan(st.view())
            if entries is None:
                return None, why
            try:
                for entry in entries.values():
                    st._ledger.refuse_mig(entry.placement)
                book.book_all(st._ledger, entries)
            except LedgerConflict as exc:
                return None, str(exc)
            return entries, ""

    def mark_seed_bound(self, book: SeedBook, key: str) -> None:
        """Seed pod ``key`` is bound: its owner's booking commits once all are."""
        st = self._state
        with st._lock:
            book.mark_bound(st._ledger, key)

    def adopt_seed(self, book: SeedBook, key: str, want: Entry | None,
                   keep: Callable[[Entry], bool]) -> tuple[Entry | None, str]:
        """A bound seed pod: what ``book`` already books for ``key`` stays (marked
        bound) when ``keep`` says so, else ``want`` is booked. Returns (what the pod
        is taken to hold, the conflict that refused ``want`` or "")."""
        st = self._state
        with st._lock:
            have = book.entry(key)
            if have is not None and want is not None and keep(have):
                book.mark_bound(st._ledger, key)
                return have, ""
            if want is not None:
                try:
                    book.book(st._ledger, key, want)
                except LedgerConflict as exc:
                    return want, str(exc)
            return want, ""

    def release_seed(self, book: SeedBook, key: str) -> Entry | None:
        """Releases seed pod ``key``'s booking in ``book``; what it held, or None.
        The caller wakes the waiting (``capacity_freed``) once it has said so."""
        st = self._state
        with st._lock:
            return book.release(st._ledger, key)

    def seed_pod_keys(self, book: SeedBook, ledger_key: str) -> list[str]:
        """The pods (``ns/name``) whose bookings make up ``ledger_key`` in ``book``."""
        st = self._state
        with st._lock:
            return book.pod_keys(ledger_key)
