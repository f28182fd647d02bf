"""A pod group as a preemptor (docs/podgroups.md, "How a group preempts"): the rules
a GPUWorkload gang's preemption is held to, read from the group's members.

- **Its priority** is its members' highest pod priority (``spec.priority``, which
  the Priority admission plugin sets from their PriorityClass), as its booking's.
- **It preempts only with the ``priority`` strategy** (the members'
  ``gpu.orchestrator.dev/strategy`` annotation, else the manager's default), as a
  GPUWorkload does, and only strictly lower-priority holders: GPUWorkloads, other
  groups (their one booking: every member, never some), seed pods.
- **Not when a member says ``preemptionPolicy: Never``** (its PriorityClass's):
  the group then waits for room as any other.
- **Other namespaces' holders only with an admin's priority**: every member's
  priority comes from a PriorityClass (``spec.priorityClassName``; a tenant picks
  an existing class, never its value), as a GPUWorkload's ``priorityClassName``.
- **Whole or nothing**: the PodDisruptionBudgets over the seed-path victims'
  pods must let them all go (``groupevict.budget_refusal``, asked outside the
  placement lock before the booking), else nothing is booked and nobody evicted.

The booking itself (a nomination over the victims, their eviction in the same
locked step) is ``PlacementState.seeds.book_group``'s.
"""

from __future__ import annotations

from collections.abc import Iterable

from controllers.placement.seeds import Preemption
from controllers.podbinding.seedbook import pod_priority, pod_spec
from internal.objects import JSON, object_key
from internal.scheduling.outcome import Decision

#: a member's ``spec.preemptionPolicy`` that forbids preempting
NEVER = "Never"


def group_priority(members: Iterable[JSON]) -> int:
    """The group's priority: its members' highest (0 when none says one)."""
    return max((pod_priority(p) for p in members), default=0)


def admin_priority(members: Iterable[JSON]) -> bool:
    """May the group preempt holders of other namespaces: does every member's
    priority come from a PriorityClass (an admin's object)?"""
    pods = list(members)
    return bool(pods) and all(pod_spec(p).get("priorityClassName") for p in pods)


def refuses_preemption(members: Iterable[JSON]) -> str | None:
    """The first member (``ns/name``) whose ``preemptionPolicy`` is Never, or None."""
    for p in members:
        if pod_spec(p).get("preemptionPolicy") == NEVER:
            return object_key(p)
    return None


def was(decision: Decision) -> str:
    """Why ``decision``'s gang did not fit as things are (a preemption's message
    says it after ``was:``)."""
    return decision.message.split("; was: ", 1)[-1]


def preempting_text(group: str, priority: int, preemption: Preemption) -> str:
    """The members' ``Preempting`` Event (a reclaim says its queue's numbers)."""
    if preemption.reclaim:
        return (f"pod group {group} (priority {priority}): {preemption.reclaim}; its "
                f"members are bound once they are gone from its devices")
    return (f"pod group {group} (priority {priority}) preempts lower-priority "
            f"{', '.join(preemption.victims)} to place; its members are bound once "
            f"they are gone from its devices")


def waiting_text(group: str, blockers: dict[str, list[str]]) -> str:
    """What a member of a nominated group waits for, node by node."""
    where = "; ".join(f"{', '.join(held)} on {node}" for node, held in sorted(blockers.items()))
    return f"pod group {group} is nominated over preempted holders: waiting for {where} to go"
