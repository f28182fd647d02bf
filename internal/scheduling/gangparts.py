"""A gang whose replicas are not all alike: several *parts*, each a GPUWorkload of its
own shape (GPUs per replica, nodeSelector, tolerations, what node fit reads), placed
one after the other in one search against one ``View``, so that no part takes what an
earlier one took, and all or nothing: a JobSet's launcher and its workers, a
LeaderWorkerSet's leader and its workers (docs/podgroups.md). Pure, as
``framework.schedule``, which hands a gang of parts here.

The replicas' indices run on across the parts (the first part's 0..n-1, the next
part's from n). A preemption's and a reclaim's trials search the same way
(``attempt_gang``, for ``preemption.py`` and ``reclaim.py``); an
annotation map is never used for a gang of parts (a pod group never has one).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence

from api.v1alpha1.types import DeviceExposure, GPUWorkload, Placement
from internal.scheduling.filters import group_reasons
from internal.scheduling.ledger import Ledger, booking_owner
from internal.scheduling.outcome import SCHEDULED, UNSCHEDULABLE, Decision
from internal.scheduling.search import (
    _attempt,
    _explain,
    _exposure,
    _place_searched,
    _tolerations,
)
from internal.scheduling.snapshot import Snapshot
from internal.scheduling.strategies.base import Strategy
from internal.scheduling.view import Context, View


def shape(parts: Sequence[GPUWorkload]) -> str:
    """``1 x 1 + 2 x 4 GPU(s)``: each part's replicas x GPUs per replica."""
    return " + ".join(f"{p.spec.replicas} x {p.spec.gpus}" for p in parts) + " GPU(s)"


def attempt_parts(parts: Sequence[GPUWorkload], snapshot: Snapshot, ledger: Ledger,
                  strat: Strategy, rng: random.Random, *, default_exposure: DeviceExposure,
                  released: Iterable[str] = ()) -> tuple[list[Placement] | None, int, int,
                                                         Context]:
    """One search for every part, against the ledger less what the ``released``
    owners hold (a preemption's trial): (the placements or None, nodes visited,
    the index of the part that did not fit, that part's context; the last part's
    when all fit)."""
    view = View(ledger, booking_owner(parts[0]), released)
    placements: list[Placement] = []
    visited = 0
    for n, part in enumerate(parts):
        counted = _exposure(part, default_exposure) is DeviceExposure.DEVICE_PLUGIN
        ctx = Context(workload=part, gpus=part.spec.gpus, counted=counted, rng=rng,
                      tolerations=_tolerations(part), snapshot=snapshot, view=view,
                      spread=strat.most_free_first)
        got, _ = _place_searched(strat, ctx)
        visited += ctx.visited
        if got is None:
            return None, visited, n, ctx
        placements += [p.model_copy(update={"index": len(placements) + i})
                       for i, p in enumerate(got)]
    return placements, visited, len(parts) - 1, ctx


def attempt_gang(workload: GPUWorkload, then: Sequence[GPUWorkload], snapshot: Snapshot,
                 ledger: Ledger, strat: Strategy, counted: bool, released: Iterable[str], *,
                 default_exposure: DeviceExposure = DeviceExposure.CUDA_VISIBLE_DEVICES,
                 ) -> tuple[list[Placement] | None, int]:
    """One trial of a preemption or a reclaim: the gang searched against the ledger
    less what the ``released`` owners hold, ``workload`` alone as any workload
    (``search._attempt``, a map included), or with its later parts ``then`` as
    ``attempt_parts``; (the placements or None, nodes visited)."""
    if then:
        got, seen, _, _ = attempt_parts([workload, *then], snapshot, ledger, strat,
                                        random.Random(0), default_exposure=default_exposure,
                                        released=released)
        return got, seen
    got, ctx, _, _ = _attempt(workload, snapshot, ledger, strat, random.Random(0), counted,
                              released)
    return got, ctx.visited


def schedule_parts(parts: Sequence[GPUWorkload], snapshot: Snapshot, ledger: Ledger,
                   strat: Strategy, rng: random.Random, *,
                   default_exposure: DeviceExposure) -> Decision:
    """Where every replica of every part goes, booked under the first part's owner
    (each part must name the same), or why the first part that does not fit cannot:
    its per-node reasons are the ledger's alone, without the replicas of the parts
    before it, which the message counts. Plans no preemption (``framework``'s)."""
    placements, visited, n, ctx = attempt_parts(parts, snapshot, ledger, strat, rng,
                                                default_exposure=default_exposure)
    if placements is None:
        part = parts[n]
        reasons, extra = _explain(part, snapshot, ledger, ctx.counted, ctx.reasons)
        before = sum(p.spec.replicas for p in parts[:n])
        after = f", after the {before} replica(s) of the part(s) before it" if before else ""
        message = (f"gang of {shape(parts)} does not fit, nothing booked: part {n + 1} "
                   f"({part.spec.replicas} x {part.spec.gpus} GPU(s){after}): "
                   + group_reasons(reasons, others=max(0, len(snapshot) - len(reasons)),
                                   need=part.spec.gpus))
        return Decision(UNSCHEDULABLE, strat.name, message=message, reasons=reasons,
                        counted=ctx.counted, gpus_per_replica=part.spec.gpus,
                        visited=visited + extra)
    strat.placed([p.node for p in placements])
    used = ", ".join(sorted({p.node for p in placements}))
    return Decision(SCHEDULED, strat.name, placements,
                    message=f"placed {len(placements)} replica(s) on {used}",
                    gpus_per_replica=parts[0].spec.gpus, visited=visited)
