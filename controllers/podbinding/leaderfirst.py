"""A group placed at its leader: a LeaderWorkerSet group under ``startupPolicy:
LeaderReady``, whose workers the LWS controller makes only once the leader is Ready
(``PodGroup.leader_first``; docs/podgroups.md, "LeaderWorkerSet and LeaderReady").

Waiting for every member, as other groups do, would deadlock it. So, once its
leader exists, the whole group is planned as one gang (``groups.plan_group``: every
member's node and devices, under the same strategy, topology, GPUQueue and
priority; the workers' GPUs read from the LWS's worker template) and booked under
the group's key: the members that exist as pods, the others as *reserved slots*
(vacant slots of their worker index, ``SeedBook``'s). Only the leader is bound; its
Binding writes the reserved slots beside its devices
(``gpu.orchestrator.dev/group-slots``), so a restart and ``kubectl gpu nodes`` book
them again from the API. Each worker, when made, takes the slot of its index
(``groups.take_slot``), as a member made again does.

| the leader's group                                  | what happens                        |
| --------------------------------------------------- | ----------------------------------- |
| the leader does not exist (only workers)            | they wait, as any incomplete group  |
| the leader exists; the whole group fits             | booked whole, the leader bound      |
| it does not (room for the leader alone, a queue's   | nothing held; the leader's          |
| quota)                                              | ``FailedScheduling`` says why       |
| bound; workers not made within the group timeout    | ``PodGroupIncomplete`` Warning on   |
| after the leader is Ready                           | the leader, the timeouts metric; the|
|                                                     | slots stay held (``await_workers``) |

The slots are held, never free, until the group goes: they go with its last
member (the leader, when no worker came), and a preemption takes the leader and
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
    """The member indices of a ``leader_first`` group to reserve now: those no live
    member has, once its leader (index 0) exists; [] for any other group, or while
    the leader does not exist."""
    if not group.leader_first:
        return []
    have = {g.index for _, g in members}
    if 0 not in have:
        return []
    return [i for i in range(group.size) if i not in have]


def to_place(group: PodGroup, unbound: int, reserved: int) -> str:
    """How a refusal counts the members it places (the whole group at its leader)."""
    if not reserved:
        return f"{unbound} of {group.size} members to place"
    return (f"{unbound + reserved} of {group.size} members to place, {reserved} of them "
            f"workers made only once the leader is Ready (startupPolicy LeaderReady), "
            f"whose room is held with it")


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
    """A bound pod: when it is a leader whose reserved slots no worker has taken,
    look again until the group timeout after it became Ready, then say so once
    (``PodGroupIncomplete`` on the leader, ``gpu_orchestrator_pod_group_timeouts_total``).
    The slots stay held: the LWS controller makes the workers once the leader is
    Ready, and remakes the whole group on a failure. None when there is nothing to
    watch."""
    held = book.entry(key)
    if held is None or not is_group_key(held.ledger_key):
        return None
    waiting = sorted(v.slot or 0 for v in book.vacancies(held.ledger_key) if v.reserved)
    if not waiting:
        return None
    group = recognise(pod)
    if not isinstance(group, PodGroup) or not group.leader_first or group.index != 0:
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
        recorder.warning(pod, "PodGroupIncomplete", (
            f"pod group {group.key}: no worker has come for slot(s) "
            f"{','.join(map(str, waiting))} {waited:.0f} s after leader {name} became Ready "
            f"(more than {timeout:.0f} s); their devices stay held for them until the group "
            f"is deleted or made again"))
    return None
