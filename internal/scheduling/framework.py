"""Filter -> score -> pick devices, for a whole workload (a gang is all-or-nothing).

``schedule(workload, snapshot, ledger, strategy, rng)`` is pure: it reads the
snapshot and the ledger and returns a Decision; it changes neither. The caller
books a successful decision with ``Decision.assume`` (the workload's attempt owns
the booking), then makes it durable: the bound pod, or ``status.placements``.

The pieces, one module each: ``view`` (the ledger as one decision sees it),
``filters`` (one node's filters and the why-not messages), ``search`` (one search
for a whole workload), ``preemption`` (priority order and victims), ``outcome``
(the Decision). This module puts them together and re-exports their names.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from api.v1alpha1.types import DeviceExposure, GPUWorkload, Placement
from internal.scheduling.filters import (
    CORDON_TAINT,
    NO_SLICES_REASON,
    STALE_REASON,
    filter_node,
    free_text,
    gpus_word,
    group_reasons,
)
from internal.scheduling.gangparts import schedule_parts
from internal.scheduling.ledger import Ledger
from internal.scheduling.outcome import INVALID_MAP, PREEMPT, SCHEDULED, UNSCHEDULABLE, Decision
from internal.scheduling.preemption import MAX_VICTIMS, order_by_priority, plan_preemption
from internal.scheduling.search import (
    EXPLAIN_ALL_BELOW,
    _attempt,
    _explain,
    _exposure,
    _resolve_strategy,
)
from internal.scheduling.sharefilter import wanted
from internal.scheduling.sharefloor import DEFAULT_FLOORS, SHARE_BELOW_MINIMUM, ShareFloors
from internal.scheduling.shares import Portion
from internal.scheduling.snapshot import Snapshot
from internal.scheduling.strategies.base import Strategy
from internal.scheduling.view import Candidate, Context, View

__all__ = [
    "CORDON_TAINT", "EXPLAIN_ALL_BELOW", "INVALID_MAP", "MAX_VICTIMS", "NO_SLICES_REASON",
    "PREEMPT", "SCHEDULED", "STALE_REASON", "UNSCHEDULABLE", "Candidate", "Context",
    "Decision", "View", "filter_node", "free_text", "gpus_word", "group_reasons",
    "order_by_priority", "plan_preemption", "schedule",
]


def schedule(
    workload: GPUWorkload,
    snapshot: Snapshot,
    ledger: Ledger,
    strategy: Strategy | str | None = None,
    rng: random.Random | None = None,
    *,
    default_exposure: DeviceExposure = DeviceExposure.CUDA_VISIBLE_DEVICES,
    across_namespaces: bool = True,
    floors: ShareFloors = DEFAULT_FLOORS,
    then: Sequence[GPUWorkload] = (),
) -> Decision:
    """Decide where every replica of ``workload`` goes. Changes neither the snapshot
    nor the ledger (only roundRobin's cursor moves on success).

    ``strategy``: an instance (keeps state such as roundRobin's cursor), a name,
    or None for the workload's spec.schedulingStrategy. ``rng``: the random source
    of the random strategy (seeded for reproducible decisions).
    ``across_namespaces``: may preemption take workloads of other namespaces (only
    a priority an admin controls may; see preemption.plan_preemption).
    ``floors``: a share below them waits, reason ``ShareBelowMinimum``, whatever
    the devices (internal/scheduling/sharefloor.py).
    ``then``: the gang's later parts, replicas of other shapes placed after
    ``workload``'s in the same search, all or nothing (``gangparts.py``).
    """
    if snapshot.ledger is not ledger:
        snapshot.attach(ledger)
    strat = _resolve_strategy(workload, strategy)
    rng = rng if rng is not None else random.Random(0)
    if then and not strat.uses_map:
        decision = schedule_parts([workload, *then], snapshot, ledger, strat, rng,
                                  default_exposure=default_exposure)
        if decision.ok or not strat.preempts:
            return decision
        return _preempt(decision, plan_preemption(
            workload, snapshot, ledger, strat, decision.counted, across_namespaces,
            then=then, default_exposure=default_exposure), ledger)
    counted = (
        _exposure(workload, default_exposure) is DeviceExposure.DEVICE_PLUGIN and not strat.uses_map
    )
    gpus = workload.spec.gpus
    exposure = _exposure(workload, default_exposure)
    if wanted(workload.spec) is not None and exposure in (DeviceExposure.DEVICE_PLUGIN,
                                                         DeviceExposure.DRA):
        return Decision(UNSCHEDULABLE, strat.name, message=(
            f"gpuShare and migProfile cannot be placed with deviceExposure {exposure.value}: "
            "the kubelet's nvidia.com/gpu count and the DRA claims made here name whole "
            "devices; use cuda-visible-devices or nvidia-visible-devices"))
    want = wanted(workload.spec)
    below = floors.refusal(want) if isinstance(want, Portion) else None
    if below is not None:
        d = Decision(UNSCHEDULABLE, strat.name, message=below)
        d.wait_reason = SHARE_BELOW_MINIMUM
        return d
    placements, ctx, outcome, msg = _attempt(workload, snapshot, ledger, strat, rng, counted)
    if placements is not None:
        strat.placed([p.node for p in placements])
        used = ", ".join(sorted({p.node for p in placements}))
        return Decision(
            SCHEDULED,
            strat.name,
            placements,
            message=f"placed {len(placements)} replica(s) on {used}",
            counted=counted,
            gpus_per_replica=gpus,
            visited=ctx.visited,
        )
    if outcome == INVALID_MAP:
        return Decision(INVALID_MAP, strat.name, message=msg, visited=ctx.visited)
    reasons = dict(ctx.reasons)
    visited = ctx.visited
    if not strat.uses_map:
        reasons, extra = _explain(workload, snapshot, ledger, counted, ctx.reasons)
        visited += extra
    # nodes never filtered were left out by the free-capacity index
    others = 0 if strat.uses_map else max(0, len(snapshot) - len(reasons))
    message = msg + group_reasons(reasons, others=others, need=gpus)
    if workload.spec.replicas > 1 and not strat.uses_map:
        message = (
            f"gang of {workload.spec.replicas} x {gpus} GPU(s) does not fit, "
            f"nothing booked: {message}"
        )
    elif workload.spec.replicas > 1:
        message = f"gang of {workload.spec.replicas} not placed, nothing booked: {message}"
    decision = Decision(
        UNSCHEDULABLE,
        strat.name,
        message=message,
        reasons=reasons,
        counted=counted,
        gpus_per_replica=gpus,
        visited=visited,
    )
    if strat.preempts and wanted(workload.spec) is None:  # shares do not preempt (yet)
        return _preempt(decision, plan_preemption(workload, snapshot, ledger, strat, counted,
                                                  across_namespaces), ledger)
    return decision


def _preempt(decision: Decision, plan: tuple[list[str] | None, list[Placement], int],
             ledger: Ledger) -> Decision:
    """The unschedulable ``decision`` as the preemption ``plan`` turns it: PREEMPT
    with its victims and nominated placements, or as it was when it found none."""
    victims, nominated, visited = plan
    decision.visited += visited
    if victims is not None:
        decision.outcome = PREEMPT
        decision.victims = victims
        decision.overlap = sorted({a.owner for v in victims
                                   if (a := ledger.allocation(v)) is not None})
        decision.placements = nominated
        decision.message = (
            f"preempting lower-priority {', '.join(victims)} to place; was: {decision.message}"
        )
    return decision
