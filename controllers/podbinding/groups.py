"""Pod groups on the seed path: the pods of another controller (a JobSet's, a
LeaderWorkerSet group's, an Indexed Job's, or pods labelled as one group) placed as
one gang, on named devices, all or nothing (docs/podgroups.md).

What a pod's group is (its key and size) is ``internal/scheduling/podgroups.py``'s
to say; this module decides what the pod-binding reconciler does with it:

- **Nothing is booked until every member exists** (but a group placed at its
  leader, ``leaderfirst.py``: once its leader exists, the members not made yet are
  booked as reserved slots). A member whose group has fewer
  live members than its size waits (a ``WaitingForGroup`` Event on the member, once
  per count); a group still short after ``timeout`` is reported
  (``PodGroupIncomplete`` Warning, ``gpu_orchestrator_pod_group_timeouts_total``)
  and still holds nothing, so two groups can never split the capacity between them.
- **Then the group is planned as one gang** by the shared scheduler
  (``groupplan.plan_group``: one replica per unbound member, the members' own selectors,
  tolerations and node fit, the default strategy or the group's
  ``gpu.orchestrator.dev/strategy`` annotation) and booked in one step under the
  ledger key ``PodGroup:<namespace>/<group>`` (``PlacementState.seeds.book_group``). Each
  member's own reconcile then binds it to its slot (the Binding carries the devices
  annotation, as every seed-path binding).
- **A bound member holds under its group's key** (``group_ledger_key``), so a
  preemption takes the whole group (its victims are ledger keys), never some of it.
- **A member keeps its slot**: one that fails or is deleted leaves its node and
  devices booked (``SeedBook``'s vacant slots, keyed by its index in the group), and
  the member its controller makes again takes them back (``take_slot``) while the
  others run; the booking goes with the last member. A group being preempted keeps
  no slot, and its members made again wait until every old one is gone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import UTC, datetime

import structlog

from controllers.placement.seeds import GroupPlan
from controllers.placement.state import PlacementState, PlacementView
from controllers.podbinding.groupplan import group_ledger_key
from controllers.podbinding.grouppreempt import (
    admin_priority,
    group_priority,
    preempting_text,
    waiting_text,
)
from controllers.podbinding.groupquota import forget, oldest, plan_in_queue
from controllers.podbinding.groupwaits import DEFAULT_GROUP_TIMEOUT, GroupWaits
from controllers.podbinding.leaderfirst import (
    await_workers,
    missing_slots,
    to_place,
    waiting_note,
)
from controllers.podbinding.memberclaims import MemberClaims, MemberClaimsReader, planned
from controllers.podbinding.seedbook import (
    Entry,
    SeedBook,
    devs_text,
    is_group_key,
    pod_meta,
    pod_priority,
    pod_spec,
)
from internal.metrics.domain import POD_GROUP_TIMEOUTS, PREEMPTIONS
from internal.objects import JSON, object_key
from internal.scheduling.podgroups import GroupRefusal, PodGroup, disagreement
from internal.scheduling.pods import pod_is_active, pod_uid
from runtime import Request, Result
from runtime.events import EventRecorder
from runtime.store import Indexer

log = structlog.get_logger("podbinding")

#: ``book_group``'s answer when another member's reconcile booked the group first
_BOOKED = "booked by another member's reconcile"
#: the Event reason of a group refused for a member's ResourceClaim
CLAIM_REFUSED = "PodGroupClaimRefused"
#: seconds between looks at a group whose members' claims are not all made yet
#: (kube-controller-manager makes them; a claim's events do not wake its pod)
CLAIM_POLL = 1.0
#: seconds between a nominated group's looks at whether its victims are gone, a
#: fallback: their going wakes its members at once (``GroupWaits.nominated``)
PREEMPTION_POLL = 10.0


#: a pod's group (``podgroups.pod_group`` with the owners' caches), None when it is
#: in none, or why its group cannot be formed
Recognise = Callable[[JSON], PodGroup | GroupRefusal | None]


def take_slot(view: PlacementView, book: SeedBook, pod: JSON, group: PodGroup
              ) -> tuple[Entry | None, str]:
    """The slot a gone member of ``group`` left, for ``pod``, its replacement
    (same index, same generation), on the same node and devices; (None, "")
    when there is none to take (read in the slot's pass,
    ``PlacementState.seeds.book_seed``, which books it unless a booking changed)."""
    v = book.vacancy(group_ledger_key(group), group.index, group.generation)
    if v is None or view.node(v.placement.node) is None:
        return None, ""
    return Entry(v.ledger_key, v.placement.model_copy(), v.gpus, priority=pod_priority(pod),
                 uid=pod_uid(pod), slot=v.slot, generation=v.generation, retaken=True,
                 slots_note=book.others_text(v.ledger_key, v.slot, v.generation)), ""


def _slot_waits(view: PlacementView, book: SeedBook, group: PodGroup) -> bool:
    """Does a vacant slot of ``group`` wait for this member (its index, on a node
    that is there), which ``take_slot`` gives it?"""
    if group.index is None:
        return False
    v = book.vacancy(group_ledger_key(group), group.index, group.generation)
    return v is not None and view.node(v.placement.node) is not None


def live_members(pods: Iterable[JSON], recognise: Recognise, group: PodGroup
                 ) -> tuple[list[tuple[JSON, PodGroup]], list[tuple[JSON, PodGroup]]]:
    """(bound, unbound) live members of ``group`` among ``pods`` (its namespace's)."""
    bound, unbound = [], []
    for p in pods:
        if not pod_is_active(p) or pod_meta(p).get("deletionTimestamp"):
            continue
        g = recognise(p)
        if not isinstance(g, PodGroup) or g.key != group.key:
            continue
        (bound if pod_spec(p).get("nodeName") else unbound).append((p, g))
    return bound, unbound


class GroupPath:
    """The pod-binding reconciler's way with a group member (the module's rules)."""

    def __init__(self, recognise: Recognise, book: SeedBook, pods: Indexer,
                 recorder: EventRecorder, default_strategy: str,
                 timeout: float = DEFAULT_GROUP_TIMEOUT) -> None:
        self.recognise = recognise
        self.book, self.pods, self.recorder = book, pods, recorder
        self.default_strategy = default_strategy
        self.waits = GroupWaits(timeout)
        #: unbound member -> its group's ledger key, while it may wait in a queue's
        #: line (``groupquota.forget`` once it is gone)
        self._lined: dict[str, str] = {}
        book.regroup = self.regroup  # a rebuild books bound members under their group
        #: ``dra`` members' claims (``memberclaims.py``; set by the reconciler)
        self.claims = MemberClaimsReader()
        #: why the disruption budgets refuse evicting all of these seed-path
        #: victims (ledger keys) at once, or None (set by the reconciler)
        self.budgets: Callable[[list[str]], str | None] = lambda victims: None

    def regroup(self, pod: JSON, entry: Entry | None,
                held: Entry | None = None) -> Entry | None:
        """What a bound pod holds, under its group's ledger key when it is a group
        member (so a preemption takes the whole group), else as read. A member whose
        group cannot be recognised any more (its JobSet deleted, not cached yet, made
        again) stays under the group key ``held`` (its booking now) names while it
        holds what was booked for it: under its Job's key it would collide with its
        own group's booking and be taken for an intruder."""
        group = self.recognise(pod) if entry is not None else None
        if entry is None:
            return None
        if isinstance(group, PodGroup):
            return replace(entry, ledger_key=group_ledger_key(group), slot=group.index,
                           generation=group.generation)
        if held is not None and is_group_key(held.ledger_key) \
                and held.uid in ("", pod_uid(pod)) \
                and (held.placement.node, held.placement.devices) == (
                    entry.placement.node, entry.placement.devices):
            return replace(entry, ledger_key=held.ledger_key, slot=held.slot,
                           generation=held.generation)
        return entry

    def await_workers(self, pod: JSON, key: str) -> Result | None:
        """A bound pod: a leader whose reserved slots wait for workers is looked at
        again until the group timeout after it is Ready, then reported
        (``leaderfirst.await_workers``); None for any other."""
        return await_workers(self.book, self.recognise, self.recorder, self.waits.late_once,
                             self.waits.timeout, pod, key, datetime.now(UTC))

    def place(self, state: PlacementState, pod: JSON, key: str,
              group: PodGroup | GroupRefusal,
              bind: Callable[[PlacementState, JSON, str, Entry], Result | None],
              unschedulable: Callable[[JSON, str, str], Result],
              enqueue: Callable[[Request, float], None]) -> Result | None:
        """Member ``key`` of ``group``: bound to its slot when its group is booked;
        else the whole group booked once every member exists (and the others
        enqueued to bind themselves), or why not."""
        self.waits.for_victims(key, False)  # said again below while it still waits
        if isinstance(group, GroupRefusal):
            return self._refused(pod, group)
        held = self.book.entry(key)
        ledger_key = group_ledger_key(group)
        if held is not None and held.ledger_key == ledger_key:
            return self._bind_when_free(state, pod, key, held, group, bind)
        if self.book.preempted(ledger_key):
            return unschedulable(pod, key, (
                f"pod group {group.key} is being preempted: its members are asked to go, "
                f"and it is placed again, whole, once they are gone"))
        going = self._predecessor(pod, group)
        if going is not None:  # made again while the one before it still holds its slot
            log.info("group.slot_waits", group=group.key, pod=key, predecessor=going)
            return Result(requeue_after=1.0)
        if self.book.vacancies(ledger_key):  # a member made again: its slot back
            claims = self.claims.read(pod)  # a dra one's claim is allocated at its Binding
            if claims is not None and (claims.refused or claims.waiting) \
                    and self.book.vacancy(ledger_key, group.index, group.generation):
                return self._claims_wait(pod, group, claims)
            slot, _ = state.seeds.book_seed(self.book, key,
                                      lambda view: take_slot(view, self.book, pod, group))
            if slot is not None:
                log.info("group.slot_taken", group=group.key, pod=key, slot=slot.slot,
                         node=slot.placement.node, devices=devs_text(slot.placement.devices))
                return self._bind_when_free(state, pod, key, slot, group, bind)
        ns = pod_meta(pod).get("namespace") or "default"
        bound, unbound = live_members(self.pods.list_namespace(ns), self.recognise, group)
        refusal = disagreement(g for _, g in [*bound, *unbound])
        if refusal is not None:
            return self._refused(pod, refusal)
        present = len(bound) + len(unbound)
        # a group placed at its leader: the members not made yet get reserved slots
        reserve = missing_slots(group, [*bound, *unbound]) if present < group.size else []
        if present < group.size and not reserve:
            return self._wait(pod, group, present)
        unbound, group, waits = self._claimed(pod, group, unbound, reserve)
        if waits is not None:
            return waits
        members = [p for p, _ in unbound]
        if state.queues is not None:
            self._lined.update((object_key(p), ledger_key) for p in members)
        across = admin_priority(members)
        def plan(view: PlacementView) -> GroupPlan:
            # another worker, reconciling another member of this complete group,
            # may have booked it since ``held`` was read (a second booking would
            # move members already bound to the first; book_group refuses a plan
            # made before it as stale and plans again); or, placed at its leader,
            # booked with a slot for this member
            mine = self.book.entry(key)
            if mine is not None and mine.ledger_key == ledger_key:
                return None, _BOOKED, None
            if _slot_waits(view, self.book, group):
                return None, _BOOKED, None
            # its namespace's GPUQueue first, as a GPUWorkload gang's (groupquota.py)
            return plan_in_queue(state, view, group, unbound, self.default_strategy,
                                 reserve, across)
        entries, why, preemption = state.seeds.book_group(self.book, plan)
        if entries is None and preemption is not None:
            # its victims' budgets, asked outside the lock; then planned and booked
            # again, only with victims they let go (the plan may have changed)
            refusal = self.budgets(list(preemption.victims))
            if refusal is not None:
                return unschedulable(pod, key, (
                    f"pod group {group.key} ({to_place(group, len(unbound), len(reserve))}): "
                    f"preempting {', '.join(preemption.victims)} would make room, but "
                    f"{refusal}: nothing is booked, nobody is evicted"))
            entries, why, preemption = state.seeds.book_group(
                self.book, plan, approved=frozenset(preemption.victims))
            if entries is None and preemption is not None:
                return Result(requeue_after=0.0)  # other victims now: asked again
        if why is _BOOKED:
            held = self.book.entry(key)
            if held is None:  # a slot of its index to take: at once
                return Result(requeue_after=0.0) if self.book.vacancy(
                    ledger_key, group.index, group.generation) else None
            return self._bind_when_free(state, pod, key, held, group, bind)
        if entries is None:
            return unschedulable(pod, key, f"pod group {group.key} "
                                           f"({to_place(group, len(unbound), len(reserve))}): "
                                           f"{why}")
        self.waits.placed(group)
        log.info("group.booked", group=group.key, members=len(entries) - len(reserve),
                 reserved=reserve, nodes=sorted({e.placement.node for e in entries.values()}),
                 preempting=list(preemption.victims) if preemption else [])
        if preemption is not None:
            PREEMPTIONS.inc(len(preemption.victims))
            said = preempting_text(group.key, group_priority(members), preemption)
            for member in members:
                self.recorder.normal(member, "Preempting", said)
        for other, e in entries.items():
            if other != key and not e.reserved:
                o_ns, o_name = other.split("/", 1)
                enqueue(Request(o_ns, o_name), 0.0)
        entry = entries.get(key)
        return self._bind_when_free(state, pod, key, entry, group, bind) \
            if entry is not None else None

    def _claimed(self, pod: JSON, group: PodGroup, unbound: list[tuple[JSON, PodGroup]],
                 reserve: list[int]
                 ) -> tuple[list[tuple[JSON, PodGroup]], PodGroup, Result | None]:
        """``unbound`` with each ``dra`` member as its plan reads it (its claims' GPUs:
        ``memberclaims.planned``), and ``group`` with its ``dra`` members not made yet
        (slots ``reserve``) asking their ResourceClaimTemplates' GPUs
        (``MemberClaimsReader.read_slots``); or what ``pod`` does instead: wait while
        a claim is not made yet or a template not cached (said once per wording,
        nothing booked), or its group refused for a claim it cannot place
        (``PodGroupClaimRefused``)."""
        out: list[tuple[JSON, PodGroup]] = []
        # by name, so that the claim a refusal names is the same whichever member asks
        for p, g in sorted(unbound, key=lambda m: object_key(m[0])):
            claims = self.claims.read(p)
            if claims is not None and not (claims.refused or claims.waiting):
                p = planned(p, claims.gpus)
            elif claims is not None:
                return unbound, group, self._claims_wait(pod, group, claims)
            out.append((p, g))
        if reserve:
            group, slots = self.claims.read_slots(group, reserve)
            if slots.refused or slots.waiting:
                return unbound, group, self._claims_wait(pod, group, slots)
        return out, group, None

    def _claims_wait(self, pod: JSON, group: PodGroup, claims: MemberClaims) -> Result:
        """``pod``'s group refused for a member's claim (``PodGroupClaimRefused``), or
        waiting for one (said once per wording)."""
        if claims.refused:
            return self._refused(pod, GroupRefusal(
                "dra", CLAIM_REFUSED, f"pod group {group.key}: {claims.refused}", group.key))
        said = (f"waiting for the ResourceClaims of pod group {group.key}'s members: "
                f"{claims.waiting}; no GPU is held until every one exists")
        if self.waits.tell_once(pod_uid(pod), said):
            self.recorder.normal(pod, "WaitingForGroup", said)
        return Result(requeue_after=CLAIM_POLL)

    def forget(self, state: PlacementState, key: str) -> None:
        """Pod ``key`` is gone or being deleted: its group, incomplete, leaves its
        queue's waiting line (``groupquota.forget``)."""
        self.waits.for_victims(key, False)
        group_key = self._lined.pop(key, None)
        if group_key is not None:
            forget(state, group_key)

    def created(self, keys: Iterable[str]) -> str | None:
        """When the oldest of pods ``keys`` (a group's booked members) was made, as
        the API has it: what ``plan_in_queue`` records when it admits the group
        (``groupquota.oldest``); None when none of them is cached."""
        pods = (self.pods.get_by_name(name, ns) for ns, _, name in
                (k.partition("/") for k in keys))
        return oldest([p for p in pods if p is not None]) or None

    def _bind_when_free(self, state: PlacementState, pod: JSON, key: str, entry: Entry,
                        group: PodGroup,
                        bind: Callable[[PlacementState, JSON, str, Entry], Result | None]
                        ) -> Result | None:
        """Member ``key`` booked with its group: bound, unless the group's booking is
        a nomination whose victims still hold something of (or on) its devices;
        then it waits for them (said once per wording), woken when capacity is
        freed (``GroupWaits.nominated``), else looked at again after
        ``PREEMPTION_POLL``."""
        blockers = state.seeds.group_blockers(entry.ledger_key)
        self.waits.for_victims(key, bool(blockers))
        if not blockers:
            return bind(state, pod, key, entry)
        said = waiting_text(group.key, blockers)
        if self.waits.tell_once(pod_uid(pod), said):
            self.recorder.normal(pod, "WaitingForPreemption", said)
            log.info("group.waits_for_victims", group=group.key, pod=key, blockers=blockers)
        return Result(requeue_after=PREEMPTION_POLL)

    def _predecessor(self, pod: JSON, group: PodGroup) -> str | None:
        """The member of ``pod``'s index that it replaces, when that one still holds
        its slot (bound, booked, and terminating or finished before its own
        reconcile gave the slot up): its key, else None. The replacement waits for
        it (a controller makes a member again while the old one terminates), rather
        than being placed elsewhere and leaving the old slot held."""
        if group.index is None:
            return None
        ns = pod_meta(pod).get("namespace") or "default"
        for p in self.pods.list_namespace(ns):
            if p is pod or not pod_spec(p).get("nodeName") or pod_uid(p) == pod_uid(pod):
                continue
            if pod_is_active(p) and not pod_meta(p).get("deletionTimestamp"):
                continue
            g = self.recognise(p)
            if not isinstance(g, PodGroup) or (g.key, g.index, g.generation) != (
                    group.key, group.index, group.generation):
                continue
            held = self.book.entry(object_key(p))
            if held is not None and held.ledger_key == group_ledger_key(group):
                return object_key(p)
        return None

    def _refused(self, pod: JSON, refusal: GroupRefusal) -> Result:
        """The pod's group cannot be formed: said on the pod (once per wording),
        nothing placed; looked at again as its group's objects change."""
        if self.waits.tell_once(pod_uid(pod), refusal.message):
            self.recorder.warning(pod, refusal.reason, refusal.message)
            log.info("group.refused", pod=object_key(pod), reason=refusal.reason,
                     message=refusal.message)
        return Result(requeue_after=min(10.0, self.waits.timeout))

    def _wait(self, pod: JSON, group: PodGroup, present: int) -> Result:
        """Fewer members than the group's size exist: nothing is booked; the member
        says so once per count, and the group is reported once after its timeout."""
        tell, late, waited = self.waits.waiting(group, present)
        msg = (f"waiting for the members of pod group {group.key}: {present} of "
               f"{group.size} exist; no GPU is held until all do")
        msg += waiting_note(group)  # placed at its first members (leaderfirst.py)
        if tell:
            self.recorder.normal(pod, "WaitingForGroup", msg)
        if late:
            POD_GROUP_TIMEOUTS.inc()
            log.warning("group.incomplete", group=group.key, present=present,
                        size=group.size, waited=round(waited, 1))
            self.recorder.warning(pod, "PodGroupIncomplete",
                                  f"{msg}, after {waited:.0f} s (more than "
                                  f"{self.waits.timeout:.0f} s)")
        return Result(requeue_after=min(10.0, self.waits.timeout))
