"""A pod group is admitted by the GPUQueue of its namespace, as a GPUWorkload gang
is (docs/podgroups.md, docs/queues.md): the whole group's GPUs at once, against
what the queue's holders use now, with the same pure rules
(``internal/scheduling/quota.py``, ``admission.py``). Asked from the group's plan
(``PlacementState.seeds.book_group``), whose booking is refused as stale when any
holder changed after the plan began, so nothing is booked between the check and
the booking that the check did not count.

| the group's namespace                             | ``group_quota_refusal``            |
| ------------------------------------------------- | ---------------------------------- |
| no queue (no GPUQueues served, or none selects    | None: placed as without queues     |
| it), ``--require-queue`` off                      |                                    |
| no queue, ``--require-queue`` on                  | why: no GPUQueue selects it        |
| a workload of its queue, last refused for quota,  | why: waiting behind that one       |
| ahead of it (priority, then creation) fits now    |                                    |
| the group's GPUs fit the queue's quota (its       | None: planned on the devices       |
| nominal, and what its cohort lends)               |                                    |
| they do not, and a reclaim from the cohort's      | None: planned as a reclaim         |
| borrowers makes room (below)                      | (``plan_in_queue``)                |
| they do not                                       | why, with the queue's numbers      |

A group refused by its quota alone (the last row) **reclaims** as a GPUWorkload
gang does (docs/queues.md, reclaim; ``plan_in_queue``): when its queue would be
within its nominal with the group admitted and cohort peers borrow it, the same
planner (``QueueBook.reclaim``, ``internal/scheduling/reclaim.py``) names the
borrowers to evict under the queue's ``reclaimWithinCohort`` (Any, LowerPriority
than the group's priority, Never), and the group is booked as a nomination over
them (``PlacementState.seeds.book_group``), its members bound once their pods are
gone. Nothing to take: it waits with the quota's numbers, as a workload does.

**Its place in the line**: a group refused for quota (nothing to reclaim) takes
its place in its queue's waiting line (``QueueManager.wait_group``), BestEffortFIFO
as a workload's: by its priority (its members' highest), then its oldest member's
creation; a later workload of the queue waits behind it while it fits the quota
(``admission.queued_behind``), and it behind an earlier one. It leaves the line
when it is admitted, refused for devices only, or a member of it is gone
(``forget``).

The same planner takes lower-priority holders of its own queue under the queue's
``withinQueue: LowerPriority``, and a group admitted (``QueueManager.admit_group``,
its oldest member's creation kept for the reclaim's order) is itself a candidate
of others' reclaims, whole (``QueueBook._candidates``).

A group takes its namespace's first queue (by name): its pods name none. Its
booking (``PodGroup:<ns>/...``) counts against the same queue once placed
(``queue_usage.namespace_of``).

``outside_queue``: a pod of no group that requests ``nvidia.com/gpu`` in a queue's
namespace is not placed one by one (the queue-gpu-pods policy admits such a pod
there only as a group member; one whose group labels were taken off after would
otherwise hold GPUs its queue never admitted).
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import NamedTuple

from api.v1alpha1.types import GPUWorkload
from controllers.placement.seeds import GroupPlan
from controllers.placement.state import PlacementState, PlacementView
from controllers.podbinding.groupplan import group_ledger_key, plan_group, slot_pods
from controllers.podbinding.memberclaims import member_gpus
from controllers.podbinding.seedbook import pod_meta, pod_priority
from internal.objects import JSON
from internal.scheduling.admission import Waiting
from internal.scheduling.outcome import UNSCHEDULABLE, Decision
from internal.scheduling.podgroups import PodGroup
from internal.scheduling.pods import pod_gpu_request


def outside_queue(state: PlacementState, pod: JSON) -> str | None:
    """Why ``pod``, no group member, is not placed one by one: it requests
    ``nvidia.com/gpu`` in a namespace a GPUQueue selects, which the queue-gpu-pods
    policy refuses at creation unless the pod is a group member (one created before
    the queue selected its namespace, or whose group labels were taken off after);
    None for any other pod."""
    queues = state.queues
    if queues is None or pod_gpu_request(pod) <= 0:
        return None
    ns = pod_meta(pod).get("namespace") or "default"
    name = next(iter(queues.selecting(ns)), None)
    if name is None:
        return None
    return (f"namespace {ns} is in GPUQueue {name}: a pod requesting nvidia.com/gpu is "
            "placed here only with its queue's quota, as a GPUWorkload or a pod group's "
            "member (docs/podgroups.md)")


def group_need(pods: list[JSON]) -> Fraction:
    """GPUs a group's ``pods`` (its unbound members, and its members not made yet as
    their template makes them: ``groupplan.slot_pods``) will hold once placed: each
    its own request (a ``dra`` member's, its claims': ``memberclaims.member_gpus``), at
    least one named device (``plan_group``)."""
    return Fraction(sum(max(1, member_gpus(p)) for p in pods))


def oldest(members: list[JSON]) -> str:
    """The group's creation, as its queue orders it: its oldest member's."""
    return min((str(pod_meta(p).get("creationTimestamp") or "") for p in members),
               default="")


class QuotaRefusal(NamedTuple):
    """Why a group's queue refuses it; ``queue`` and ``need`` when its quota alone
    does (a reclaim may then make room), else ""."""

    why: str
    queue: str = ""
    need: Fraction = Fraction(0)
    #: its place in its queue's line (``QueueManager.wait_group``)
    waiting: Waiting | None = None


def group_quota_refusal(state: PlacementState, group: PodGroup, members: list[JSON],
                        reserve: list[int] | None = None) -> QuotaRefusal | None:
    """Why ``group``'s unbound ``members`` (and the slots ``reserve`` for its members
    not made yet, ``leaderfirst.py``) may not be placed by its namespace's queue
    (the table above), or None. Asked in the group's plan (``book_group``)."""
    queues = state.queues
    if queues is None:
        return None
    ns = group.key.split("/", 1)[0]
    name = next(iter(queues.selecting(ns)), None)
    if name is None:
        if queues.require_queue:
            return QuotaRefusal(f"no GPUQueue selects namespace {ns}; this manager admits "
                                "only workloads in a queue (--require-queue)")
        return None
    quotas = queues.quotas()
    q = quotas.get(name)
    if q is None:
        return None  # dropped between the two reads: the next try sees it gone
    used, _ = state.queue_usage()
    need = group_need(slot_pods(group, members, reserve or []))
    me = Waiting(name, max((pod_priority(p) for p in members), default=0),
                 oldest(members), need)
    ahead = queues.manager.ahead(f"PodGroup:{group.key}", me, q, quotas, used)
    if ahead is not None:
        return QuotaRefusal(ahead)
    why = quotas.check(q, need, used)
    return None if why is None else QuotaRefusal(why, name, need, me)


