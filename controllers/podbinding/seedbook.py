"""The seed path's pods in the shared ledger: what a bound pod holds (``read_bound``),
under which key (``owner_key``), and the book of them (``SeedBook``).

Ledger keys. A pod's booking is held under its controlling owner
(``StatefulSet:<ns>/<name>``; ``Pod:<ns>/<name>`` when it has none), so that one
StatefulSet's own map may name a device for several of its pods (the seed puts
replicas 3 and 4 both on node4:3) while a device held by any other workload is
refused (invariant 1). The owner's allocation is the list of its pods'
placements; booking or releasing one pod re-books the owner's list. A pod that
requests ``nvidia.com/gpu`` and has no map is booked under its own ``Pod:`` key and
counted (the kubelet's device plugin picks its devices). These bookings have their
pods' own priority (never above a GPUWorkload's maximum), so a higher-priority
workload may preempt them.

What a bound pod holds, after a restart too, is ``controllers.podbinding.seedentry``'s
(``read_bound``, ``read_slots``); this module re-exports it for its callers.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from controllers.podbinding.seedentry import (
    GROUP_SLOTS_ANNOTATION,
    Entry,
    bound_entry,
    devs_text,
    is_group_key,
    is_seed_key,
    owner_key,
    pod_meta,
    pod_priority,
    pod_spec,
    read_bound,
    read_slots,
    ring_note,
    slots_text,
    without_unknown,
)
from internal.objects import JSON, object_key
from internal.scheduling.ledger import Ledger, LedgerConflict
from internal.scheduling.pods import is_controller_pod, pod_is_active, pod_uid

DEFAULT_SCHEDULER_NAME = "gpu-scheduler"

__all__ = ["DEFAULT_SCHEDULER_NAME", "GROUP_SLOTS_ANNOTATION", "Entry", "SeedBook",
           "bound_entry", "devs_text", "is_group_key", "is_seed_key", "owner_key",
           "pod_meta", "pod_priority", "pod_spec", "read_bound", "read_slots",
           "slots_text", "without_unknown"]


class SeedBook:
    """The seed path's pods in the shared ledger (a ``PodBook`` of the
    PlacementState): pod key -> Entry, and the owner allocations they make up.

    A pod group's booking (``PodGroup:<key>``) outlives its members one by one: a
    bound member that fails or is deleted leaves its placement behind as a *vacant
    slot* of its index, still booked, which the member its controller makes again
    (same index, same generation) takes back (``book``); a member that finishes
    gives its slot back (``finished``). The booking goes when the last member does,
    or when a new gang is booked under the key (the vacancies were not taken), and
    a preempted group keeps no slot (``evict``).

    Not thread-safe on its own: every call runs under the PlacementState lock
    (``finished`` and ``evict`` only mark a key, for the next locked call)."""

    def __init__(self, scheduler_name: str = DEFAULT_SCHEDULER_NAME) -> None:
        self.scheduler_name = scheduler_name
        self.pods: dict[str, Entry] = {}
        self._by_key: dict[str, set[str]] = {}  # ledger key -> pod keys
        self.on_wake: Callable[[], None] = lambda: None
        #: asks a holder's pods to go (set to the reconciler's ``evict_holder``):
        #: why none was asked (a budget refuses a group's), or None
        self.on_evict: Callable[[str, str], str | None] = lambda key, message: None
        #: why a holder's pods would not all go if asked (set to the reconciler's
        #: ``holder_refusal``)
        self.on_refusal: Callable[[str, str], str | None] = lambda key, message: None
        #: what a bound pod holds, under its pod group's key if it is in one
        #: (set by the reconciler's ``GroupPath``)
        self.regroup: Callable[[JSON, Entry | None], Entry | None] = lambda pod, e: e
        #: pod group ledger key -> the slots its gone members left, still booked
        self._vacant: dict[str, list[Entry]] = {}
        #: pods that finished (their slot goes with them), marked before release
        self._finished: set[str] = set()
        #: pod group ledger keys being preempted: they keep no slot
        self._preempted: set[str] = set()

    # -- PodBook
    def owns(self, pod: JSON) -> bool:
        return pod_spec(pod).get("schedulerName") == self.scheduler_name and \
            not is_controller_pod(pod)

    def rebuild(self, ledger: Ledger, pods: list[JSON]) -> list[str]:
        self.pods.clear()
        self._by_key.clear()
        self._vacant.clear()
        problems: list[str] = []
        for pod in sorted(pods, key=object_key):
            if not self.owns(pod):
                continue
            key = object_key(pod)
            ledger.remove_pod(pod_uid(pod))  # booked by its binding, not counted twice
            if not pod_is_active(pod):
                continue
            # unreadable annotations: its reconcile reports them
            entry = self.regroup(pod, bound_entry(pod))
            if entry is None:
                continue
            try:
                self.book(ledger, key, entry)
            except LedgerConflict as exc:
                problems.append(f"pod {key}: {exc}")
        return problems

    def refill(self, ledger: Ledger, pods: list[JSON]) -> None:
        """Last in a rebuild, once every holder and placement is booked: the vacant
        slots of each group its bound members' Bindings named
        (``GROUP_SLOTS_ANNOTATION``: the workers not made yet of a group placed at its
        leader, the members gone meanwhile), less those a bound pod holds, a member
        that finished held, or another holder took (a slot is never anybody's
        conflict: it was given back before the restart, it is not booked)."""
        finished = set()
        for pod in pods:
            if self.owns(pod) and (pod.get("status") or {}).get("phase") == "Succeeded":
                e = self.regroup(pod, bound_entry(pod))
                if e is not None:
                    finished.add((e.ledger_key, e.slot, e.generation))
        taken = {(e.placement.node, d) for e in self.pods.values() for d in e.placement.devices}
        seen = {(lk, v.slot, v.generation) for lk, vs in self._vacant.items() for v in vs}
        named: dict[str, list[Entry]] = {}  # ledger key -> the slots to book again
        for pod in sorted(pods, key=object_key):
            held = self.pods.get(object_key(pod))
            if held is None or not self.owns(pod) or not pod_is_active(pod) \
                    or pod_meta(pod).get("deletionTimestamp"):
                continue
            for slot in read_slots(pod, held):
                which = (slot.ledger_key, slot.slot, slot.generation)
                if which in finished or which in seen or any(
                        (slot.placement.node, d) in taken for d in slot.placement.devices):
                    continue  # finished, named already, or its member took it
                seen.add(which)
                named.setdefault(slot.ledger_key, []).append(slot)
        for lk, slots in named.items():
            self._reserve(ledger, lk, slots)

    def _reserve(self, ledger: Ledger, lk: str, slots: list[Entry]) -> None:
        """Books ``slots`` as vacant slots of ``lk``, at once, else one by one
        where the ledger refuses some (another holder took them)."""
        try:
            self._rebook(ledger, lk, [*self._held(lk), *slots])
        except LedgerConflict:
            pass
        else:
            self._vacant.setdefault(lk, []).extend(slots)
            return
        for slot in slots:
            try:
                self._rebook(ledger, lk, [*self._held(lk), slot])
            except LedgerConflict:
                continue
            self._vacant.setdefault(lk, []).append(slot)

    def others_text(self, ledger_key: str, slot: int | None, generation: str) -> str:
        """``GROUP_SLOTS_ANNOTATION`` for a member of index ``slot`` taking its slot
        back: the next slots of its generation ``ledger_key`` holds, its members'
        and its vacant ones (``ring_note``)."""
        return ring_note([e for e in self._held(ledger_key) if e.generation == generation],
                         slot)

    def wake(self) -> None:
        self.on_wake()

    def owns_key(self, ledger_key: str) -> bool:
        return ledger_key in self._by_key

    def refusal(self, ledger_key: str, message: str) -> str | None:
        return self.on_refusal(ledger_key, message) if is_group_key(ledger_key) else None

    def evict(self, ledger_key: str, message: str) -> str | None:
        if is_group_key(ledger_key):
            self._preempted.add(ledger_key)  # its members go for good: no slot kept
        refused = self.on_evict(ledger_key, message)
        if refused is not None:
            self._preempted.discard(ledger_key)  # none was asked to go: it stays whole
        return refused

    # -- bookings
    def entry(self, key: str) -> Entry | None:
        return self.pods.get(key)

    def pod_keys(self, ledger_key: str) -> list[str]:
        """The pods (``ns/name``) whose bookings make up ``ledger_key``."""
        return sorted(self._by_key.get(ledger_key, ()))

    def preempted(self, ledger_key: str) -> bool:
        """Is the group of ``ledger_key`` being preempted (its members asked to go)?"""
        return ledger_key in self._preempted

    def vacancy(self, ledger_key: str, slot: int | None, generation: str = "") -> Entry | None:
        """The vacant slot of ``ledger_key`` a replacement of index ``slot`` (None:
        any) and ``generation`` takes back, or None."""
        if ledger_key in self._preempted:
            return None
        for e in self._vacant.get(ledger_key, ()):
            if e.generation == generation and (slot is None or e.slot == slot):
                return e
        return None

    def vacancies(self, ledger_key: str) -> list[Entry]:
        return list(self._vacant.get(ledger_key, ()))

    def finished(self, key: str) -> None:
        """Pod ``key`` finished: its release gives its group slot back."""
        self._finished.add(key)

    def _held(self, ledger_key: str, *, but: set[str] | frozenset[str] = frozenset(),
              claimed: Entry | None = None) -> list[Entry]:
        """What ``ledger_key`` holds besides pods ``but``: its pods' entries and its
        vacant slots (less the one ``claimed``)."""
        return [*(self.pods[k] for k in sorted(self._by_key.get(ledger_key, ())) if k not in but),
                *(e for e in self._vacant.get(ledger_key, ()) if e is not claimed)]

    def _rebook(self, ledger: Ledger, ledger_key: str, entries: list[Entry],
                overlap: tuple[str, ...] | None = None) -> None:
        """Books ``entries`` as ``ledger_key``'s one allocation; ``overlap``: the
        owners a preempting group's booking is nominated over (None: as it is now,
        so a member booked or released meanwhile keeps the nomination)."""
        if not entries:
            ledger.forget(ledger_key)
            return
        if overlap is None:
            held = ledger.allocation(ledger_key)
            overlap = tuple(held.overlap) if held is not None else ()
        ledger.assume(ledger_key, [e.placement for e in entries],
                      gpus_per_replica=max(e.gpus for e in entries),
                      priority=max(e.priority for e in entries),
                      committed=all(e.committed for e in entries), check_capacity=False,
                      overlap=overlap)

    def book(self, ledger: Ledger, key: str, entry: Entry) -> None:
        """Book ``entry`` for pod ``key`` with the other pods of its owner (raises
        LedgerConflict, changing nothing, when a device is held by another key)."""
        old = self.pods.get(key)
        if old is not None and old.ledger_key != entry.ledger_key:
            self.release(ledger, key)
            old = None
        claimed = self._claimed(entry)
        others = self._held(entry.ledger_key, but={key}, claimed=claimed)
        self._rebook(ledger, entry.ledger_key, [*others, entry])
        if claimed is not None:  # the replacement took its slot back
            self._drop_vacancy(entry.ledger_key, claimed)
        self.pods[key] = entry
        self._by_key.setdefault(entry.ledger_key, set()).add(key)

    def _claimed(self, entry: Entry) -> Entry | None:
        """The vacant slot ``entry`` takes back: one of its key, index and
        generation on exactly its node and devices."""
        for e in self._vacant.get(entry.ledger_key, ()):
            if (e.slot, e.generation, e.placement.node, e.placement.devices) == (
                    entry.slot, entry.generation, entry.placement.node,
                    entry.placement.devices):
                return e
        return None

    def _drop_vacancy(self, ledger_key: str, entry: Entry) -> None:
        left = [e for e in self._vacant.get(ledger_key, ()) if e is not entry]
        if left:
            self._vacant[ledger_key] = left
        else:
            self._vacant.pop(ledger_key, None)

    def _drop_vacancies(self, ledger_key: str, generation: str) -> None:
        left = [e for e in self._vacant.get(ledger_key, ()) if e.generation != generation]
        if left:
            self._vacant[ledger_key] = left
        else:
            self._vacant.pop(ledger_key, None)

    def book_all(self, ledger: Ledger, entries: dict[str, Entry],
                 overlap: tuple[str, ...] = ()) -> None:
        """Book ``entries`` (pod key -> entry, one ledger key: a pod group's) in one
        step with what that key already holds, nominated over the owners
        ``overlap`` (a preemption's victims; none: a plan that fits); raises
        LedgerConflict, changing nothing, when a device is held by another key."""
        keys = {e.ledger_key for e in entries.values()}
        if len(keys) != 1:
            raise ValueError(f"one ledger key per group, not {sorted(keys)}")
        ledger_key = keys.pop()
        # a new gang under the key: the slots its gone members left were not taken
        # back (another generation, or a member without one), so they go; the slots
        # it reserves for members not made yet are its vacant slots
        reserved = [e for e in entries.values() if e.reserved]
        pods = {k: e for k, e in entries.items() if not e.reserved}
        others = [self.pods[k] for k in sorted(self._by_key.get(ledger_key, ()))
                  if k not in pods]
        self._rebook(ledger, ledger_key, [*others, *entries.values()], tuple(overlap))
        self._vacant.pop(ledger_key, None)
        if reserved:
            self._vacant[ledger_key] = reserved
        for key, entry in pods.items():
            old = self.pods.get(key)
            if old is not None and old.ledger_key != ledger_key:
                self.release(ledger, key)
            self.pods[key] = entry
            self._by_key.setdefault(ledger_key, set()).add(key)

    def mark_bound(self, ledger: Ledger, key: str) -> None:
        entry = self.pods.get(key)
        if entry is None or entry.committed:
            return
        entry.committed = True
        if all(self.pods[k].committed for k in self._by_key.get(entry.ledger_key, ())):
            with contextlib.suppress(KeyError):
                ledger.commit(entry.ledger_key)

    def release(self, ledger: Ledger, key: str) -> Entry | None:
        """Release pod ``key``'s placement (its owner keeps the others'). A bound
        pod group member that did not finish leaves its slot behind, booked, while
        another member of its group is there (see the class); the last member
        takes its group's slots with it. Returns what the pod held, or None (also
        when its slot stays booked: nothing was freed)."""
        entry = self.pods.pop(key, None)
        finished = key in self._finished
        self._finished.discard(key)
        if entry is None:
            return None
        lk = entry.ledger_key
        keys = self._by_key.get(lk, set())
        keys.discard(key)
        if not keys:
            self._by_key.pop(lk, None)
            self._vacant.pop(lk, None)  # the last member: the group's booking goes
            self._preempted.discard(lk)
        elif not any(self.pods[k].generation == entry.generation for k in keys):
            # the last of its generation (a JobSet made again under its name): the
            # slots it and the others of its generation left are nobody's now
            self._drop_vacancies(lk, entry.generation)
        elif is_group_key(lk) and (entry.committed or entry.retaken) and not finished \
                and lk not in self._preempted:
            self._vacant.setdefault(lk, []).append(entry)  # its slot, for its replacement
            return None
        try:
            self._rebook(ledger, lk, self._held(lk))
        except LedgerConflict:  # cannot happen for a subset of what it held
            ledger.forget(lk)
        return entry
