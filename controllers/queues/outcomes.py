"""The decisions the queue gate hands back (``controllers/queues/book.py``): a wait
with its reason, a reclaim, a priority preemption kept within a queue; and what a
workload will hold before it is placed."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from api.v1alpha1.types import GPUWorkload
from internal.scheduling.framework import PREEMPT, UNSCHEDULABLE, Decision
from internal.scheduling.quota import Candidate, Queue, gpus_text
from internal.scheduling.sharefloor import DEFAULT_FLOORS, ShareFloors
from internal.scheduling.shares import parse_fraction


def workload_need(w: GPUWorkload, floors: ShareFloors = DEFAULT_FLOORS) -> Fraction:
    """GPUs ``w`` will hold, before it is placed (a memory share counts whole; a
    fraction at least the share floor, as if each replica had a device of its own)."""
    share = w.spec.gpu_share
    if share is not None and share.fraction:
        return w.spec.replicas * floors.counted(parse_fraction(share.fraction))
    if share is not None or w.spec.mig_profile:
        return Fraction(w.spec.replicas)
    return Fraction(w.spec.replicas * w.spec.gpus)


def not_across_queues(decision: Decision) -> Decision:
    """Priority preemption stays within a queue: another queue's workloads hold its
    quota, taken back only by reclaim (of what they borrowed)."""
    was = decision.message.split("; was: ", 1)[-1]
    d = Decision(UNSCHEDULABLE, decision.strategy, message=was, counted=decision.counted,
                 gpus_per_replica=decision.gpus_per_replica, visited=decision.visited)
    d.queue = decision.queue
    return d


def wait(strategy: str, queue: str | None, reason: str, message: str) -> Decision:
    d = Decision(UNSCHEDULABLE, strategy, message=message)
    d.queue, d.wait_reason = queue, reason
    return d


def reclaiming(decision: Decision, key: str, q: Queue, need: Fraction,
                victims: list[Candidate], placements: list[Any]) -> Decision:
    keys = [v.key for v in victims]
    others = sorted({v.queue for v in victims if v.queue != q.name})
    if others:
        decision.message = (f"reclaiming {gpus_text(need)} GPU(s) of queue {q.name}'s quota "
                            f"lent to {', '.join(others)}: preempting {', '.join(keys)}")
        decision.evict_message = (f"reclaimed by queue {q.name} for {key}; "
                                  "waiting to be placed again")
    else:
        decision.message = (f"preempting lower-priority {', '.join(keys)} within queue "
                            f"{q.name} to fit its quota")
        decision.evict_message = (f"preempted by {key} within queue {q.name} to fit its "
                                  "quota; waiting to be placed again")
    decision.outcome = PREEMPT
    decision.victims = keys
    decision.overlap = sorted({v.owner for v in victims})
    decision.placements = list(placements)
    return decision
