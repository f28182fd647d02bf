"""A group placed before all its members exist, at the members its owner makes
first (``PodGroup.first``; docs/podgroups.md, "LeaderWorkerSet and LeaderReady" and
"JobSet InOrder and dependsOn"): a LeaderWorkerSet group under ``startupPolicy:
LeaderReady``, whose workers the LWS controller makes only once the leader is Ready;
a JobSet under ``startupPolicy: InOrder`` or ``dependsOn`` ``status: Ready``, whose
later replicated jobs the JobSet controller makes only once the earlier ones are.

Waiting for every member, as other groups do, would deadlock it. So, once its
first members exist, the whole group is planned as one gang (``groupplan.plan_group``:
every member's node and devices, under the same strategy, topology, GPUQueue and
priority; the later members' GPUs read from their owner's template) and booked under
the group's key: the members that exist as pods, the others as *reserved slots*
(vacant slots of their index, ``SeedBook``'s). The members that exist are bound; the
Binding of member 0 writes the reserved slots beside its devices
(``gpu.orchestrator.dev/group-slots``), so a restart and ``kubectl gpu nodes`` book
them again from the API. Each later member, when made, takes the slot of its index
(``groups.take_slot``), as a member made again does.

| the group                                           | what happens                        |
| --------------------------------------------------- | ----------------------------------- |
| a member made first does not exist                  | they wait, as any incomplete group  |
| every member made first exists; the whole group     | booked whole, those members bound   |
| fits                                                |                                     |
| it does not (room for the first members alone, a    | nothing held; each member's         |
| queue's quota)                                      | ``FailedScheduling`` says why       |
| member 0 bound; later members not made within the   | ``PodGroupIncomplete`` Warning on   |
| group timeout after it is Ready                     | it, the timeouts metric; the slots  |
|                                                     | stay held (``await_workers``)       |

The slots are held, never free, until the group goes: they go with its last
member (member 0, when no later one came), and a preemption takes the members and
the slots together.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

import structlog

from controllers.podbinding.seedbook import SeedBook, is_group_key, pod_meta
from internal.metrics.domain import POD_GROUP_TIMEOUTS
from internal.objects import JSON
from internal.scheduling.podgroups import PodGroup
from internal.scheduling.pods import pod_uid
from runtime import Result
from runtime.events import EventRecorder

log = structlog.get_logger("podbinding")

#: a reserved slot's key in a group's plan (never a pod's: a name has no '#')
_SLOT_KEY = "{ns}/#slot-{index}"


def slot_key(group: PodGroup, index: int) -> str:
    return _SLOT_KEY.format(ns=group.key.split("/", 1)[0], index=index)


def missing_slots(group: PodGroup, members: list[tuple[JSON, PodGroup]]) -> list[int]:
    """The member indices of a group placed at its first members (``group.first``)
    to reserve now: those no live member has, once every member made first exists;
    [] for any other group, or while one made first does not exist."""
    if not group.first:
        return []
    have = {g.index for _, g in members}
    if any(i not in have for start, stop in group.first for i in range(start, stop)):
        return []
    return [i for i in range(group.size) if i not in have]


def later_ones(group: PodGroup) -> str:
    """Who of ``group`` is made later, and why, in words."""
    if group.leader_first:
        return "workers made only once the leader is Ready (startupPolicy LeaderReady)"
    return (f"members of replicated jobs made only once those before them are ready "
            f"({group.staged_by})")


def to_place(group: PodGroup, unbound: int, reserved: int) -> str:
    """How a refusal counts the members it places (the whole group at its first)."""
    if not reserved:
        return f"{unbound} of {group.size} members to place"
    held_with = "it" if group.leader_first else "them"
    return (f"{unbound + reserved} of {group.size} members to place, {reserved} of them "
            f"{later_ones(group)}, whose room is held with {held_with}")


def waiting_note(group: PodGroup) -> str:
    """What a waiting member of a group placed at its first members adds, else ""."""
    if group.leader_first:
        return (" (startupPolicy LeaderReady: the group is placed whole once its "
                "leader exists, its workers' slots held for them)")
    if group.first:
        return (f" ({group.staged_by}: the group is placed whole once the members "
                f"made first exist, the later ones' slots held for them)")
    return ""


def ready_since(pod: JSON) -> datetime | None:
    """When ``pod`` became Ready (its Ready condition's lastTransitionTime), or None."""
    for c in (pod.get("status") or {}).get("conditions") or ():
        if isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "True":
            try:
                return datetime.fromisoformat(str(c.get("lastTransitionTime"))
                                              .replace("Z", "+00:00"))
            except ValueError:
                return None
    return None


def await_workers(book: SeedBook, recognise: Callable[[JSON], object], recorder: EventRecorder,
                  late_once: Callable[[str], bool], timeout: float, pod: JSON, key: str,
                  now: datetime) -> Result | None:
    """A bound pod: when it is member 0 of a group placed at its first members
    (an LWS leader, a JobSet's first member) whose reserved slots no member has
    taken, look again until the group timeout after it became Ready, then say so once
    (``PodGroupIncomplete`` on it, ``gpu_orchestrator_pod_group_timeouts_total``).
    The slots stay held: the owner makes the later members once the first are
    Ready, and remakes the whole group on a failure. None when there is nothing to
    watch."""
    held = book.entry(key)
    if held is None or not is_group_key(held.ledger_key):
        return None
    waiting = sorted(v.slot or 0 for v in book.vacancies(held.ledger_key) if v.reserved)
    if not waiting:
        return None
    group = recognise(pod)
    if not isinstance(group, PodGroup) or not group.first or group.index != 0:
        return None
    ready = ready_since(pod)
    if ready is None:
        return Result(requeue_after=min(10.0, max(timeout, 0.5)))
    waited = (now - ready).total_seconds()
    if waited < timeout:
        return Result(requeue_after=min(10.0, max(0.5, timeout - waited)))
    if late_once(f"{group.key}/{pod_uid(pod)}"):
        POD_GROUP_TIMEOUTS.inc()
        log.warning("group.workers_late", group=group.key, leader=key, slots=waiting,
                    waited=round(waited, 1))
        name = pod_meta(pod).get("name")
        who = ("worker", "leader") if group.leader_first else ("member", "member")
        recorder.warning(pod, "PodGroupIncomplete", (
            f"pod group {group.key}: no {who[0]} has come for slot(s) "
            f"{','.join(map(str, waiting))} {waited:.0f} s after {who[1]} {name} became Ready "
            f"(more than {timeout:.0f} s); their devices stay held for them until the group "
            f"is deleted or made again"))
    return None