def plan_in_queue(state: PlacementState, view: PlacementView, group: PodGroup,
                  unbound: list[tuple[JSON, PodGroup]], default_strategy: str,
                  reserve: list[int], across: bool) -> GroupPlan:
    """``plan_group`` held to the group's queue (the module's table): as planned
    when the quota admits it; a reclaim from its cohort's borrowers when its
    quota alone refuses it and the reclaim planner finds victims; else why not.
    The group's plan (``book_group``'s)."""
    members = [p for p, _ in unbound]
    over = group_quota_refusal(state, group, members, reserve)
    key = group_ledger_key(group)
    if over is None:
        if state.queues is not None:  # admitted, or in no queue: it waits in no line
            state.queues.manager.admit_group(key, oldest(members))
        return plan_group(view, group, unbound, default_strategy, reserve,
                          lambda m, then: state.seeds.schedule(m, across_namespaces=across,
                                                               then=then))
    if not over.queue:
        return None, over.why, None
    taken: list[Decision] = []

    def reclaim(m: GPUWorkload, then: Sequence[GPUWorkload]) -> Decision:
        d = state.seeds.reclaim(m, key, over.queue, over.need, then)
        if d is None:
            strategy = m.spec.scheduling_strategy
            return Decision(UNSCHEDULABLE, strategy.value if strategy else "leastLoaded",
                            message=over.why)
        taken.append(d)
        return d

    entries, why, preemption = plan_group(view, group, unbound, default_strategy, reserve,
                                          reclaim)
    if entries is None:  # nothing to take; or its members may not preempt (why)
        if over.waiting is not None and state.queues is not None:
            state.queues.manager.wait_group(key, over.waiting)  # its place in the line
        return None, why if taken else over.why, None
    if state.queues is not None:  # admitted by its reclaim
        state.queues.manager.admit_group(key, oldest(members))
    return entries, why, preemption


def forget(state: PlacementState, group_key: str) -> None:
    """A member of the group booked as ``group_key`` is gone: the group, incomplete,
    holds no place in its queue's line (taken again when it is refused again)."""
    if state.queues is not None:
        state.queues.manager.forget_group(group_key)
