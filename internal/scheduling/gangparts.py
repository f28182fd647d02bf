"""A gang whose replicas are not all alike: several *parts*, each a GPUWorkload of its
own shape (GPUs per replica, nodeSelector, tolerations, what node fit reads), placed
one after the other in one search against one ``View``, so that no part takes what an
earlier one took, and all or nothing: a JobSet's launcher and its workers, a
LeaderWorkerSet's leader and its workers (docs/podgroups.md). Pure, as
``framework.schedule``, which hands a gang of parts here.

The replicas' indices run on across the parts (the first part's 0..n-1, the next
part's from n). The parts are searched in their order; if that does not fit, once
more with the parts of the most GPUs per replica first, their indices kept: a
1-GPU launcher searched first goes where the strategy sends it (leastLoaded: the
most free node), which may be the node a 4-GPU worker needed, and the gang was
refused with room for it. No other order is tried. A preemption's and a reclaim's
trials search the same way (``attempt_gang``, for ``preemption.py`` and
``reclaim.py``); an annotation map is never used for a gang of parts (a pod group
never has one).
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


def _orders(parts: Sequence[GPUWorkload]) -> list[list[int]]:
    """The orders the parts are searched in: as given, then the most GPUs per replica
    first (ties as given) when that is another."""
    given = list(range(len(parts)))
    largest = sorted(given, key=lambda n: -parts[n].spec.gpus)
    return [given] if largest == given else [given, largest]


def _search(parts: Sequence[GPUWorkload], order: list[int], snapshot: Snapshot,
            ledger: Ledger, strat: Strategy, rng: random.Random,
            default_exposure: DeviceExposure, released: Iterable[str],
            ) -> tuple[list[Placement] | None, int, int, Context]:
    """One search of the parts in ``order`` against a fresh view: as
    ``attempt_parts``, each replica indexed as in the parts' own order."""
    view = View(ledger, booking_owner(parts[0]), released)
    starts = [sum(p.spec.replicas for p in parts[:n]) for n in range(len(parts))]
    placements: list[Placement] = []
    visited = 0
    for n in order:
        part = parts[n]
        counted = _exposure(part, default_exposure) is DeviceExposure.DEVICE_PLUGIN
        ctx = Context(workload=part, gpus=part.spec.gpus, counted=counted, rng=rng,
                      tolerations=_tolerations(part), snapshot=snapshot, view=view,
                      spread=strat.most_free_first)
        got, _ = _place_searched(strat, ctx)
        visited += ctx.visited
        if got is None:
            return None, visited, n, ctx
        placements += [p.model_copy(update={"index": starts[n] + i})
                       for i, p in enumerate(got)]
    return sorted(placements, key=lambda p: p.index), visited, len(parts) - 1, ctx


def attempt_parts(parts: Sequence[GPUWorkload], snapshot: Snapshot, ledger: Ledger,
                  strat: Strategy, rng: random.Random, *, default_exposure: DeviceExposure,
                  released: Iterable[str] = ()) -> tuple[list[Placement] | None, int, int,
                                                         Context]:
    """The search of every part, against the ledger less what the ``released``
    owners hold (a preemption's trial), in each of ``_orders`` until one fits:
    (the placements or None, nodes visited in all, the index of the part that did
    not fit in the parts' own order, that part's context; the last context when all
    fit)."""
    visited = 0
    refused: tuple[int, Context] | None = None  # the first order's: what the user reads
    for order in _orders(parts):
        got, seen, at, ctx = _search(parts, order, snapshot, ledger, strat, rng,
                                     default_exposure, released)
        visited += seen
        if got is not None:
            return got, visited, at, ctx
        refused = refused or (at, ctx)
    assert refused is not None
    return None, visited, *refused


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
